#pragma once
// The poll loop of one worker lcore: rx bursts from every port it owns, the pipelines, batched
// tx, RCU quiescent reports, the ARP resolution timer and adaptive idling.

#include <atomic>

#include "../tables_publisher.hh"
#include "worker_context.hh"

namespace jakiro {

struct loop_options {
    // Dedicated cores: never sleep. Otherwise an idle worker backs off into short sleeps so a
    // shared 2-core machine stays usable.
    bool busy_poll = false;
};

void run_lcore_loop(tables_publisher& publisher, unsigned worker_id, worker_context& ctx,
                    const loop_options& options, const std::atomic<bool>& stop);

}  // namespace jakiro
