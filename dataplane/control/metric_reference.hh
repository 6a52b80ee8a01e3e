#pragma once
// jakirod(8)'s list of metrics, rendered from the metric table (metric_table.hh): one item per
// family with its type, label names and help, in scdoc. The page carries the list between two
// marker comments; `ninja -C build update-man-metrics` rewrites it there, and a unit test fails
// while the page and the table disagree.

#include <optional>
#include <string>

namespace jakiro {

// The markers around the list in jakirod.8.scd (scdoc comments).
inline constexpr const char* metric_list_begin =
    "; Metric list: generated from dataplane/control/metric_table.cc by "
    "`ninja -C build update-man-metrics`.\n";
inline constexpr const char* metric_list_end = "; End of the metric list.\n";

// The list, one scdoc list item per family, in the table's order.
std::string metric_list_scdoc();

// `page` with the text between the markers replaced by metric_list_scdoc(); nullopt when the
// page lacks either marker (in that order).
std::optional<std::string> with_metric_list(const std::string& page);

}  // namespace jakiro
