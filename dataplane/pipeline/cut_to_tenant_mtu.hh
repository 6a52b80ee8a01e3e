#pragma once
// The last steps of every frame to a tenant, from the fabric (ingress.cc) or from a vNIC on
// this host (local_delivery.hh): addressed and counted; and a super-frame for a tenant port
// that takes none (af_packet, memif; a vnet face takes it whole) cut to the tenant MTU again.

#include <rte_mbuf.h>

#include "dataplane/overlay/superframe.hh"
#include "dataplane/tables.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

// Frame `m` of `frame_len` bytes leaves for vNIC `slot`'s tenant: from the gateway's MAC to
// the vNIC's, counted as delivered to it. Returns the vNIC.
inline const vnic_view& address_to_tenant(worker_context& ctx, const datapath_tables& tables,
                                          uint16_t slot, rte_mbuf* m, uint32_t frame_len) {
    const vnic_view& vnic = tables.vnics[slot];
    auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
    eth->dst_addr = vnic.mac;
    eth->src_addr = tables.gateway_mac;
    auto& to_tenant = ctx.counters.vnics[slot];
    to_tenant.to_tenant_packets.add(1);
    to_tenant.to_tenant_bytes.add(frame_len);
    return vnic;
}

// Passes each frame cut from `m` to `send(frame)`; an empty pool is a counted drop.
template <typename Send>
void cut_to_tenant_mtu(worker_context& ctx, const datapath_tables& tables, rte_mbuf* m,
                       Send&& send) {
    rte_mbuf* frames[overlay::max_merged];
    const int n = overlay::segment_superframe(
        m, false, static_cast<uint16_t>(tables.tenant_mtu + sizeof(rte_ether_hdr)), ctx.pool,
        frames, overlay::max_merged);
    if (n < 0) {
        ctx.counters.drops[static_cast<std::size_t>(drop_reason::segmentation_no_mbufs)].add(1);
        return;
    }
    for (int f = 0; f < n; ++f) {
        send(frames[f]);
    }
}

}  // namespace jakiro
