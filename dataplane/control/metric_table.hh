#pragma once
// Every counter and gauge jakirod reports, described once: name, type, label names, help, how
// its samples are read from a stats snapshot, and where `jakiroctl` shows them. /metrics
// (Prometheus text), DPDK telemetry (/jakiro/metrics, /jakiro/metric), `jakiroctl stats`, `qos`
// and `qps` (JSON and text, metric_places.hh) and the list in jakirod(8) are all this table:
// a counter added here shows everywhere. Unit tests hold the man page and jakiroctl's reports
// to it.

#include <functional>
#include <string>
#include <vector>

#include "dataplane/control/stats_snapshot.hh"

namespace jakiro {

enum class metric_type { counter, gauge };

// The `jakiroctl` reports built from the table.
enum class report { stats, qos, qps };

// Where a family's samples show in a report: a path of keys from the report's top, '/' between
// them. In a key, {label} stands for the sample's value of that label, and {label:a=x,b=y} for
// x when that value is a, y when it is b (any other value stands for itself). A key in brackets,
// [{vnic}], is the row of an array with that identity (the identity itself is not shown). A
// place that leaves out one of the family's labels shows the sum of the samples that differ in
// it only (a host's total of a per-worker counter).
struct report_place {
    report in;
    const char* path;
};

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
    // Where jakiroctl shows it; none only for an `_info` gauge, whose meaning is its labels
    // (`jakiroctl status` shows those).
    std::vector<report_place> shown;
};

// In the order a scrape lists the families.
const std::vector<metric_def>& metric_table();

}  // namespace jakiro
