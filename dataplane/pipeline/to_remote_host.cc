#include "dataplane/pipeline/to_remote_host.hh"

#include <netinet/in.h>
#include <rte_hash_crc.h>

#include <cstring>

#include "dataplane/overlay/vxlan.hh"

namespace jakiro {

namespace {

// RFC 7348 §5 entropy for an inner IPv6 packet, as flow_entropy_port is for IPv4: its addresses,
// next header and, for TCP and UDP, ports, folded into 49152-65535.
uint16_t flow_entropy_port6(const uint8_t* ip6, uint32_t len) {
    uint32_t hash = rte_hash_crc(ip6 + 8, 32, ip6[6]);
    if ((ip6[6] == IPPROTO_TCP || ip6[6] == IPPROTO_UDP) && len >= 40 + 4) {
        uint32_t ports;
        std::memcpy(&ports, ip6 + 40, sizeof(ports));
        hash = rte_hash_crc_4byte(ports, hash);
    }
    return static_cast<uint16_t>(0xC000 | (hash & 0x3fff));
}

}  // namespace

bool encapsulate_to_remote_host6(worker_context& ctx, const datapath_tables& tables,
                                 uint16_t vnic_slot, const overlay::vlt_entry& remote, rte_mbuf* m,
                                 const uint8_t* inner_ip6, uint32_t inner_ip_len) {
    const auto remote_mac = ctx.neighbors->mac(remote.neighbor);
    if (!remote_mac) {
        ctx.drop(m, drop_reason::underlay_neighbor_unresolved, vnic_slot);
        return false;
    }
    auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
    eth->dst_addr = remote.has_inner_mac ? remote.inner_mac : tables.gateway_mac;
    const overlay::tunnel_endpoints ends{tables.underlay_mac, *remote_mac, tables.underlay_ip,
                                         remote.host_ip};
    // Read before encapsulate: the traffic class and the ports are in the inner header.
    const auto traffic_class = static_cast<uint8_t>((inner_ip6[0] << 4) | (inner_ip6[1] >> 4));
    const uint16_t source_port = flow_entropy_port6(inner_ip6, inner_ip_len);
    const uint32_t vni = tables.vni_of_vpc[tables.vnics[vnic_slot].vpc];
    if (!overlay::encapsulate(m, ends, vni, traffic_class, source_port)) {
        ctx.drop(m, drop_reason::tenant_too_big, vnic_slot);
        return false;
    }
    ctx.counters.encapsulated.add(1);
    return true;
}

bool encapsulate_to_remote_host(worker_context& ctx, const datapath_tables& tables,
                                uint16_t vnic_slot, const overlay::vlt_entry& remote, rte_mbuf* m,
                                const rte_ipv4_hdr* inner_ip, uint32_t inner_ip_len) {
    const auto remote_mac = ctx.neighbors->mac(remote.neighbor);
    if (!remote_mac) {
        ctx.drop(m, drop_reason::underlay_neighbor_unresolved, vnic_slot);
        return false;
    }
    auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
    eth->dst_addr = remote.has_inner_mac ? remote.inner_mac : tables.gateway_mac;
    const overlay::tunnel_endpoints ends{tables.underlay_mac, *remote_mac, tables.underlay_ip,
                                         remote.host_ip};
    // Read before encapsulate: the TOS and the ports are in the inner header, which stays put.
    const uint8_t inner_tos = inner_ip->type_of_service;
    const uint16_t source_port = overlay::flow_entropy_port(inner_ip, inner_ip_len);
    const uint32_t vni = tables.vni_of_vpc[tables.vnics[vnic_slot].vpc];
    if (!overlay::encapsulate(m, ends, vni, inner_tos, source_port)) {
        ctx.drop(m, drop_reason::tenant_too_big, vnic_slot);
        return false;
    }
    if ((m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) == 0) {
        ctx.counters.encapsulated.add(1);
    }
    return true;
}

}  // namespace jakiro
