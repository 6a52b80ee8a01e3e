#pragma once
// What one host makes of the cluster: its host YAML (name, underlay, ports, control:) plus the
// cluster's records become the same host_config a full host YAML would have given, so the rest
// of jakirod (host_manager::apply, table_builder, the RCU publication) is unchanged:
//  - the cluster's VPCs and security groups, as they are;
//  - the vNICs on this host as local vNICs, their port from control.vnic_port;
//  - every other vNIC as a peer at its host's underlay address.
// Pure: no etcd, no DPDK.

#include <optional>
#include <string>
#include <vector>

#include "dataplane/control_plane/cluster_records.hh"

namespace jakiro::control_plane {

struct host_view {
    host_config config;
    // vNICs left out because their host never registered (no underlay address known yet).
    std::vector<std::string> unplaced;
    // Hosts whose lease has expired (registered, not alive): their vNICs stay reachable.
    std::vector<std::string> stale_hosts;
};

// The device string of local vNIC `name` from `pattern` ("{name}" replaced everywhere).
std::string vnic_port_of(const std::string& pattern, const std::string& name);

host_view compose_host_config(const host_config& local, const cluster_view& view);

// Another host's vNIC as this host's peer, at its host's underlay address; nullopt when it
// cannot be placed (its host has no address yet, or claims ours).
std::optional<peer_config> peer_of(const host_config& local, const host_directory& hosts,
                                   const vnic_config& vnic);

}  // namespace jakiro::control_plane
