#pragma once
// jakirod's metrics in the Prometheus model (prometheus-cpp's MetricFamily): the families of
// metric_table.hh read from one stats snapshot, served as /metrics in the text format
// (control_server) and through DPDK telemetry (telemetry.hh).

#include <prometheus/metric_family.h>

#include <functional>
#include <string>
#include <vector>

#include "dataplane/control/stats_snapshot.hh"

namespace jakiro {

// Every family of the table the daemon has (metric_def::read), with its samples; after a
// take-over each counter also holds what the predecessor had counted (counter_bases).
std::vector<prometheus::MetricFamily> metric_families(const stats_snapshot& snapshot);
// The families in the Prometheus text exposition format (version 0.0.4).
std::string render_metrics_text(const std::vector<prometheus::MetricFamily>& families);

// The HTTP response to one request for the metrics listener: GET or HEAD of /metrics gets
// `body()` as text/plain; version=0.0.4, / a pointer to it; other paths 404, other methods 405,
// a malformed request 400. `body` is called only when needed. Always "Connection: close".
std::string http_metrics_response(const std::string& request_head,
                                  const std::function<std::string()>& body);

}  // namespace jakiro
