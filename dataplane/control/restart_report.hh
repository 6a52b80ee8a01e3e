#pragma once
// This jakirod's restarts as `jakiroctl status` shows them (restart_record.hh; /metrics has them
// from the metric table), and the counter bases that keep /metrics monotonic across a take-over
// (docs/restart.md).
//
// Thread-safety: control thread only.

#include <prometheus/metric_family.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dataplane/control/json_writer.hh"
#include "dataplane/control/restart_record.hh"

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
// The bases of a vNIC that is gone: counters labelled vnic="`vnic`". A vNIC added later under the
// same name is another vNIC and starts at 0; counters of no vNIC stay.
void forget_counter_bases_of_vnic(std::map<std::string, double>& bases, const std::string& vnic);
// After a take-over with another configuration: only the bases of vNICs in `vnics` stay (those
// carried over the restart), so that one removed meanwhile leaves none behind for a later one.
void keep_counter_bases_of_vnics(std::map<std::string, double>& bases,
                                 const std::set<std::string>& vnics);

}  // namespace jakiro
