#include "dataplane/control/rdma_engines.hh"

namespace jakiro {

std::vector<rnic::qp_report> report_qps(const daemon_state& state,
                                        std::vector<rnic::qp_report>* retired) {
    std::vector<rnic::qp_report> qps;
    for (const worker_context* w : state.workers) {
        if (w->engine == nullptr) {
            continue;
        }
        std::vector<rnic::qp_report> its_retired;
        auto its = w->engine->report(retired != nullptr ? &its_retired : nullptr);
        qps.insert(qps.end(), its.begin(), its.end());
        if (retired != nullptr) {
            retired->insert(retired->end(), its_retired.begin(), its_retired.end());
        }
    }
    return qps;
}

engine_summary sum_engines(const daemon_state& state) {
    engine_summary out;
    for (const worker_context* w : state.workers) {
        if (w->engine == nullptr) {
            continue;
        }
        const rnic::engine_counters& c = w->engine->counters();
        ++out.engines;
        out.totals.received += c.received.read();
        out.totals.sent += c.sent.read();
        out.totals.doorbells += c.doorbells.read();
        out.totals.rechecks += c.rechecks.read();
        out.totals.qps_revoked += c.qps_revoked.read();
        for (std::size_t d = 0; d < out.totals.drops.size(); ++d) {
            out.totals.drops[d] += c.drops[d].read();
        }
    }
    return out;
}

}  // namespace jakiro
