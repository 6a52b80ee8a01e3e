#pragma once
// Every number jakirod reports about itself, read once from the daemon's state into plain
// values: `jakiroctl stats`, `qos`, `qps` and `top`, /metrics and DPDK telemetry all render one
// snapshot (metric_table.hh describes the metrics), so that no renderer walks the workers,
// slots, rules or engines on its own and two views of one request cannot disagree.
//
// Thread-safety: collect() runs on the control thread (it reads daemon_state, which that thread
// owns). It writes to and waits for no worker: their counters are single-writer atomics, the
// engines' QP lists are copied under each engine's report lock.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/control/restart_record.hh"
#include "dataplane/drops.hh"
#include "qos/config.hh"
#include "qos/ingress_meter.hh"
#include "qos/scheduler.hh"
#include "rnic/engine.hh"
#include "rnic/verbs/channel_server.hh"
#include "rnic/verbs/resources.hh"
#include "rnic/verbs/vnic_endpoint.hh"

namespace jakiro {

struct daemon_state;

// Per-vNIC totals of the QPs' own counters (retransmits, NAKs, RNR NAKs, CNPs...): the live
// QPs' plus what the destroyed ones counted (both from engine::report), so that the
// per-vNIC series are proper (monotonic) counters that miss no QP, however briefly it lived.
struct qp_totals {
    enum field : std::size_t {
#define JAKIRO_QP_COUNTER(name) name,
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
        field_count
    };
    using sums = std::array<uint64_t, field_count>;

    static sums of(const rnic::qp_report& qp);
    // What every QP of each vNIC slot has counted: the live rows and the retired ones.
    static std::map<uint16_t, sums> by_vnic(const std::vector<rnic::qp_report>& live,
                                            const std::vector<rnic::qp_report>& retired);
};

// What the control side counts about itself.
struct control_counters {
    uint64_t control_dropped = 0;  // control/metrics clients dropped at their deadline
    uint64_t scrapes = 0;          // /metrics answered
    uint64_t log_suppressed = 0;   // log lines the rate limit held back
};

// The counters every worker keeps once for the host (lcore_counters), by field; the list is
// datapath_counters.def. A host's totals are the workers' sums.
struct datapath_totals {
#define JAKIRO_DATAPATH_COUNTER(name) uint64_t name = 0;
#include "dataplane/control/datapath_counters.def"
#undef JAKIRO_DATAPATH_COUNTER
};

struct port_snapshot {
    std::string role;  // "uplink" or the vNIC's name
    bool link_up = false;
    uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
    uint64_t rx_missed = 0, rx_errors = 0, tx_errors = 0;
    // Super-frames of a vnet port (each counts once in the packets).
    uint64_t rx_superframes = 0, tx_superframes = 0;
};

// Where a vNIC stands against its bounds in what the vNICs of a host share (YAML limits:, its
// QoS queue): now and at most, and what was refused at each bound.
struct vnic_bounds {
    uint64_t flows = 0;           // entries of its worker's flow table it holds
    uint64_t max_flows = 0;       // its allowance of them
    uint64_t flows_refused = 0;   // new flows dropped at the allowance
    uint64_t packet_buffers = 0;  // super-frame buffers it holds (vnet faces)
    uint64_t max_packet_buffers = 0;
    uint64_t buffers_refused = 0;       // tenant frames dropped at the allowance
    uint64_t max_packet_rate = 0;       // frames per second read from it
    uint64_t packet_rate_exceeded = 0;  // times it ran out of that with frames waiting
    uint64_t qos_queue_drops = 0;       // tail drops of its tcp-class queue (shaped vNICs)
    uint64_t qos_queue_holds = 0;       // times its face went unread: that queue was full
    // Its RDMA engine's local work (WRs done without a packet): the allowance per second, and
    // the polls it sat out over it.
    uint64_t max_local_work_rate = 0;
    uint64_t local_work_over_allowance = 0;
    // The worker's visits to its QPs (idle ones are parked and not visited), and the futex wakes
    // its programs napping on an empty CQ cost the worker (each charged as a unit of work).
    uint64_t rdma_qp_visits = 0;
    uint64_t rdma_poller_wakes = 0;
    // Its queued QPs whose shim the worker asked to ring before it slept (a store each).
    uint64_t rdma_sleep_asks = 0;
};

// One live vNIC (a counter slot with a name), its counters summed over the workers.
struct vnic_snapshot {
    uint16_t slot = 0;
    std::string name;
    // Its Ethernet face (from the tenant, to it), drops, security groups (let in, let out,
    // refused) and RDMA face (received for it, sent by it): vnic_counters.def.
#define JAKIRO_VNIC_COUNTER(name, field) uint64_t name = 0;
#include "dataplane/control/vnic_counters.def"
#undef JAKIRO_VNIC_COUNTER
    vnic_bounds bounds;
    qp_totals::sums qps{};                            // its QPs' counters, live and destroyed
    std::optional<verbs::memory_report> rdma_memory;  // with an RDMA face
};

// One security-group rule and the packets of the flows it allowed.
struct rule_snapshot {
    std::string vpc, group;
    const char* direction = "ingress";  // "ingress" or "egress"
    std::size_t index = 0;              // in its group's list for that direction
    uint64_t line = 0;                  // in the YAML
    std::string proto, ports, remote;   // as jakiroctl prints them
    uint64_t hits = 0;
};

struct conntrack_snapshot {
    uint64_t flows = 0, capacity = 0, created = 0, evicted = 0, expired = 0;
    uint64_t classifications = 0;  // packets that missed the flow table
};

struct worker_snapshot {
    unsigned id = 0;
    std::vector<std::string> vnics;  // the vNICs it owns
    uint64_t from_tenant_packets = 0, to_tenant_packets = 0;
    datapath_totals counters;
};

// One class of a shaped vNIC: DHTB egress (scheduler and shaper) and ingress (meter).
struct qos_class_snapshot {
    qos::traffic_class cls = qos::traffic_class::rdma;
    uint64_t weight = 0, share_bps = 0, min_bps = 0, max_bps = 0;
    qos::class_counters sent;
    uint64_t tail_drops = 0;        // tcp: its queue was full
    uint64_t rdma_waits = 0;        // rdma: the engine found its grant spent
    uint64_t rdma_granted = 0;      // rdma: bytes granted
    uint64_t rdma_busy_grants = 0;  // rdma: grants made while the engine had work
    // How many of the vNIC's grants found this class with something to send: a class that was
    // not backlogged throughout had its unused share given to the other.
    uint64_t grants = 0, busy_grants = 0;
    qos::ingress_class_counters received;
};

struct qos_vnic_snapshot {
    std::string name;
    uint64_t rate_bps = 0;
    uint64_t grants = 0;      // token grants made to its classes (0 until shaped)
    uint64_t rdma_waits = 0;  // times the engine found its rdma grant spent
    std::vector<qos_class_snapshot> classes;
};

// The host's RoCE engines (one per worker) summed.
struct engine_snapshot {
    unsigned engines = 0;
    uint64_t received = 0, sent = 0, doorbells = 0, rechecks = 0, qps_revoked = 0;
    std::array<uint64_t, rnic::engine_drop_count> drops{};
};

// The vNICs' RDMA faces (verbs channel server).
struct verbs_snapshot {
    std::size_t clients = 0;
    verbs::channel_stats stats;
    std::vector<verbs::endpoint_report> faces;
    verbs::host_amounts capacity, demand, held;  // the host reserve
};

// One other host as the sealed overlay sees it (overlay/sealing/peer_sa.hh).
struct overlay_peer_snapshot {
    std::string host;    // its underlay address
    std::string policy;  // off, optional, required
    bool sealed = false;
    uint64_t tx_spi = 0, rx_spi = 0;  // the epochs in use each way
    uint64_t frames_sealed = 0, frames_opened = 0, plaintext_sent = 0, plaintext_received = 0;
    uint64_t auth_failed = 0, replayed = 0, plaintext_refused = 0, tx_rekeys = 0, rx_epochs = 0;
};

struct stats_snapshot {
    std::string host;
    double uptime_s = 0;
    // When the QoS counters were read, on jakirod's monotonic clock: a rate is the difference
    // of two snapshots over the difference of their times, however long a client took to ask.
    uint64_t time_ns = 0;
    bool ready = false;
    bool busy_poll = false;
    uint64_t vnics_configured = 0;
    uint64_t neighbors = 0, neighbors_resolved = 0;  // remote hosts' underlay addresses

    std::vector<port_snapshot> ports;
    std::vector<vnic_snapshot> vnics;  // live ones, by slot
    std::vector<rule_snapshot> rules;
    conntrack_snapshot conntrack;
    datapath_totals datapath;  // every worker's summed
    std::array<uint64_t, drop_reason_count> drops{};
    std::vector<worker_snapshot> workers;
    std::vector<qos_vnic_snapshot> qos;     // shaped vNICs, in the configuration's order
    std::vector<rnic::qp_report> qps;       // live QPs
    std::optional<engine_snapshot> engine;  // when the daemon runs engines
    std::optional<verbs_snapshot> rdma;     // when it serves RDMA faces
    control_counters control;
    restart_record restarts;  // the last restart and the host's history of them
    // A predecessor's counter samples by key (restart_report.hh), added to ours in /metrics.
    std::map<std::string, double> counter_bases;
    std::vector<std::string> slot_names;  // vNIC name by counter slot ("" once removed)
    std::vector<uint8_t> slot_workers;    // the worker that owns each slot's vNIC
    // The sealed overlay's peers; none when the overlay is plain VXLAN.
    std::optional<std::vector<overlay_peer_snapshot>> overlay_peers;

    // The live vNIC in `slot`'s name, or "" (a slot removed or never used).
    const std::string& name_of(uint16_t slot) const;
    // The id of the worker that owns the vNIC in `slot` (0 for a slot never given out).
    unsigned worker_of(uint16_t slot) const {
        return slot < slot_workers.size() ? slot_workers[slot] : 0;
    }
};

// Ready means every port has link and every remote host's underlay MAC is resolved.
bool daemon_ready(const daemon_state& state);

// Reads everything once. `control`: what the control side counted about itself.
stats_snapshot collect_stats(const daemon_state& state, const control_counters& control = {});

}  // namespace jakiro
