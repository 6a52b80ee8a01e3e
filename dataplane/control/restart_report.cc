#include "restart_report.hh"

#include <algorithm>

namespace jakiro {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

constexpr const char* restarts_family = "jakiro_restarts_total";

MetricFamily family(const char* name, const char* help, MetricType type) {
    return MetricFamily{name, help, type, {}};
}

void sample(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    if (f.type == MetricType::Counter) {
        m.counter.value = value;
    } else {
        m.gauge.value = value;
    }
    f.metric.push_back(std::move(m));
}

}  // namespace

void write_restart_json(json_writer& out, const restart_record& r) {
    out.begin_object("last_restart")
        .value("kind", name_of(r.last))
        .value("at_unix_ms", static_cast<uint64_t>(r.at_unix_ms))
        .value("blackout_ms", r.blackout_ms)
        .value("takeover_ms", r.takeover_ms)
        .value("from_version", r.from_version);
    out.begin_object("carried");
    for (const auto& [what, n] : r.carried) {
        out.value(what, n);
    }
    out.end_object().begin_object("lost");
    for (const auto& [what, n] : r.lost) {
        out.value(what, n);
    }
    out.end_object().end_object();
    out.begin_object("restarts");
    for (std::size_t k = 1; k < r.counts.size(); ++k) {
        out.value(restart_kind_names[k], r.counts[k]);
    }
    out.end_object();
}

std::string restart_text(const restart_record& r) {
    if (r.last == restart_kind::none) {
        return "";
    }
    std::ostringstream text;
    text << "last restart: " << name_of(r.last);
    if (r.last != restart_kind::crash) {
        text << " from " << r.from_version << ", blackout " << r.blackout_ms << " ms, take-over "
             << r.takeover_ms << " ms; carried";
        for (const auto& [what, n] : r.carried) {
            text << " " << what << " " << n;
        }
        for (const auto& [what, n] : r.lost) {
            text << "; LOST " << what << " " << n;
        }
    }
    text << " (restarts " << r.counts[1] << ", upgrades " << r.counts[2] << ", crashes "
         << r.counts[3] << ")\n";
    return text.str();
}

void append_restart_metrics(const restart_record& r, std::vector<MetricFamily>& families) {
    auto total = family(restarts_family,
                        "Restarts this host's jakirod has seen, by kind (restart, upgrade: taken "
                        "over with its state; crash: started after one that ended without)",
                        MetricType::Counter);
    for (std::size_t k = 1; k < r.counts.size(); ++k) {
        sample(total, {{"kind", restart_kind_names[k]}}, static_cast<double>(r.counts[k]));
    }
    families.push_back(std::move(total));
    auto last = family("jakiro_last_restart_info",
                       "Always 1; the labels say the last restart's kind and the predecessor's "
                       "version",
                       MetricType::Gauge);
    sample(last, {{"from_version", r.from_version}, {"kind", name_of(r.last)}}, 1);
    families.push_back(std::move(last));
    auto at = family("jakiro_last_restart_timestamp_seconds",
                     "When this process took over or started (Unix time)", MetricType::Gauge);
    sample(at, {}, static_cast<double>(r.at_unix_ms) / 1000.0);
    families.push_back(std::move(at));
    auto blackout = family("jakiro_last_restart_blackout_seconds",
                           "Last take-over: how long no worker forwarded (from the predecessor "
                           "stopping its workers to this one running its own)",
                           MetricType::Gauge);
    sample(blackout, {}, r.blackout_ms / 1000.0);
    families.push_back(std::move(blackout));
    auto carried = family("jakiro_last_restart_carried",
                          "Last take-over: state carried over, by what (flows, neighbours, "
                          "counters, rdma_clients)",
                          MetricType::Gauge);
    for (const auto& [what, n] : r.carried) {
        sample(carried, {{"what", what}}, static_cast<double>(n));
    }
    families.push_back(std::move(carried));
    auto lost = family("jakiro_last_restart_lost",
                       "Last take-over: state that could not be carried over, by what "
                       "(flows of vNICs the successor's configuration no longer has)",
                       MetricType::Gauge);
    for (const auto& [what, n] : r.lost) {
        sample(lost, {{"what", what}}, static_cast<double>(n));
    }
    families.push_back(std::move(lost));
}

std::string counter_key(const std::string& family, const std::vector<ClientMetric::Label>& labels) {
    auto sorted = labels;
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    std::string key = family + "{";
    for (const auto& l : sorted) {
        key += l.name + "=\"" + l.value + "\",";
    }
    return key + "}";
}

std::map<std::string, double> counter_values(const std::vector<MetricFamily>& families) {
    std::map<std::string, double> out;
    for (const auto& f : families) {
        if (f.type != MetricType::Counter || f.name == restarts_family) {
            continue;
        }
        for (const auto& m : f.metric) {
            out[counter_key(f.name, m.label)] = m.counter.value;
        }
    }
    return out;
}

void add_counter_bases(const std::map<std::string, double>& bases,
                       std::vector<MetricFamily>& families) {
    if (bases.empty()) {
        return;
    }
    for (auto& f : families) {
        if (f.type != MetricType::Counter || f.name == restarts_family) {
            continue;
        }
        for (auto& m : f.metric) {
            const auto it = bases.find(counter_key(f.name, m.label));
            if (it != bases.end()) {
                m.counter.value += it->second;
            }
        }
    }
}

}  // namespace jakiro
