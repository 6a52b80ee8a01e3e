#pragma once
// The Ethernet face never carries RoCE (docs/threat-model.md): RoCEv2 for a vNIC comes only from
// its RoCE engine, which checks every connection against the security groups and the RCFT. A tenant
// that crafted UDP to or from port 4791 (BTH + RETH, or a CNP) with a raw socket would otherwise
// cross the fabric like any UDP and meet a peer's engine, or a tenant stack, as RoCE (the ReDMArk
// attack class). Both pipelines drop such frames as `tenant_roce`.
//
// Fragments: only a first fragment (offset 0) carries the UDP ports, and it is judged here like
// a whole datagram. Later fragments carry no ports; the firewall drops every IPv4 fragment
// (`fragment`) and the ingress hands the engine only unfragmented datagrams, so pieces of a
// datagram to 4791 can neither be reassembled into RoCE nor reach an engine.

#include <netinet/in.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <cstdint>

#include "rnic/wire/headers.hh"

namespace jakiro {

// True for UDP whose source or destination port is RoCEv2's, in a datagram or a first fragment
// whose UDP header is all there (`ip` passed ipv4_header_sane; `ip_len` is its total length).
inline bool udp_touches_roce_port(const rte_ipv4_hdr* ip, uint32_t ip_len) {
    const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
    if (ip->next_proto_id != IPPROTO_UDP || ip_len < ihl + sizeof(rte_udp_hdr) ||
        (ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_OFFSET_MASK)) != 0) {
        return false;
    }
    const auto* udp =
        reinterpret_cast<const rte_udp_hdr*>(reinterpret_cast<const uint8_t*>(ip) + ihl);
    constexpr rte_be16_t roce = RTE_BE16(rnic::roce_udp_port);
    return udp->src_port == roce || udp->dst_port == roce;
}

}  // namespace jakiro
