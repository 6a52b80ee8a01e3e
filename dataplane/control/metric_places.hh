#pragma once
// The metric table's samples put at their places in a `jakiroctl` report (report_place in
// metric_table.hh): every counter of `stats`, `qos` and `qps` comes from the same row that
// serves it on /metrics.

#include <string>
#include <string_view>
#include <vector>

#include "dataplane/control/metric_table.hh"
#include "dataplane/control/report_tree.hh"

namespace jakiro {

// Every sample of every family shown in `which`, added at its place under `root`. With `vnic`
// set, families labelled by vNIC show that vNIC's samples only (`qps --vnic NAME`).
void place_samples(report which, const stats_snapshot& snapshot, report_node& root,
                   std::string_view vnic = {});

// `path` with the sample's label values put in (the keys from the top; a row's key keeps its
// brackets): "vnics/{vnic}/drops" for labels {vnic: t1} is {"vnics", "t1", "drops"}.
std::vector<std::string> place_keys(const char* path, const std::vector<const char*>& names,
                                    const std::vector<std::string>& values);

}  // namespace jakiro
