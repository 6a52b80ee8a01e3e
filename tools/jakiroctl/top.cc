#include "tools/jakiroctl/top.hh"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tools/jakiroctl/control_client.hh"

namespace {

struct class_sample {
    std::string name;
    uint64_t share_bps = 0;  // jakirod's qos::class_share_bps: weights, min and max applied
    uint64_t bytes = 0;
    uint64_t packets = 0;
    uint64_t in_bytes = 0;
};

struct vnic_sample {
    uint64_t rate_bps = 0;
    std::vector<class_sample> classes;
};

struct sample {
    uint64_t time_ns = 0;
    std::map<std::string, vnic_sample> vnics;
};

// `qos --json`: a list of shaped vNICs, each with the time its counters were read and a list of
// classes (the keys are the metric table's places, dataplane/control/metric_table.cc). JSON is
// YAML, so yaml-cpp, which jakiroctl reads host files with, reads it.
bool parse(const std::string& body, sample& out, std::string& error) {
    try {
        const YAML::Node vnics = YAML::Load(body);
        if (!vnics.IsSequence()) {
            error = "qos --json is not a list";
            return false;
        }
        for (const auto& v : vnics) {
            out.time_ns = v["time_ns"].as<uint64_t>();
            vnic_sample row;
            row.rate_bps = v["rate_bps"].as<uint64_t>(0);
            for (const auto& c : v["classes"]) {
                class_sample cls;
                cls.name = c["class"].as<std::string>();
                cls.share_bps = c["share_bps"].as<uint64_t>(0);
                cls.bytes = c["sent_bytes"].as<uint64_t>(0);
                cls.packets = c["sent_packets"].as<uint64_t>(0);
                cls.in_bytes = c["received_bytes"].as<uint64_t>(0);
                row.classes.push_back(cls);
            }
            out.vnics[v["vnic"].as<std::string>()] = row;
        }
    } catch (const YAML::Exception& e) {
        error = std::string("cannot read qos --json: ") + e.what();
        return false;
    }
    return true;
}

// One sample of jakirod's counters; non-zero is an exit status.
int read_sample(const std::string& path, sample& out) {
    std::string body, error;
    if (const int status = ask(path, "qos --json", body); status != 0) {
        return status;
    }
    if (!parse(body, out, error)) {
        std::cerr << "jakiroctl: top: " << error << "\n";
        return 1;
    }
    return 0;
}

}  // namespace

int run_top(const std::string& path, const std::string& command) {
    double interval = 1.0;
    long count = -1;  // for ever
    std::istringstream words(command);
    std::string word;
    words >> word;  // "top"
    while (words >> word) {
        std::string value;
        if ((word == "--interval" || word == "--count") && (words >> value)) {
            try {
                if (word == "--interval") {
                    interval = std::stod(value);
                } else {
                    count = std::stol(value);
                }
            } catch (const std::exception&) {
                interval = -1;
            }
            if (interval <= 0.05 || interval > 3600 || (word == "--count" && count < 1)) {
                std::cerr << "jakiroctl: top: bad value '" << value << "' for " << word << "\n";
                return 2;
            }
            continue;
        }
        std::cerr << "jakiroctl: top: unexpected '" << word
                  << "' (usage: top [--interval S] [--count N])\n";
        return 2;
    }
    sample previous;
    if (const int status = read_sample(path, previous); status != 0) {
        return status;
    }
    if (previous.vnics.empty()) {
        std::cout << "no vNIC has a qos rate (vnics[].qos in the host YAML)\n";
        return 0;
    }
    for (long n = 0; count < 0 || n < count; ++n) {
        usleep(static_cast<useconds_t>(interval * 1e6));
        sample now;
        if (const int status = read_sample(path, now); status != 0) {
            return status;
        }
        const double seconds = static_cast<double>(now.time_ns - previous.time_ns) / 1e9;
        std::printf("%-8s %-5s %12s %12s %8s %12s %12s\n", "vnic", "class", "out Mbit/s",
                    "share Mbit/s", "of rate", "pkts/s", "in Mbit/s");
        for (const auto& [name, v] : now.vnics) {
            const auto before = previous.vnics.find(name);
            double total = 0;
            const double rate_mbps = static_cast<double>(v.rate_bps) / 1e6;
            for (std::size_t i = 0; i < v.classes.size(); ++i) {
                const auto& c = v.classes[i];
                uint64_t bytes = 0, packets = 0, in_bytes = 0;
                if (before != previous.vnics.end() && i < before->second.classes.size()) {
                    bytes = c.bytes - before->second.classes[i].bytes;
                    packets = c.packets - before->second.classes[i].packets;
                    in_bytes = c.in_bytes - before->second.classes[i].in_bytes;
                }
                const double mbps =
                    seconds > 0 ? static_cast<double>(bytes) * 8 / seconds / 1e6 : 0;
                total += mbps;
                const double share = static_cast<double>(c.share_bps) / 1e6;
                std::printf("%-8s %-5s %12.1f %12.1f %7.1f%% %12.0f %12.1f\n", name.c_str(),
                            c.name.c_str(), mbps, share, 100.0 * mbps / rate_mbps,
                            seconds > 0 ? static_cast<double>(packets) / seconds : 0,
                            seconds > 0 ? static_cast<double>(in_bytes) * 8 / seconds / 1e6 : 0);
            }
            std::printf("%-8s %-5s %12.1f %12.1f %7.1f%%\n", name.c_str(), "all", total, rate_mbps,
                        100.0 * total / rate_mbps);
        }
        std::printf("\n");
        std::fflush(stdout);
        previous = now;
    }
    return 0;
}
