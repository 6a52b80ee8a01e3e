#pragma once
// What the control thread knows about the running daemon: configuration, ports, workers.
//
// Thread-safety: built by main() before the control server starts; afterwards only the
// control thread reads it, and the worker-owned parts it points to (counters, neighbors) are
// read through their single-writer atomics.

#include <chrono>
#include <string>
#include <vector>

#include "../config/host_config.hh"
#include "../overlay/underlay_neighbors.hh"
#include "../tables_publisher.hh"
#include "../worker/worker_context.hh"

namespace jakiro {

namespace roce {
class engine;
}
namespace verbs {
class channel_server;
}
namespace control_plane {
struct control_plane_status;
}
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
    std::vector<const worker_context*> workers;  // by worker id
    unsigned worker_count = 1;                   // host.workers or --workers, fixed at start
    const roce::engine* engine = nullptr;        // the RDMA face's QPs (jakiroctl qps)
    const egress_shaper* shaper = nullptr;       // DHTB egress (jakiroctl qos, top)
    const ingress_policer* policer = nullptr;    // DHTB ingress (jakiroctl qos)
    verbs::channel_server* verbs = nullptr;      // the vNICs' RDMA faces (follow apply)
    // With control: in the host YAML, the etcd follower's state (control_plane/status.hh).
    const control_plane::control_plane_status* control_plane = nullptr;
};

}  // namespace jakiro
