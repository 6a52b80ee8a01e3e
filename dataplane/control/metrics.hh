#pragma once
// jakirod's metrics in the Prometheus model (prometheus-cpp's MetricFamily), read from the same
// counters as `jakiroctl stats`, `qos` and `qps`: served as /metrics in the text format
// (control_server) and through DPDK telemetry (telemetry.hh).
//
// Thread-safety: control thread only (it reads daemon_state, which the control thread owns).
// Nothing here writes to or waits for the worker: its counters are single-writer atomics and
// the RoCE engine's QP list is copied under the engine's report lock, as `jakiroctl qps` does.

#include <prometheus/metric_family.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "daemon_state.hh"

namespace jakiro {

namespace roce {
struct qp_report;
}

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

    static sums of(const roce::qp_report& qp);
    // What every QP of each vNIC slot has counted: the live rows and the retired ones.
    static std::map<uint16_t, sums> by_vnic(const std::vector<roce::qp_report>& live,
                                            const std::vector<roce::qp_report>& retired);
};

// What the control side counts about itself.
struct control_counters {
    uint64_t control_dropped = 0;  // control/metrics clients dropped at their deadline
    uint64_t scrapes = 0;          // /metrics answered
    uint64_t log_suppressed = 0;   // log lines the rate limit held back
};

std::vector<prometheus::MetricFamily> collect_metrics(const daemon_state& state,
                                                      const control_counters& control);
// The families in the Prometheus text exposition format (version 0.0.4).
std::string render_metrics_text(const std::vector<prometheus::MetricFamily>& families);

// The HTTP response to one request for the metrics listener: GET or HEAD of /metrics gets
// `body()` as text/plain; version=0.0.4, / a pointer to it; other paths 404, other methods 405,
// a malformed request 400. `body` is called only when needed. Always "Connection: close".
std::string http_metrics_response(const std::string& request_head,
                                  const std::function<std::string()>& body);

}  // namespace jakiro
