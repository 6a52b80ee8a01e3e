#pragma once
// This jakirod's restarts as `jakiroctl status` shows them (restart_record.hh; /metrics has them
// from the metric table), and the counter bases that keep /metrics monotonic across a take-over
// (docs/restart.md).
//
// Thread-safety: control thread only.

#include <prometheus/metric_family.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "json_writer.hh"
#include "restart_record.hh"

namespace jakiro {

// "last_restart": {...} and "restarts": {...} into an open JSON object.
void write_restart_json(json_writer& out, const restart_record& r);
// One line for the text status ("" before any restart).
std::string restart_text(const restart_record& r);

// The key of one counter sample: its family name and its labels sorted by name.
std::string counter_key(const std::string& family,
                        const std::vector<prometheus::ClientMetric::Label>& labels);
// Every counter sample of `families` by key (what a predecessor hands over).
std::map<std::string, double> counter_values(const std::vector<prometheus::MetricFamily>& families);
// Adds each base to the counter sample of the same key. The restart families are left alone:
// they are computed from the carried history.
void add_counter_bases(const std::map<std::string, double>& bases,
                       std::vector<prometheus::MetricFamily>& families);

}  // namespace jakiro
