#include "dataplane/control/metric_places.hh"

#include <cstring>

namespace jakiro {

namespace {

// The value `name` has in the sample, or the name itself when the family has no such label (a
// path's text is all literal but its {label}s).
std::string_view label_value(std::string_view name, const std::vector<const char*>& names,
                             const std::vector<std::string>& values) {
    for (std::size_t i = 0; i < names.size() && i < values.size(); ++i) {
        if (name == names[i]) {
            return values[i];
        }
    }
    return name;
}

// "{label}" or "{label:a=x,b=y}" (without its braces) for the sample.
std::string substitute(std::string_view field, const std::vector<const char*>& names,
                       const std::vector<std::string>& values) {
    const auto colon = field.find(':');
    const std::string_view value = label_value(field.substr(0, colon), names, values);
    if (colon == std::string_view::npos) {
        return std::string(value);
    }
    std::string_view words = field.substr(colon + 1);
    while (!words.empty()) {
        const auto comma = words.find(',');
        const std::string_view word = words.substr(0, comma);
        const auto equals = word.find('=');
        if (equals != std::string_view::npos && word.substr(0, equals) == value) {
            return std::string(word.substr(equals + 1));
        }
        words = comma == std::string_view::npos ? std::string_view{} : words.substr(comma + 1);
    }
    return std::string(value);
}

std::string expand(std::string_view key, const std::vector<const char*>& names,
                   const std::vector<std::string>& values) {
    std::string out;
    while (!key.empty()) {
        const auto open = key.find('{');
        const auto close = open == std::string_view::npos ? open : key.find('}', open);
        if (close == std::string_view::npos) {
            out += key;
            break;
        }
        out += key.substr(0, open);
        out += substitute(key.substr(open + 1, close - open - 1), names, values);
        key = key.substr(close + 1);
    }
    return out;
}

bool is_row(std::string_view key) {
    return key.size() >= 2 && key.front() == '[' && key.back() == ']';
}

}  // namespace

std::vector<std::string> place_keys(const char* path, const std::vector<const char*>& names,
                                    const std::vector<std::string>& values) {
    std::vector<std::string> keys;
    std::string_view rest = path;
    while (!rest.empty()) {
        // A '/' inside a row's brackets belongs to its identity.
        std::size_t end = 0;
        int depth = 0;
        while (end < rest.size() && (depth > 0 || rest[end] != '/')) {
            depth += rest[end] == '[' ? 1 : rest[end] == ']' ? -1 : 0;
            ++end;
        }
        keys.push_back(expand(rest.substr(0, end), names, values));
        rest = end < rest.size() ? rest.substr(end + 1) : std::string_view{};
    }
    return keys;
}

void place_samples(report which, const stats_snapshot& snapshot, report_node& root,
                   std::string_view vnic) {
    std::vector<metric_sample> samples;
    for (const metric_def& def : metric_table()) {
        bool shown_here = false;
        for (const auto& place : def.shown) {
            shown_here |= place.in == which;
        }
        samples.clear();
        if (!shown_here || !def.read(snapshot, samples)) {
            continue;
        }
        std::size_t vnic_label = def.labels.size();
        for (std::size_t i = 0; i < def.labels.size(); ++i) {
            if (std::strcmp(def.labels[i], "vnic") == 0) {
                vnic_label = i;
            }
        }
        for (const auto& sample : samples) {
            if (!vnic.empty() && vnic_label < sample.labels.size() &&
                sample.labels[vnic_label] != vnic) {
                continue;
            }
            for (const auto& place : def.shown) {
                if (place.in != which) {
                    continue;
                }
                const auto keys = place_keys(place.path, def.labels, sample.labels);
                report_node* node = &root;
                for (std::size_t k = 0; k + 1 < keys.size(); ++k) {
                    const std::string& key = keys[k];
                    node = is_row(key) ? &node->row(std::string_view(key).substr(1, key.size() - 2))
                                       : &node->at(key);
                }
                node->at(keys.back()).add(sample.value);
            }
        }
    }
}

}  // namespace jakiro
