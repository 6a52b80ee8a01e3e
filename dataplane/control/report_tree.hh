#pragma once
// One `jakiroctl` report (stats, qos, qps) as a document before it is written: objects whose
// keys keep the order they were first given, arrays of rows found by an identity, and numbers.
// The metric table puts every sample at its place in it (metric_places.hh), the report's own
// code adds what describes a row (a rule's ports, a worker's vNICs), and the same tree is then
// written as JSON for tools and as text for people, so the two can never list different counters.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dataplane/control/json_writer.hh"

namespace jakiro {

class report_node {
  public:
    enum class kind { object, array, number, text, flag, strings };

    report_node() = default;
    explicit report_node(kind k) : _kind(k) {}

    // The member `key` of this object, made an empty object when new.
    report_node& at(std::string_view key);
    // The row of this array whose identity is `id` (rows keep the order they were made in),
    // made an empty object when new; the identity is never written.
    report_node& row(std::string_view id);
    // Makes this node an array (a report's top level may be one).
    report_node& as_array();

    // A leaf. Numbers given twice add up: a place that leaves out one of its family's labels
    // (the host's total of a per-worker counter) sums that family's samples.
    report_node& set(std::string_view key, double number);
    report_node& add(double number);
    report_node& set(std::string_view key, std::string_view text);
    report_node& set_flag(std::string_view key, bool flag);
    report_node& set_strings(std::string_view key, std::vector<std::string> strings);

    kind type() const { return _kind; }
    double number() const { return _number; }
    const std::string& text() const { return _text; }
    const std::vector<std::string>& strings() const { return _strings; }
    // Members of an object (key, node) or rows of an array (identity, node), in order.
    const std::vector<std::pair<std::string, std::unique_ptr<report_node>>>& children() const {
        return _children;
    }
    // The member or row `key`, or nullptr.
    const report_node* find(std::string_view key) const;

    void write_json(json_writer& out, std::string_view key = {}) const;
    std::string json() const;

  private:
    report_node& child(std::string_view key, kind k);

    kind _kind = kind::object;
    double _number = 0;
    std::string _text;
    std::vector<std::string> _strings;
    std::vector<std::pair<std::string, std::unique_ptr<report_node>>> _children;
};

// A number as a report writes it: integers without a fraction (counters are whole), others
// with 15 significant digits (seconds to the nanosecond for a year of uptime).
std::string report_number(double value);

}  // namespace jakiro
