#pragma once
// A report's sections as text for people (report_tree.hh): whatever the metric table put in a
// section shows, with no list of columns to keep up to date.

#include <functional>
#include <sstream>
#include <string>
#include <string_view>

#include "dataplane/control/report_tree.hh"

namespace jakiro {

// A leaf as text: a number as JSON writes it, yes/no, a list joined by ',' ("-" when empty).
std::string leaf_text(const report_node& leaf);

// A section of single values, one "  key value" line each (after a line with its name). `note`,
// when given, says what to add after a value, and whether to show it at all.
void write_list(
    std::ostringstream& text, std::string_view name, const report_node& section,
    const std::function<bool(std::string_view key, double value, std::string& note)>& note = {});

// A section of rows (vNICs, ports, workers, classes: the members of an object or the rows of
// an array), one column each, one line per counter any of them has: nested objects show as
// "outer.inner". `title` heads the first column; the columns are headed by `heading` of each
// row (its key by default).
void write_columns(
    std::ostringstream& text, std::string_view title, const report_node& section,
    const std::function<std::string(std::string_view key, const report_node&)>& heading = {});

}  // namespace jakiro
