#include "dataplane/control/metrics.hh"

#include <prometheus/text_serializer.h>

#include <sstream>

#include "dataplane/control/metric_table.hh"
#include "dataplane/control/restart_report.hh"

namespace jakiro {

std::vector<prometheus::MetricFamily> metric_families(const stats_snapshot& snapshot) {
    std::vector<prometheus::MetricFamily> out;
    std::vector<metric_sample> samples;
    for (const metric_def& def : metric_table()) {
        samples.clear();
        if (!def.read(snapshot, samples)) {
            continue;
        }
        const bool counter = def.type == metric_type::counter;
        prometheus::MetricFamily family{
            def.name,
            def.help,
            counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge,
            {}};
        for (auto& sample : samples) {
            prometheus::ClientMetric m;
            // The table's reader gives a value for each of the family's label names.
            for (std::size_t i = 0; i < def.labels.size() && i < sample.labels.size(); ++i) {
                m.label.push_back({def.labels[i], std::move(sample.labels[i])});
            }
            (counter ? m.counter.value : m.gauge.value) = sample.value;
            family.metric.push_back(std::move(m));
        }
        out.push_back(std::move(family));
    }
    // After a take-over, what the predecessor had counted: /metrics never goes down.
    add_counter_bases(snapshot.counter_bases, out);
    return out;
}

std::string render_metrics_text(const std::vector<prometheus::MetricFamily>& families) {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    return out.str();
}

// ---------------------------------------------------------------- HTTP

namespace {

std::string response(const char* status, const std::string& type, const std::string& body,
                     bool head_only, const char* extra = "") {
    std::string out = std::string("HTTP/1.1 ") + status + "\r\n";
    out += "Content-Type: " + type + "\r\n";
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    out += extra;
    out += "Connection: close\r\n\r\n";
    if (!head_only) {
        out += body;
    }
    return out;
}

}  // namespace

std::string http_metrics_response(const std::string& request_head,
                                  const std::function<std::string()>& body) {
    const auto end = request_head.find_first_of("\r\n");
    const bool complete = request_head.find("\r\n\r\n") != std::string::npos ||
                          request_head.find("\n\n") != std::string::npos;
    std::istringstream line(request_head.substr(0, end));
    std::string method, target, version, more;
    line >> method >> target >> version;
    const char* text = "text/plain; charset=utf-8";
    if (!complete || method.empty() || target.empty() || version.rfind("HTTP/1.", 0) != 0 ||
        (line >> more)) {
        return response("400 Bad Request", text, "bad request\n", false);
    }
    const bool head = method == "HEAD";
    if (method != "GET" && !head) {
        return response("405 Method Not Allowed", text, "only GET and HEAD\n", false,
                        "Allow: GET, HEAD\r\n");
    }
    const std::string path = target.substr(0, target.find('?'));
    if (path == "/metrics") {
        return response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body(), head);
    }
    if (path == "/") {
        return response("200 OK", text, "jakirod: metrics are at /metrics\n", head);
    }
    return response("404 Not Found", text, "not found; metrics are at /metrics\n", head);
}

}  // namespace jakiro
