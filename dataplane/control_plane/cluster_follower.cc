#include "dataplane/control_plane/cluster_follower.hh"

#include <algorithm>

#include "dataplane/control/overlay_sealing_setup.hh"
#include "dataplane/control/table_builder.hh"
#include "dataplane/control_plane/host_view.hh"
#include "dataplane/log.hh"

namespace jakiro::control_plane {

namespace {

bool same_identity(const vnic_config& a, const vnic_config& b) {
    // What host_manager::apply cannot change in place (it would remove and add the vNIC).
    return a.port == b.port && a.mac == b.mac && a.ip.address == b.ip.address && a.ip6 == b.ip6 &&
           a.vpc == b.vpc;
}

bool same_peer(const peer_config& a, const peer_config& b) {
    return a.vpc == b.vpc && a.ip == b.ip && a.ip6 == b.ip6 && a.host == b.host && a.mac == b.mac &&
           a.security_groups == b.security_groups;
}

const vnic_config* find_vnic(const host_config& config, const std::string& name) {
    for (const auto& vnic : config.vnics) {
        if (vnic.name == name) {
            return &vnic;
        }
    }
    return nullptr;
}

}  // namespace

cluster_follower::cluster_follower(daemon_state& state, host_manager& host, host_config local)
    : _state(state), _host(host), _local(std::move(local)) {
    _status.endpoints = _local.control ? _local.control->etcd : std::vector<std::string>{};
    _status.since = std::chrono::system_clock::now();
    _status.last_error = "not connected yet";
}

host_config cluster_follower::initial_config(const std::shared_ptr<const cluster_view>& view) {
    if (!view || !view->usable) {
        return _local;
    }
    // Peers, groups and VPCs now; local vNICs through the first apply, where a port that
    // cannot open yet only makes its vNIC wait instead of stopping jakirod.
    auto composed = compose_host_config(_local, *view);
    composed.config.vnics.clear();
    composed.config.source_file = "etcd revision " + std::to_string(view->revision);
    _pending = {view};
    _pending_received = std::chrono::steady_clock::now();
    _scheduled = true;  // applied by the first post (see set_poster's caller in main)
    return composed.config;
}

void cluster_follower::offer(std::shared_ptr<const cluster_view> view,
                             std::chrono::steady_clock::time_point received) {
    bool post = false;
    {
        std::lock_guard lock(_mutex);
        if (!view->delta) {
            _pending.clear();  // a whole view says everything the views before it said
        }
        if (_pending.empty()) {
            _pending_received = received;  // a burst counts from its first event
        }
        _pending.push_back(std::move(view));
        post = !_scheduled;
        _scheduled = true;
    }
    if (post && _post) {
        _post([this] { apply_pending(); });
    }
}

void cluster_follower::offer_connection(const connection_event& event) {
    if (!_post) {
        return;
    }
    _post([this, event] {
        if (event.connected != _status.connected) {
            _status.since = std::chrono::system_clock::now();  // not when only the error changes
        }
        _status.connected = event.connected;
        _status.ever_connected |= event.connected;
        _status.revision_seen = std::max(_status.revision_seen, event.revision);
        _status.last_error = event.error;
    });
}

void cluster_follower::apply_pending() {
    std::vector<std::shared_ptr<const cluster_view>> views;
    std::chrono::steady_clock::time_point received;
    {
        std::lock_guard lock(_mutex);
        views.swap(_pending);
        received = _pending_received;
        _scheduled = false;
    }
    if (views.empty()) {
        return;
    }
    std::size_t first_delta = 0;
    bool whole_applied = false;
    if (!views.front()->delta) {
        whole_applied = _in_step = apply_view(*views.front());
        first_delta = 1;
    }
    if (first_delta < views.size()) {
        apply_deltas(std::span(views).subspan(first_delta));
    }
    note_latency(received);
    if (whole_applied) {
        // Off the measured path: the next delta then costs only its change.
        _host.prepare_patches();
    }
}

void cluster_follower::tick() {
    if (_keys_waiting && _hosts) {
        offer_overlay_keys(*_hosts);
    }
    if (_waiting.empty()) {
        return;
    }
    std::string error;
    for (auto it = _waiting.begin(); it != _waiting.end();) {
        host_config one = _state.config;
        one.vnics.push_back(it->second);
        one.source_file = "etcd revision " + std::to_string(_status.revision_applied);
        it = apply_config(std::move(one), error) ? _waiting.erase(it) : std::next(it);
    }
    _status.local_vnics = _state.config.vnics.size();
    _status.waiting_vnics.clear();
    for (const auto& [name, vnic] : _waiting) {
        _status.waiting_vnics.push_back(name);
    }
}

void cluster_follower::lost_track(const std::string& why) {
    _in_step = false;
    ++_status.apply_failures;
    _status.last_error = "apply: " + why;
    log::warning("apply_failed", why + "; reading the whole view again");
    if (_request_whole) {
        _request_whole();
    }
}

void cluster_follower::apply_deltas(std::span<const std::shared_ptr<const cluster_view>> views) {
    const auto& last = *views.back();
    _status.revision_seen = std::max(_status.revision_seen, last.revision);
    if (!_in_step) {
        // The state in force is not the view the deltas follow: wait for a whole one.
        if (_request_whole) {
            _request_whole();
        }
        return;
    }
    // By key, the first view's before and the last one's after.
    std::map<std::string, vnic_change> merged;
    for (const auto& view : views) {
        for (const auto& change : view->changes) {
            const auto [at, fresh] = merged.try_emplace(change.key);
            if (fresh) {
                at->second.before = change.before;
            }
            at->second.after = change.after;
        }
    }
    std::vector<peer_change> peers;
    auto& unplaced = _status.unplaced_vnics;
    for (const auto& [key, change] : merged) {
        peer_change peer;
        if (change.before) {
            peer.before = peer_of(_local, *last.hosts, *change.before);
            if (!peer.before) {
                std::erase(unplaced, change.before->name);
            }
        }
        if (change.after) {
            peer.after = peer_of(_local, *last.hosts, *change.after);
            if (!peer.after) {
                unplaced.push_back(change.after->name);
            }
        }
        if (peer.before && peer.after && same_peer(*peer.before, *peer.after)) {
            continue;  // what changed (QoS, quotas) is the remote host's business
        }
        if (peer.before || peer.after) {
            peers.push_back(std::move(peer));
        }
    }
    if (!peers.empty()) {
        std::string error;
        if (!_host.apply_peers(peers, error)) {
            lost_track(error);
            return;
        }
        // Members this host knows of each group: the changed peers' groups only.
        auto count = [&](const peer_config& peer, int step) {
            for (const auto& name : peer.security_groups) {
                const auto group = peer.vpc + "/" + name;
                for (auto& [which, members] : _status.group_members) {
                    if (which == group) {
                        members = static_cast<std::size_t>(static_cast<long>(members) + step);
                    }
                }
            }
        };
        for (const auto& peer : peers) {
            if (peer.before) {
                count(*peer.before, -1);
            }
            if (peer.after) {
                count(*peer.after, 1);
            }
        }
    }
    ++_status.views_applied;
    _status.revision_applied = last.revision;
    _status.records = last.records;
    _status.record_bytes = last.bytes;
    _status.rejected = last.rejected;
    _status.peers = _state.config.peers.size();
    _status.patched_publications = _host.patched_publications();
}

void cluster_follower::note_latency(std::chrono::steady_clock::time_point received) {
    if (received == std::chrono::steady_clock::time_point{}) {
        return;
    }
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - received)
                        .count();
    auto& samples = _status.publish_latency_us;
    if (samples.size() == control_plane_status::max_latency_samples) {
        samples.erase(samples.begin());
    }
    samples.push_back(static_cast<uint64_t>(us));
}

void cluster_follower::offer_overlay_keys(const host_directory& hosts) {
    _keys_waiting = false;
    for (const auto& [name, key] : hosts.overlay_keys) {
        const auto host = hosts.underlay.find(name);
        if (name == _local.name || host == hosts.underlay.end() || host->second == 0 ||
            _keys_offered.count({host->second, key}) != 0) {
            continue;
        }
        if (!offer_overlay_key(_state, host->second, key)) {
            _keys_waiting = true;
            return;
        }
        _keys_offered.insert({host->second, key});
    }
}

bool cluster_follower::apply_config(host_config next, std::string& error) {
    std::string summary;
    const std::string source = next.source_file;
    if (!_host.apply(std::move(next), summary, error)) {
        return false;
    }
    log::info("applied", summary.substr(0, summary.find('\n')), {{"source", source}});
    return true;
}

bool cluster_follower::apply_view(const cluster_view& view) {
    _status.revision_seen = std::max(_status.revision_seen, view.revision);
    _status.records = view.records;
    _status.record_bytes = view.bytes;
    _status.rejected = view.rejected;
    _status.legacy_keys = view.legacy_keys;
    if (!view.usable) {
        ++_status.apply_failures;
        log::warning("cluster_refused",
                     "the records in etcd do not form a valid cluster; "
                     "keeping the state in force",
                     {{"revision", view.revision}});
        return false;
    }
    if (view.hosts) {
        _hosts = view.hosts;
        offer_overlay_keys(*view.hosts);  // before the peers they seal to are published
    }
    auto composed = compose_host_config(_local, view);
    auto& next = composed.config;
    next.source_file = "etcd revision " + std::to_string(view.revision);
    const host_config& current = _state.config;
    std::string error;

    // A local vNIC whose port, MAC, IP or VPC changed goes away in one apply and comes back
    // in the next (host_manager refuses both at once).
    auto identity_changed = [&](const vnic_config& v) {
        const auto* old = find_vnic(current, v.name);
        return old != nullptr && !same_identity(*old, v);
    };
    // Checked before copying: the configuration holds every peer of the host's VPCs.
    if (std::any_of(next.vnics.begin(), next.vnics.end(), identity_changed)) {
        host_config without_changed = next;
        std::erase_if(without_changed.vnics, identity_changed);
        if (!apply_config(without_changed, error)) {
            log::warning("apply_failed", error, {{"source", next.source_file}});
        }
    }

    _waiting.clear();
    // The configuration holds every peer of the host's VPCs: handed over, not copied, unless
    // a new local vNIC might fail to open and the rest must be applied without it.
    const bool adds_vnics = std::any_of(next.vnics.begin(), next.vnics.end(), [&](const auto& v) {
        return find_vnic(_state.config, v.name) == nullptr;
    });
    const std::string source = next.source_file;
    if (!adds_vnics) {
        if (!apply_config(std::move(next), error)) {
            ++_status.apply_failures;
            _status.last_error = "apply: " + error;
            log::warning("apply_failed", error, {{"source", source}});
            return false;
        }
    } else if (!apply_config(next, error)) {
        // Most likely a new local vNIC whose port cannot open yet: apply everything else, then
        // each new vNIC alone; those that still fail wait for the next tick.
        host_config base = next;
        std::vector<vnic_config> added;
        std::erase_if(base.vnics, [&](const vnic_config& v) {
            if (find_vnic(_state.config, v.name) == nullptr) {
                added.push_back(v);
                return true;
            }
            return false;
        });
        if (!apply_config(base, error)) {
            ++_status.apply_failures;
            _status.last_error = "apply: " + error;
            log::warning("apply_failed", error, {{"source", next.source_file}});
            return false;
        }
        for (const auto& vnic : added) {
            host_config one = _state.config;
            one.vnics.push_back(vnic);
            one.source_file = next.source_file;
            if (!apply_config(one, error)) {
                _waiting.emplace(vnic.name, vnic);
                log::warning("vnic_waiting", error, {{"vnic", vnic.name}});
            }
        }
    }
    ++_status.views_applied;
    _status.revision_applied = view.revision;
    _status.local_vnics = _state.config.vnics.size();
    _status.peers = _state.config.peers.size();
    _status.vpcs.clear();
    for (const auto& vpc : _state.config.vpcs) {
        _status.vpcs.push_back(vpc.name);
    }
    _status.group_members.clear();
    const auto members = group_members(_state.config);
    for (std::size_t g = 0; g < _state.config.security_groups.size(); ++g) {
        const auto& group = _state.config.security_groups[g];
        _status.group_members.emplace_back(group.vpc + "/" + group.name,
                                           members.of_group[g].size());
    }
    _status.stale_hosts = composed.stale_hosts;
    _status.unplaced_vnics = composed.unplaced;
    _status.waiting_vnics.clear();
    for (const auto& [name, vnic] : _waiting) {
        _status.waiting_vnics.push_back(name);
    }
    _status.patched_publications = _host.patched_publications();
    return true;
}

}  // namespace jakiro::control_plane
