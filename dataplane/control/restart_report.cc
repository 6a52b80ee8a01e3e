#include "dataplane/control/restart_report.hh"

#include <algorithm>
#include <optional>

namespace jakiro {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

// Computed from the carried history, so a predecessor's value is never added to it.
constexpr const char* restarts_family = "jakiro_restarts_total";

}  // namespace

void write_restart_json(json_writer& out, const restart_record& r) {
    out.begin_object("last_restart")
        .value("kind", name_of(r.last))
        .value("at_unix_ms", static_cast<uint64_t>(r.at_unix_ms))
        .value("blackout_ms", r.blackout_ms)
        .value("takeover_ms", r.takeover_ms)
        .value("from_version", r.from_version)
        .value("via", via_shown(r));
    if (!r.state_refused.empty()) {
        out.value("state_refused", r.state_refused);
    }
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
        text << " from " << r.from_version << " via " << r.via << ", blackout " << r.blackout_ms
             << " ms, take-over " << r.takeover_ms << " ms; carried";
        for (const auto& [what, n] : r.carried) {
            text << " " << what << " " << n;
        }
        for (const auto& [what, n] : r.lost) {
            text << "; LOST " << what << " " << n;
        }
    }
    if (!r.state_refused.empty()) {
        text << "; the stored state was not used: " << r.state_refused;
    }
    text << " (restarts " << r.counts[1] << ", upgrades " << r.counts[2] << ", crashes "
         << r.counts[3] << ")\n";
    return text.str();
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

namespace {

// The value of the `vnic` label in a counter_key, or nullopt if the key has none. Keys list their
// labels sorted, each as name="value", (vNIC names are plain identifiers: no quote in them).
std::optional<std::string> vnic_label_of(const std::string& key) {
    const std::size_t open = key.find('{');
    if (open == std::string::npos) {
        return std::nullopt;
    }
    for (const std::string label : {"{vnic=\"", ",vnic=\""}) {
        const std::size_t at = key.find(label, open);
        if (at != std::string::npos) {
            const std::size_t from = at + label.size();
            const std::size_t to = key.find('"', from);
            if (to != std::string::npos) {
                return key.substr(from, to - from);
            }
        }
    }
    return std::nullopt;
}

}  // namespace

void forget_counter_bases_of_vnic(std::map<std::string, double>& bases, const std::string& vnic) {
    std::erase_if(bases, [&](const auto& base) { return vnic_label_of(base.first) == vnic; });
}

void keep_counter_bases_of_vnics(std::map<std::string, double>& bases,
                                 const std::set<std::string>& vnics) {
    std::erase_if(bases, [&](const auto& base) {
        const auto vnic = vnic_label_of(base.first);
        return vnic && !vnics.contains(*vnic);
    });
}

}  // namespace jakiro
