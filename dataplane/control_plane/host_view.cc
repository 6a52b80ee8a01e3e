#include "dataplane/control_plane/host_view.hh"

#include <unordered_map>

namespace jakiro::control_plane {

namespace {
// How the test bed and a plain install attach a vNIC: the af_packet PMD on the host-side veth
// named after it. A host YAML overrides it with control.vnic_port.
constexpr const char* default_vnic_port = "net_af_packet_{name},iface={name}";
}  // namespace

std::string vnic_port_of(const std::string& pattern, const std::string& name) {
    std::string out = pattern.empty() ? default_vnic_port : pattern;
    const std::string token = "{name}";
    for (auto at = out.find(token); at != std::string::npos; at = out.find(token, at)) {
        out.replace(at, token.size(), name);
        at += name.size();
    }
    return out;
}

std::optional<peer_config> peer_of(const host_config& local, const host_directory& hosts,
                                   const vnic_config& vnic) {
    const auto host = hosts.underlay.find(vnic.host);
    // A vNIC whose host has no address yet, or claims ours, cannot be reached through it.
    if (host == hosts.underlay.end() || host->second == 0 || host->second == local.underlay.ip) {
        return std::nullopt;
    }
    peer_config peer;
    peer.vpc = vnic.vpc;
    peer.ip = vnic.ip.address;
    if (vnic.ip6) {
        peer.ip6 = vnic.ip6->address;
    }
    peer.host = host->second;
    peer.mac = vnic.mac;
    peer.security_groups = vnic.security_groups;
    return peer;
}

host_view compose_host_config(const host_config& local, const cluster_view& view) {
    host_view out;
    out.config = local;
    const auto& cluster = view.cluster;
    out.config.vpcs = cluster.vpcs;
    // Copied whole: rules refer to remote groups by index into this vector.
    out.config.security_groups = cluster.security_groups;
    out.config.vnics.clear();
    out.config.peers.clear();
    // The hosts themselves are not copied: nothing downstream reads them, and a change would
    // pay for every host of the cluster. Their addresses go into the peers below, looked up in
    // the directory the views share.
    out.config.hosts.clear();
    for (const auto& host : view.hosts->stale) {
        if (host != local.name) {
            out.stale_hosts.push_back(host);
        }
    }
    const std::string pattern = local.control ? local.control->vnic_port : "";
    for (const auto& vnic : cluster.vnics) {
        if (vnic.host == local.name) {
            auto mine = vnic;
            mine.port = vnic_port_of(pattern, vnic.name);
            out.config.vnics.push_back(std::move(mine));
            continue;
        }
        auto peer = peer_of(local, *view.hosts, vnic);
        if (!peer) {
            out.unplaced.push_back(vnic.name);
            continue;
        }
        out.config.peers.push_back(std::move(*peer));
    }
    return out;
}

}  // namespace jakiro::control_plane
