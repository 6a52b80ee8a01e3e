#pragma once
// Everything one lcore owns while it polls: its counters, its transmit batches and references
// to the shared, thread-safe pieces it may touch. One per worker, never shared.

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <memory>

#include "dataplane/counters.hh"
#include "dataplane/overlay/underlay_neighbors.hh"
#include "dataplane/worker/overlay_reply_buckets.hh"
#include "dataplane/worker/packet_rate_buckets.hh"
#include "dataplane/worker/tx_batch.hh"
#include "secgroup/flow_table.hh"

namespace jakiro {

namespace overlay::sealing {
class uplink_sealing;
}  // namespace overlay::sealing

namespace rnic {
class engine;
class packet_port;
}  // namespace rnic
class egress_shaper;
class ingress_policer;

class worker_handoff;

struct alignas(RTE_CACHE_LINE_SIZE) worker_context {
    lcore_counters counters;
    uint8_t id = 0;                     // the worker's number; vnic_view::worker names the owner
    worker_handoff* handoff = nullptr;  // to the other workers; null: this is the only one
    tx_batch tx;
    overlay::underlay_neighbors* neighbors = nullptr;
    rte_mempool* pool = nullptr;
    // 64 KB mbufs (vnet_face: the super-frame pool), for the RNIC's super-datagrams; null when
    // the uplink is not a face.
    rte_mempool* superframes = nullptr;
    std::unique_ptr<secgroup::flow_table> flows;  // this worker's NFT
    rnic::engine* engine = nullptr;               // the RDMA face; null: RoCE is dropped
    // Where the engine's frames go (rnic_glue/roce_port, which the poll loop also drives by its
    // own name); the stages need only the RNIC's interface, so the context sits below the glue.
    rnic::packet_port* rdma_port = nullptr;
    egress_shaper* shaper = nullptr;     // DHTB egress; null: nothing is shaped
    ingress_policer* policer = nullptr;  // DHTB ingress; null: nothing is metered
    packet_rate_buckets packet_rates;    // its vNICs' frames-per-second allowances
    overlay_reply_buckets nd_replies;    // advertisements into the tunnel, per remote host
    overlay_reply_buckets arp_replies;   // ARP replies into the tunnel, per remote host
    // The sealed overlay (overlay/sealing/uplink_sealing.hh): set on the uplink's worker when
    // the YAML seals anything; it opens what the fabric sends and its tx batch seals what goes
    // to the uplink. Null: plain VXLAN, no cost.
    overlay::sealing::uplink_sealing* sealing = nullptr;

    void drop(rte_mbuf* m, drop_reason reason) {
        counters.drops[static_cast<std::size_t>(reason)].add(1);
        rte_pktmbuf_free(m);
    }
    // A drop charged to a vNIC as well, so `jakiroctl stats` can say whose traffic it was.
    void drop(rte_mbuf* m, drop_reason reason, uint16_t vnic_slot) {
        counters.vnics[vnic_slot].drops.add(1);
        drop(m, reason);
    }
};

}  // namespace jakiro
