#pragma once
// The replies to `jakiroctl status` and `flows`, as text for people or JSON for tools: they
// describe the daemon's state itself. `stats`, `qos` and `qps` report counters and are
// counter_reports.hh.

#include <string>

#include "dataplane/control/daemon_state.hh"
#include "dataplane/control/stats_snapshot.hh"

namespace jakiro {

std::string render_status(const daemon_state& state, bool json);
// Tracked flows of every worker, optionally of one vNIC only.
std::string render_flows(const daemon_state& state, const std::string& vnic, bool json);

}  // namespace jakiro
