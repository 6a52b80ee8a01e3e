#include "cni/jakirod_status.hh"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <thread>

#include "tools/jakiroctl/control_client.hh"

namespace jakiro::cni {

forwarding vnic_forwarding(const std::string& socket, const std::string& vnic, std::string& why) {
    std::string body;
    if (ask(socket, "status --json", body, why) != 0) {
        return forwarding::unreachable;
    }
    try {
        const auto root = YAML::Load(body);
        bool listed = false;
        for (const auto& v : root["vnics"]) {
            listed |= v["name"].as<std::string>("") == vnic;
        }
        if (!listed) {
            why = "jakirod does not list vNIC " + vnic + " yet";
            return forwarding::no;
        }
        for (const auto& p : root["ports"]) {
            if (p["role"].as<std::string>("") == vnic) {
                if (p["link_up"].as<bool>(false)) {
                    return forwarding::yes;
                }
                why = "the port of vNIC " + vnic + " is down";
                return forwarding::no;
            }
        }
        why = "jakirod has not opened the port of vNIC " + vnic + " yet";
        return forwarding::no;
    } catch (const YAML::Exception& e) {
        why = "jakirod's status is not JSON: " + e.msg;
        return forwarding::no;
    }
}

bool wait_forwarding(const std::string& socket, const std::string& vnic, unsigned timeout_ms,
                     std::string& why) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        if (vnic_forwarding(socket, vnic, why) == forwarding::yes) {
            return true;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

}  // namespace jakiro::cni
