#pragma once
// The poll loop of one worker lcore: rx bursts from every port it owns, the pipelines, batched
// tx, RCU quiescent reports, the ARP resolution timer and adaptive idling.

#include <atomic>

#include "dataplane/tables_publisher.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

struct loop_options {
    // Dedicated cores: never sleep. Otherwise an idle worker backs off into short sleeps so a
    // shared 2-core machine stays usable.
    bool busy_poll = false;
};

class roce_port;

// rdma_port: the worker's RNIC port (the one ctx.rdma_port points at); null without an engine.
void run_lcore_loop(tables_publisher& publisher, unsigned worker_id, worker_context& ctx,
                    roce_port* rdma_port, const loop_options& options,
                    const std::atomic<bool>& stop);

}  // namespace jakiro
