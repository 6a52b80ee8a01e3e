#pragma once
// Where the cluster's state lives in etcd (README.md in this folder has the table):
//   /jakiro/v1/vpcs/<vpc>                a VPC
//   /jakiro/v1/groups/<vpc>/<group>      a security group of a VPC
//   /jakiro/v1/vnics/<vpc>/<vnic>        a vNIC: IP, MAC, host, groups, QoS, RDMA limits
//   /jakiro/v1/homes/<host>/<vpc>/<vnic> the index of a host's vNICs: which VPCs it serves
//   /jakiro/v1/hosts/<host>              a host and its underlay address (kept when it dies)
//   /jakiro/v1/alive/<host>              the host's liveness, under its lease
//   /jakiro/v1/readers/<host>            the vNIC key forms the host's jakirod reads (durable)
//   /jakiro/v1/schema                    the cluster's marker: no legacy vNIC key is left
// Records are grouped per VPC so that one prefix read and one key test cover one VPC: a host
// follows only the VPCs its own vNICs are in, and learns which those are from its homes/.
// The older vNIC key, /jakiro/v1/vnics/<vnic>, still parses (`legacy`): while the cluster has
// no `schema` marker, jakiroctl writes both forms and jakirod follows both, so that hosts that
// still run a jakirod reading only legacy keys lose nothing while the others are upgraded
// (schema_migration.hh); `jakiroctl migrate` removes the legacy keys once every host reads
// per-VPC keys and writes the marker.
// Values are the same entries as in a cluster YAML, one YAML flow mapping (JSON works too).
// Pure string logic: no etcd, no YAML.

#include <optional>
#include <string>
#include <string_view>

namespace jakiro::control_plane {

// The version is part of the prefix: a v2 schema can live next to v1 while hosts migrate.
inline constexpr std::string_view key_root = "/jakiro/v1/";

enum class record_kind { vpc, group, vnic, host, alive, home, reader, schema };

struct record_key {
    record_kind kind = record_kind::vpc;
    std::string vpc;   // groups, vNICs and homes: the VPC the record belongs to
    std::string name;  // the record's name (a home: the vNIC's)
    std::string host;  // homes only: the host whose index it is
    // A vNIC key without its VPC (/jakiro/v1/vnics/<vnic>): readable, no longer written.
    bool legacy = false;
    bool operator==(const record_key&) const = default;
};

// "vpcs", "groups", "vnics", "hosts", "alive", "homes", "readers", "schema": the path segment
// after the root (the schema marker is that segment alone: /jakiro/v1/schema).
std::string_view kind_segment(record_kind kind);
// The key of a record; names must be usable as one path segment (see valid_name).
std::string key_of(const record_key& key);
// The prefix of every record of a kind ("/jakiro/v1/vnics/").
std::string prefix_of(record_kind kind);
// The prefix of a kind's records in one VPC ("/jakiro/v1/vnics/blue/"): groups and vNICs.
std::string prefix_of(record_kind kind, std::string_view vpc);
// The prefix of one host's index ("/jakiro/v1/homes/h1/").
std::string homes_prefix_of(std::string_view host);
// The cluster's schema marker (/jakiro/v1/schema): present once no legacy vNIC key is left and
// every host reads per-VPC keys.
std::string schema_marker_key();
// Parses a key under key_root; nullopt for anything else (foreign keys, extra segments, empty
// names), which readers ignore.
std::optional<record_key> parse_key(std::string_view key);
// A name is one non-empty path segment of printable ASCII without '/'.
bool valid_name(std::string_view name);
// etcd's range_end for "every key starting with `prefix`": the prefix with its last byte + 1.
std::string prefix_range_end(std::string_view prefix);

}  // namespace jakiro::control_plane
