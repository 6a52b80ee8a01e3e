#pragma once
// The replies to `jakiroctl status`, `stats`, `flows`, `qps` and `qos`, as text for people or
// JSON for tools. The counters come from one stats snapshot (stats_snapshot.hh); status and
// flows describe the daemon's state itself.

#include <string>

#include "dataplane/control/daemon_state.hh"
#include "dataplane/control/stats_snapshot.hh"

namespace jakiro {

std::string render_status(const daemon_state& state, bool json);
std::string render_stats(const stats_snapshot& snapshot, bool json);
// Tracked flows of every worker, optionally of one vNIC only.
std::string render_flows(const daemon_state& state, const std::string& vnic, bool json);
// RC QPs per vNIC: state, peer, PSNs, traffic, retransmissions and NAKs; and the engine's
// drops by reason.
std::string render_qps(const stats_snapshot& snapshot, const std::string& vnic, bool json);
// DHTB per shaped vNIC and class: configured rate and shares, bytes and packets sent, tail
// drops, rdma waits. `raw`: one line per counter for `jakiroctl top`.
std::string render_qos(const stats_snapshot& snapshot, bool json, bool raw);

}  // namespace jakiro
