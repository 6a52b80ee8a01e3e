#include "dataplane/worker/fabric_dispatch.hh"

#include <rte_ip.h>
#include <rte_udp.h>

#include "dataplane/overlay/vxlan.hh"
#include "rnic/wire/headers.hh"

namespace jakiro {

uint8_t fabric_frame_owner(const datapath_tables& tables, const rte_mbuf* m,
                           uint8_t uplink_worker) {
    const uint32_t first = rte_pktmbuf_data_len(m);  // GRO chains: headers are in the first
    const auto* frame = rte_pktmbuf_mtod(m, const uint8_t*);
    if (first < overlay::outer_header_bytes) {
        return uplink_worker;
    }
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) ||
        !rte_is_same_ether_addr(&eth->dst_addr, &tables.underlay_mac)) {
        return uplink_worker;
    }
    // As the ingress pipeline does: the outer lengths describe the whole chain GRO made, whose
    // first segment holds every header (checked below before the inner ones are read).
    const auto check = overlay::check_outer(frame, rte_pktmbuf_pkt_len(m), tables.underlay_ip);
    if (!check.ok) {
        return uplink_worker;
    }
    const uint32_t inner = check.view.inner_offset;
    if (first < inner + sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr)) {
        return uplink_worker;
    }
    const auto* inner_eth = reinterpret_cast<const rte_ether_hdr*>(frame + inner);
    const bool ipv6 = inner_eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
    if ((!ipv6 && inner_eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) ||
        (ipv6 && first < inner + sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr))) {
        return uplink_worker;
    }
    const uint32_t vpc = tables.vpcs->find(check.view.vni);
    if (vpc == no_vpc) {
        return uplink_worker;
    }
    // IPv6 goes to its vNIC's worker as IPv4 does: that worker's NFT holds the vNIC's flows (a
    // reply must meet the entry its request made), its meter the vNIC's share, its engine the
    // QPs RoCE v2 over IPv6 is for. A neighbour solicitation to a vNIC's address goes with it;
    // a multicast one stays with the uplink's worker; either worker answers it.
    const overlay::vlt_entry* dst =
        ipv6 ? tables.vlt->lookup6(vpc,
                                   reinterpret_cast<const rte_ipv6_hdr*>(inner_eth + 1)->dst_addr)
             : tables.vlt->lookup(vpc,
                                  reinterpret_cast<const rte_ipv4_hdr*>(inner_eth + 1)->dst_addr);
    if (dst == nullptr || dst->kind != overlay::vlt_kind::local_vnic ||
        dst->vnic >= tables.vnics.size()) {
        return uplink_worker;
    }
    return tables.vnics[dst->vnic].worker;
}

}  // namespace jakiro
