#pragma once
// The replies to `jakiroctl status` and `jakiroctl stats`, as text for people or JSON for tools.

#include <string>

#include "daemon_state.hh"

namespace jakiro {

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
    // Its RDMA engine's local work (WRs done without a packet): the allowance per second, and
    // the polls it sat out over it.
    uint64_t max_local_work_rate = 0;
    uint64_t local_work_over_allowance = 0;
};
vnic_bounds bounds_of(const daemon_state& state, uint16_t slot);

// Ready means every port has link and every remote host's underlay MAC is resolved.
bool daemon_ready(const daemon_state& state);
std::string render_status(const daemon_state& state, bool json);
std::string render_stats(const daemon_state& state, bool json);
// Tracked flows of every worker, optionally of one vNIC only.
std::string render_flows(const daemon_state& state, const std::string& vnic, bool json);
// RC QPs per vNIC: state, peer, PSNs, traffic, retransmissions and NAKs; and the engine's
// drops by reason.
std::string render_qps(const daemon_state& state, const std::string& vnic, bool json);
// DHTB per shaped vNIC and class: configured rate and shares, bytes and packets sent, tail
// drops, rdma waits. `raw`: one line per counter for `jakiroctl top`.
std::string render_qos(const daemon_state& state, bool json, bool raw);

}  // namespace jakiro
