#pragma once
// What a runtime hands the plugin (CNI spec 1.0.0, "Parameters"): the CNI_* environment and the
// network configuration on stdin, parsed and checked before anything is touched. Every value
// that later becomes a file name, an interface name or a line of a host YAML is checked here.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "cni/cni_error.hh"

namespace jakiro::cni {

inline constexpr const char* supported_version = "1.0.0";

struct route {
    uint32_t dst = 0;  // host order
    uint8_t length = 0;
    std::optional<uint32_t> gw;
};

// The network configuration (stdin), with per-container overrides already applied.
struct network_config {
    std::string cni_version;
    std::string name;  // the network: one path segment of the lease directory
    // The host YAML jakirod runs with: its host name, underlay MTU and (without `control:`) the
    // file whose vnics: list this plugin edits and applies; with `control:`, the etcd endpoints.
    std::string host_config;
    std::string socket;  // jakirod's control socket; default /run/jakiro/<host.name>.sock
    std::string vpc;
    uint32_t subnet = 0;  // host order
    uint8_t subnet_length = 0;
    uint32_t range_start = 0;  // first and last address leased (default: the subnet's usable)
    uint32_t range_end = 0;
    std::optional<uint32_t> gateway;  // never leased; a default route through it when set
    std::vector<route> routes;
    std::vector<std::string> security_groups;
    YAML::Node qos;                          // vnics[].qos as in the host YAML; null: not shaped
    std::string port = "vnet:iface={name}";  // the vNIC's port (host YAML mode)
    std::string data_dir = "/var/lib/jakiro/cni";
    uint32_t ready_timeout_ms = 10000;
    std::optional<uint32_t> requested_ip;  // CNI_ARGS IP=, or args.jakiro.ip
};

enum class command { add, del, check, version };

struct request {
    command cmd = command::version;
    std::string container_id;
    std::string netns;  // CNI_NETNS: a path (may be empty for DEL)
    std::string ifname;
    network_config config;
};

// Parses the environment (`env` is CNI_* name -> value) and the stdin text. For VERSION only
// CNI_COMMAND is looked at. Returns nullopt and sets `error` on bad input.
std::optional<request> parse_request(const std::map<std::string, std::string>& env,
                                     const std::string& stdin_text, cni_error& error);

// Names this plugin puts into paths and interface names: [A-Za-z0-9][A-Za-z0-9_.-]*, at most
// `max` characters (the spec's rule for container IDs).
bool valid_identifier(const std::string& text, std::size_t max);
// The spec's interface name rules: 1..15 bytes, not "." or "..", no '/', ':' or whitespace.
bool valid_ifname(const std::string& text);

}  // namespace jakiro::cni
