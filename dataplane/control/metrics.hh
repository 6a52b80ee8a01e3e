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

// Per-vNIC totals of the QPs' own counters (retransmits, NAKs, RNR NAKs, CNPs...). A QP's
// counters go away with the QP; these keep counting what destroyed QPs had done, so that
// the per-vNIC series are proper (monotonic) counters. A QP created and destroyed between two
// observations (the control thread observes every second and at each scrape) is not seen.
class qp_totals {
  public:
    enum field : std::size_t {
#define JAKIRO_QP_COUNTER(name) name,
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
        field_count
    };
    using sums = std::array<uint64_t, field_count>;

    static sums of(const roce::qp_report& qp);
    // Takes in the QPs that exist now; those no longer there keep what they counted.
    void observe(const std::vector<roce::qp_report>& qps);
    // What every QP of each vNIC slot has counted, the destroyed ones included.
    std::map<uint16_t, sums> by_vnic() const;

  private:
    std::map<std::pair<uint16_t, uint32_t>, sums> _live;  // by (vNIC slot, QPN)
    std::map<uint16_t, sums> _retired;
};

// What the control side counts about itself.
struct control_counters {
    uint64_t control_dropped = 0;  // control/metrics clients dropped at their deadline
    uint64_t scrapes = 0;          // /metrics answered
    uint64_t log_suppressed = 0;   // log lines the rate limit held back
};

std::vector<prometheus::MetricFamily> collect_metrics(const daemon_state& state, qp_totals& qps,
                                                      const control_counters& control);
// The families in the Prometheus text exposition format (version 0.0.4).
std::string render_metrics_text(const std::vector<prometheus::MetricFamily>& families);

// The HTTP response to one request for the metrics listener: GET or HEAD of /metrics gets
// `body()` as text/plain; version=0.0.4, / a pointer to it; other paths 404, other methods 405,
// a malformed request 400. `body` is called only when needed. Always "Connection: close".
std::string http_metrics_response(const std::string& request_head,
                                  const std::function<std::string()>& body);

}  // namespace jakiro
