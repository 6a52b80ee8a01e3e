#include "dataplane/pipeline/to_remote_host.hh"

#include "dataplane/overlay/ipv6_packet.hh"
#include "dataplane/overlay/vnic_mark.hh"
#include "dataplane/overlay/vxlan.hh"

namespace jakiro {

namespace {

// `inner_tos` and `source_port` were read from the inner header, which stays put.
bool encapsulate_inner(worker_context& ctx, const datapath_tables& tables, uint16_t vnic_slot,
                       const overlay::vlt_entry& remote, rte_mbuf* m, uint8_t inner_tos,
                       uint16_t source_port) {
    const auto remote_mac = ctx.neighbors->mac(remote.neighbor);
    if (!remote_mac) {
        ctx.drop(m, drop_reason::underlay_neighbor_unresolved, vnic_slot);
        return false;
    }
    auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
    eth->dst_addr = remote.has_inner_mac ? remote.inner_mac : tables.gateway_mac;
    const overlay::tunnel_endpoints ends{tables.underlay_mac, *remote_mac, tables.underlay_ip,
                                         remote.host_ip};
    const uint32_t vni = tables.vni_of_vpc[tables.vnics[vnic_slot].vpc];
    if (!overlay::encapsulate(m, ends, vni, inner_tos, source_port)) {
        ctx.drop(m, drop_reason::tenant_too_big, vnic_slot);
        return false;
    }
    if ((m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) == 0) {
        ctx.counters.encapsulated.add(1);
    }
    overlay::mark_vnic(m, vnic_slot);  // sealing it is the vNIC's work too
    return true;
}

}  // namespace

bool encapsulate_to_remote_host(worker_context& ctx, const datapath_tables& tables,
                                uint16_t vnic_slot, const overlay::vlt_entry& remote, rte_mbuf* m,
                                const rte_ipv4_hdr* inner_ip, uint32_t inner_ip_len) {
    return encapsulate_inner(ctx, tables, vnic_slot, remote, m, inner_ip->type_of_service,
                             overlay::flow_entropy_port(inner_ip, inner_ip_len));
}

bool encapsulate_to_remote_host(worker_context& ctx, const datapath_tables& tables,
                                uint16_t vnic_slot, const overlay::vlt_entry& remote, rte_mbuf* m,
                                const rte_ipv6_hdr* inner_ip, uint32_t inner_ip_len) {
    return encapsulate_inner(ctx, tables, vnic_slot, remote, m,
                             overlay::ipv6_traffic_class(inner_ip),
                             overlay::ipv6_flow_entropy_port(inner_ip, inner_ip_len));
}

bool encapsulate_to_remote_host6(worker_context& ctx, const datapath_tables& tables,
                                 uint16_t vnic_slot, const overlay::vlt_entry& remote, rte_mbuf* m,
                                 const uint8_t* inner_ip6, uint32_t inner_ip_len) {
    return encapsulate_to_remote_host(ctx, tables, vnic_slot, remote, m,
                                      reinterpret_cast<const rte_ipv6_hdr*>(inner_ip6),
                                      inner_ip_len);
}

}  // namespace jakiro
