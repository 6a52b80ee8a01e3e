#pragma once
// Where the cluster's state lives in etcd (README.md in this folder has the table):
//   /jakiro/v1/vpcs/<vpc>             a VPC
//   /jakiro/v1/groups/<vpc>/<group>   a security group of a VPC
//   /jakiro/v1/vnics/<vnic>           a vNIC: VPC, IP, MAC, host, groups, QoS, RDMA limits
//   /jakiro/v1/hosts/<host>           a host and its underlay address (kept when it dies)
//   /jakiro/v1/alive/<host>           the host's liveness, under its lease
// Values are the same entries as in a cluster YAML, one YAML flow mapping (JSON works too).
// Pure string logic: no etcd, no YAML.

#include <optional>
#include <string>
#include <string_view>

namespace jakiro::control_plane {

// The version is part of the prefix: a v2 schema can live next to v1 while hosts migrate.
inline constexpr std::string_view key_root = "/jakiro/v1/";

enum class record_kind { vpc, group, vnic, host, alive };

struct record_key {
    record_kind kind = record_kind::vpc;
    std::string vpc;  // groups only: group names are unique within their VPC
    std::string name;
    bool operator==(const record_key&) const = default;
};

// "vpcs", "groups", "vnics", "hosts", "alive": the path segment after the root.
std::string_view kind_segment(record_kind kind);
// The key of a record; names must be usable as one path segment (see valid_name).
std::string key_of(const record_key& key);
// The prefix of every record of a kind ("/jakiro/v1/vnics/").
std::string prefix_of(record_kind kind);
// Parses a key under key_root; nullopt for anything else (foreign keys, extra segments, empty
// names), which readers ignore.
std::optional<record_key> parse_key(std::string_view key);
// A name is one non-empty path segment of printable ASCII without '/'.
bool valid_name(std::string_view name);
// etcd's range_end for "every key starting with `prefix`": the prefix with its last byte + 1.
std::string prefix_range_end(std::string_view prefix);

}  // namespace jakiro::control_plane
