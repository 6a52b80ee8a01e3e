#pragma once
// The replies to `jakiroctl stats`, `qos` and `qps`: one stats snapshot, its counters put where
// the metric table says (metric_places.hh) next to what describes each row (a rule's match, a
// worker's vNICs, a QP's peer), written as JSON for tools or as text for people.

#include <string>
#include <string_view>

#include "dataplane/control/report_tree.hh"
#include "dataplane/control/stats_snapshot.hh"

namespace jakiro {

// Ports, vNICs (counters, bounds, QP totals, RDMA memory), RDMA faces, conntrack, rule hits,
// overlay totals, drops by reason, workers, the sealed overlay, restarts.
report_node stats_report(const stats_snapshot& snapshot);
// DHTB per shaped vNIC and class (a list of vNICs, each with its list of classes).
report_node qos_report(const stats_snapshot& snapshot);
// RDMA QPs (one row each: state, peer, PSNs, counters), the engines, the verbs endpoints and
// their faces, the host reserve; `vnic`: that vNIC's only.
report_node qps_report(const stats_snapshot& snapshot, std::string_view vnic);

std::string render_stats(const stats_snapshot& snapshot, bool json);
std::string render_qos(const stats_snapshot& snapshot, bool json);
std::string render_qps(const stats_snapshot& snapshot, const std::string& vnic, bool json);

}  // namespace jakiro
