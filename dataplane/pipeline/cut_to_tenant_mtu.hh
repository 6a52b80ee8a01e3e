#pragma once
// A super-frame for a tenant port that takes none (af_packet, memif; a vnet face takes it
// whole) leaves cut to the tenant MTU again: ingress.cc for what GRO merged from the fabric,
// local_delivery.hh for what a vNIC on this host sent.

#include <rte_mbuf.h>

#include "../overlay/superframe.hh"
#include "../tables.hh"
#include "../worker/worker_context.hh"

namespace jakiro {

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
