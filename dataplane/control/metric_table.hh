#pragma once
// Every metric jakirod serves, described once: name, type, label names, help, and how its
// samples are read from a stats snapshot. /metrics (Prometheus text), DPDK telemetry
// (/jakiro/metrics, /jakiro/metric) and the list in jakirod(8) are all this table; a unit test
// holds the man page to it.

#include <functional>
#include <string>
#include <vector>

#include "dataplane/control/stats_snapshot.hh"

namespace jakiro {

enum class metric_type { counter, gauge };

// One sample of a family: its label values, in the order of the family's label names.
struct metric_sample {
    std::vector<std::string> labels;
    double value = 0;
};

struct metric_def {
    const char* name;
    metric_type type;
    std::vector<const char*> labels;  // label names, in the order a scrape prints them
    const char* help;
    // Appends the family's samples. False when the daemon runs no such thing (no RoCE engine,
    // no RDMA faces): the family is then not served at all, rather than served empty.
    std::function<bool(const stats_snapshot&, std::vector<metric_sample>&)> read;
};

// In the order a scrape lists the families.
const std::vector<metric_def>& metric_table();

}  // namespace jakiro
