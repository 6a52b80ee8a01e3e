#pragma once
// What the pipeline reads and writes of an inner IPv6 packet that it forwards: its traffic
// class (DSCP and ECN, the IPv4 TOS byte's counterpart), the outer UDP source port hashed from
// its 5-tuple, and RoCEv2's port. The pipeline forwards only IPv6 packets whose next header is
// TCP, UDP or ICMPv6 right after the fixed header (egress.cc, ingress.cc), so the transport
// header is always at `ip + 1`.

#include <rte_hash_crc.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dataplane/overlay/vxlan.hh"
#include "rnic/wire/headers.hh"

namespace jakiro::overlay {

// The IANA dynamic range, as for IPv4 (vxlan.cc).
constexpr uint16_t ipv6_entropy_port_base = 49152;

inline uint8_t ipv6_traffic_class(const rte_ipv6_hdr* ip) {
    return static_cast<uint8_t>(rte_be_to_cpu_32(ip->vtc_flow) >> 20);
}

inline void set_ipv6_ecn(rte_ipv6_hdr* ip, uint8_t ecn) {
    const uint32_t v = rte_be_to_cpu_32(ip->vtc_flow);
    ip->vtc_flow =
        rte_cpu_to_be_32((v & ~(uint32_t{0x03} << 20)) | (static_cast<uint32_t>(ecn & 0x03) << 20));
}

// The outer UDP source port for `ip` (RFC 7348 §5 entropy, as overlay::flow_entropy_port does
// for IPv4): addresses, next header and, for TCP and UDP, the ports.
inline uint16_t ipv6_flow_entropy_port(const rte_ipv6_hdr* ip, uint32_t ip_len) {
    uint32_t hash = ip->proto;
    for (unsigned i = 0; i < 32; i += 8) {
        uint64_t word;
        // src_addr, then dst_addr: 32 bytes in a row.
        std::memcpy(&word,
                    reinterpret_cast<const uint8_t*>(ip) + offsetof(rte_ipv6_hdr, src_addr) + i,
                    sizeof(word));
        hash = rte_hash_crc_8byte(word, hash);
    }
    if ((ip->proto == IPPROTO_TCP || ip->proto == IPPROTO_UDP) &&
        ip_len >= sizeof(rte_ipv6_hdr) + 4) {
        uint32_t ports;
        std::memcpy(&ports, ip + 1, sizeof(ports));
        hash = rte_hash_crc_4byte(ports, hash);
    }
    return static_cast<uint16_t>(ipv6_entropy_port_base + (hash & 0x3fff));
}

inline bool ipv6_udp_touches_roce_port(const rte_ipv6_hdr* ip, uint32_t ip_len) {
    if (ip->proto != IPPROTO_UDP || ip_len < sizeof(rte_ipv6_hdr) + sizeof(rte_udp_hdr)) {
        return false;
    }
    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(ip + 1);
    constexpr rte_be16_t roce = RTE_BE16(rnic::roce_udp_port);
    return udp->src_port == roce || udp->dst_port == roce;
}

}  // namespace jakiro::overlay
