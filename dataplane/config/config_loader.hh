#pragma once
// Loads and validates a host YAML file. Every problem is reported with file, line and field.

#include <yaml-cpp/node/node.h>

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dataplane/config/host_config.hh"

namespace jakiro {

struct config_error {
    std::string file;
    int line = 0;       // 1-based; 0 when the file could not be read at all
    std::string field;  // path such as "vnics[1].mac"
    std::string message;

    std::string to_string() const;  // "file:line: field: message"
};

struct config_result {
    host_config config;
    std::vector<config_error> errors;  // empty means the config is valid
    bool ok() const { return errors.empty(); }
};

config_result load_host_config_file(const std::string& path);
// For tests and `jakiroctl apply`: parse YAML text as if it came from `file_name`.
config_result load_host_config_text(const std::string& yaml_text, const std::string& file_name);

// A cluster document (`jakiroctl --etcd URL apply`, and the records jakirod reads from etcd):
// `hosts`, `vpcs`, `security_groups` and `vnics` whose entries name their `host` instead of a
// port. The result's config holds them (no host section); vnics[].host is set.
config_result load_cluster_config_text(const std::string& yaml_text, const std::string& file_name);
// The same from a parsed tree.
config_result load_cluster_config_node(const YAML::Node& root, const std::string& file_name);
// One cluster vNIC entry (a YAML flow mapping) checked against the VPCs and groups of
// `context` (left as it was); nullopt with `error` ("vnics[*].field: message") if it does not
// fit. Checks that need the other vNICs (unique address, MAC) are the caller's.
std::optional<vnic_config> load_cluster_vnic_text(const std::string& flow_text,
                                                  host_config& context, std::string& error);

}  // namespace jakiro
