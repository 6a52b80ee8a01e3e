#pragma once
// What the control thread knows about the running daemon: configuration, ports, workers.
//
// Thread-safety: built by main() before the control server starts; afterwards only the
// control thread reads it, and the worker-owned parts it points to (counters, neighbors) are
// read through their single-writer atomics.

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "dataplane/config/host_config.hh"
#include "dataplane/control/restart_record.hh"
#include "dataplane/control/rule_hit_counts.hh"
#include "dataplane/overlay/underlay_neighbors.hh"
#include "dataplane/tables_publisher.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

namespace rnic {
class engine;
}
namespace verbs {
class channel_server;
}
class control_plane_report;
class egress_shaper;
class ingress_policer;

struct port_record {
    std::string role;  // "uplink" or the vNIC name
    std::string devargs;
    uint16_t port_id;
};

struct daemon_state {
    host_config config;
    std::string memory_mode;  // "hugepages" or "no-huge": what EAL was started with
    bool busy_poll = false;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    std::vector<port_record> ports;       // ports[0] is the uplink
    std::vector<std::string> slot_names;  // vNIC name by counter slot ("" once removed)
    std::vector<uint8_t> slot_workers;    // the worker that owns each slot's vNIC
    overlay::underlay_neighbors* neighbors = nullptr;
    tables_publisher* publisher = nullptr;
    // By worker id; each holds its RoCE engine (its vNICs' QPs, jakiroctl qps), its DHTB
    // shaper (egress) and policer (ingress) (jakiroctl qos, top).
    std::vector<const worker_context*> workers;
    unsigned worker_count = 1;               // host.workers or --workers, fixed at start
    verbs::channel_server* verbs = nullptr;  // the vNICs' RDMA faces (follow apply)
    // With control: in the host YAML, the etcd follower's state (control_plane_report.hh).
    const control_plane_report* control_plane = nullptr;
    // The last restart and the host's restart history (docs/restart.md).
    restart_record restarts;
    // Counter values a predecessor exported, added to ours so /metrics never goes down across
    // a take-over: "name{label=\"value\",...}" (labels sorted) to the predecessor's value.
    std::map<std::string, double> counter_bases;
    // Each rule's hits from when it took its id (apply renumbers them).
    rule_hit_counts rule_hits;
    // A take-over is in progress: commands that change the daemon are refused until it ends.
    std::atomic<bool> handing_over{false};

    // The id of the worker that owns the vNIC in `slot` (0 for a slot never given out).
    uint8_t worker_of(uint16_t slot) const {
        return slot < slot_workers.size() ? slot_workers[slot] : 0;
    }
    // That worker, or null.
    const worker_context* owner_of(uint16_t slot) const {
        const unsigned w = worker_of(slot);
        return w < workers.size() ? workers[w] : nullptr;
    }
    const egress_shaper* shaper_of(uint16_t slot) const {
        const worker_context* w = owner_of(slot);
        return w != nullptr ? w->shaper : nullptr;
    }
    const ingress_policer* policer_of(uint16_t slot) const {
        const worker_context* w = owner_of(slot);
        return w != nullptr ? w->policer : nullptr;
    }
};

}  // namespace jakiro
