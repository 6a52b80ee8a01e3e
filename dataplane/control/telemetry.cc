#include "dataplane/control/telemetry.hh"

#include <rte_telemetry.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/control/control_server.hh"

namespace jakiro {

namespace {

std::atomic<control_server*> the_server{nullptr};
std::atomic<int> in_flight{0};  // callbacks that may still use the server
constexpr auto wait_for_control = std::chrono::milliseconds(2000);

bool collect(std::vector<prometheus::MetricFamily>& out) {
    ++in_flight;
    control_server* server = the_server.load();
    const bool ok = server != nullptr && server->run_on_control_thread(
                                             [&] { out = server->collect(); }, wait_for_control);
    --in_flight;
    return ok;
}

// Telemetry names allow letters, digits, '_' and '/'.
std::string telemetry_name(const std::string& text) {
    std::string out = text;
    for (char& c : out) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '/';
        if (!ok) {
            c = '_';
        }
    }
    return out.substr(0, RTE_TEL_MAX_STRING_LEN - 1);
}

int metric_names(const char*, const char*, rte_tel_data* d) {
    std::vector<prometheus::MetricFamily> families;
    if (!collect(families)) {
        return -1;
    }
    rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
    for (std::size_t i = 0; i < families.size() && i < RTE_TEL_MAX_ARRAY_ENTRIES; ++i) {
        rte_tel_data_add_array_string(d, families[i].name.c_str());
    }
    return 0;
}

int metric(const char*, const char* params, rte_tel_data* d) {
    if (params == nullptr || *params == '\0') {
        return -1;
    }
    std::vector<prometheus::MetricFamily> families;
    if (!collect(families)) {
        return -1;
    }
    for (const auto& family : families) {
        if (family.name != params) {
            continue;
        }
        rte_tel_data_start_dict(d);
        std::size_t entries = 0;
        for (const auto& m : family.metric) {
            if (entries++ == RTE_TEL_MAX_DICT_ENTRIES) {
                break;
            }
            std::string key;
            for (const auto& label : m.label) {
                key += (key.empty() ? "" : "/") + label.value;
            }
            const double value =
                family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
            rte_tel_data_add_dict_u64(d, telemetry_name(key.empty() ? "value" : key).c_str(),
                                      static_cast<uint64_t>(std::llround(std::max(value, 0.0))));
        }
        return 0;
    }
    return -1;  // no such metric
}

}  // namespace

void register_telemetry(control_server* server) {
    static bool registered = false;
    the_server = server;
    if (server == nullptr) {
        // The caller is about to stop the control thread: wait out callbacks that use it
        // (each ends within its wait for the control thread, which still runs).
        while (in_flight.load() > 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return;
    }
    if (registered) {
        return;
    }
    registered = true;
    rte_telemetry_register_cmd("/jakiro/metrics", metric_names,
                               "jakirod's metric names (as on /metrics). No parameters");
    rte_telemetry_register_cmd("/jakiro/metric", metric,
                               "One of jakirod's metrics by label values. Parameter: its name");
}

}  // namespace jakiro
