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
#include "stats_snapshot.hh"

namespace jakiro {

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
