#pragma once
// The host's RoCE engines (one per worker, each running its vNICs' QPs) read as one, for
// `jakiroctl qps` and /metrics: every QP's row, and the engines' counters summed.

#include <array>
#include <cstdint>
#include <vector>

#include "dataplane/control/daemon_state.hh"
#include "rnic/engine.hh"

namespace jakiro {

// Every live QP of every engine; with `retired`, also each engine's per-vNIC sums of its
// destroyed QPs (engine::report: each engine's two lists are taken under one lock).
std::vector<rnic::qp_report> report_qps(const daemon_state& state,
                                        std::vector<rnic::qp_report>* retired = nullptr);

// The engines' counters (rnic::engine_counters) added up.
struct engine_totals {
    uint64_t received = 0;
    uint64_t sent = 0;
    uint64_t doorbells = 0;
    uint64_t rechecks = 0;
    uint64_t qps_revoked = 0;
    std::array<uint64_t, rnic::engine_drop_count> drops{};
};
// `engines` is 0 when the daemon runs none (then there is nothing to report).
struct engine_summary {
    unsigned engines = 0;
    engine_totals totals;
};
engine_summary sum_engines(const daemon_state& state);

}  // namespace jakiro
