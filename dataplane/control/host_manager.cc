#include "dataplane/control/host_manager.hh"

#include <rte_ethdev.h>

#include <set>
#include <sstream>

#include "dataplane/control/rdma_host_limits.hh"
#include "dataplane/control/restart_report.hh"
#include "dataplane/control/table_builder.hh"
#include "dataplane/control/worker_assignment.hh"
#include "dataplane/ports.hh"
#include "rnic/verbs/channel_server.hh"

namespace jakiro {

bool host_manager::start(std::string& error) {
    const auto& config = _state.config;
    const auto uplink = probe_port(config.underlay.port, error, _pool);  // a vnet face: the uplink
    if (!uplink || !start_port(*uplink, _pool, config.underlay.mtu, error)) {
        error = "uplink: " + error;
        return false;
    }
    _uplink_port = *uplink;
    for (const auto& v : config.vnics) {
        auto opened = vnic::open(v, _next_slot, _pool, config.underlay.mtu, error);
        if (opened == nullptr) {
            return false;
        }
        place_next_slot();
        ++_next_slot;
        _vnics[v.name] = std::move(opened);
    }
    refresh_port_records();
    auto tables = build(config, error);
    if (tables == nullptr) {
        return false;
    }
    publish(std::move(tables));
    return true;
}

bool host_manager::serve_rdma(verbs::channel_server& server, std::string& warnings) {
    _state.verbs = &server;
    bool all = true;
    for (const auto& v : _state.config.vnics) {
        std::string why;
        auto& opened = *_vnics.at(v.name);
        if (!opened.open_rdma_face(server, v, _worker_of_slot.at(opened.slot()), why)) {
            warnings += why + "\n";
            all = false;
        }
    }
    // The vNICs' quotas are known now: the host's mappings and descriptors are shared out.
    warnings += size_rdma_reserve(server.reserve(), _state.config);
    return all;
}

void host_manager::place_next_slot() {
    std::vector<uint8_t> owners;
    for (const auto& [name, v] : _vnics) {
        owners.push_back(_worker_of_slot.at(v->slot()));
    }
    _worker_of_slot.resize(_next_slot + 1u, 0);
    _worker_of_slot[_next_slot] = least_loaded_worker(owners, _state.worker_count);
}

void host_manager::refresh_port_records() {
    _state.ports.clear();
    _state.ports.push_back({"uplink", _state.config.underlay.port, _uplink_port});
    _state.slot_names.assign(_next_slot, "");
    _state.slot_workers = _worker_of_slot;
    for (const auto& vnic : _state.config.vnics) {
        const auto& v = *_vnics.at(vnic.name);
        _state.ports.push_back({vnic.name, v.devargs(), v.port()});
        _state.slot_names[v.slot()] = vnic.name;
    }
}

std::unique_ptr<datapath_tables> host_manager::build(const host_config& config,
                                                     std::string& error) const {
    port_assignment assignment;
    assignment.uplink_port = _uplink_port;
    assignment.uplink_mac = port_mac(_uplink_port);
    for (const auto& vnic : config.vnics) {
        const auto& v = *_vnics.at(vnic.name);
        assignment.vnic_ports.push_back(v.port());
        assignment.vnic_slots.push_back(v.slot());
        assignment.vnic_workers.push_back(_worker_of_slot.at(v.slot()));
    }
    return build_tables(config, assignment, *_state.neighbors, _generation + 1, error);
}

void host_manager::publish(std::unique_ptr<datapath_tables> tables) {
    ++_generation;
    // A full build: what the patcher and the peer index kept describes the snapshot before.
    _patcher.reset();
    _peers_indexed = false;
    _state.publisher->publish(std::move(tables));
}

std::vector<uint16_t> host_manager::slots_of(const host_config& config) const {
    std::vector<uint16_t> slots;
    for (const auto& vnic : config.vnics) {
        slots.push_back(_vnics.at(vnic.name)->slot());
    }
    return slots;
}

void host_manager::index_peers() {
    if (_peers_indexed) {
        return;
    }
    const auto& config = _state.config;
    _peer_index.clear();
    _peer_index.reserve(config.peers.size());
    for (std::size_t i = 0; i < config.peers.size(); ++i) {
        const auto& peer = config.peers[i];
        _peer_index[peer_key(vpc_index(config, peer.vpc), peer.ip)] = i;
    }
    _peers_indexed = true;
}

bool host_manager::swap_peer(const std::optional<peer_config>& before,
                             const std::optional<peer_config>& after) {
    auto& peers = _state.config.peers;
    if (before) {
        const auto found =
            _peer_index.find(peer_key(vpc_index(_state.config, before->vpc), before->ip));
        if (found == _peer_index.end()) {
            return false;
        }
        const std::size_t at = found->second;
        _peer_index.erase(found);
        if (at + 1 != peers.size()) {
            peers[at] = std::move(peers.back());
            _peer_index[peer_key(vpc_index(_state.config, peers[at].vpc), peers[at].ip)] = at;
        }
        peers.pop_back();
    }
    if (after) {
        const auto key = peer_key(vpc_index(_state.config, after->vpc), after->ip);
        if (!_peer_index.emplace(key, peers.size()).second) {
            return false;
        }
        peers.push_back(*after);
    }
    return true;
}

void host_manager::prepare_patches() {
    std::string error;
    index_peers();
    _state.publisher->read_current([&](const datapath_tables& tables) {
        if (!_patcher.prepare(tables, _state.config, error)) {
            _patcher.reset();  // the next patch tries again
        }
        return 0;
    });
}

bool host_manager::apply_peers(std::span<const peer_change> changes, std::string& error) {
    index_peers();
    // The configuration first (removals, then additions: a peer that changed is both), undone
    // if a peer is not where it should be.
    std::size_t done = 0;
    bool consistent = true;
    for (const auto& change : changes) {
        if (change.before && !swap_peer(change.before, std::nullopt)) {
            consistent = false;
            break;
        }
        ++done;
    }
    std::size_t added = 0;
    for (; consistent && added < changes.size(); ++added) {
        if (changes[added].after && !swap_peer(std::nullopt, changes[added].after)) {
            consistent = false;
            break;
        }
    }
    auto undo = [&] {
        for (std::size_t i = 0; i < added; ++i) {
            if (changes[i].after) {
                swap_peer(changes[i].after, std::nullopt);
            }
        }
        for (std::size_t i = 0; i < done; ++i) {
            if (changes[i].before) {
                swap_peer(std::nullopt, changes[i].before);
            }
        }
    };
    if (!consistent) {
        undo();
        error = "a changed peer is not in the configuration in force";
        return false;
    }
    const auto* current = _state.publisher->current();  // only this thread publishes
    const auto slots = slots_of(_state.config);
    std::string why;
    auto tables = _patcher.patch(*current, _state.config, changes, slots, *_state.neighbors,
                                 _generation + 1, why);
    if (tables) {
        std::shared_ptr<overlay::vlt> previous = current->vlt;
        ++_generation;
        ++_patched;
        _state.publisher->publish(std::move(tables));
        // publish() waited for the workers to leave the previous snapshot: its VLT is free.
        _patcher.retired(std::move(previous));
        return true;
    }
    tables = build(_state.config, error);
    if (!tables) {
        undo();
        return false;
    }
    const bool indexed = _peers_indexed;
    publish(std::move(tables));
    _peers_indexed = indexed;  // the index follows the configuration, which it still matches
    return true;
}

bool host_manager::apply(host_config next, std::string& summary, std::string& error) {
    const host_config& current = _state.config;
    if (next.name != current.name || next.underlay.port != current.underlay.port ||
        next.underlay.ip != current.underlay.ip || next.underlay.mtu != current.underlay.mtu) {
        error = "host name and underlay cannot change while jakirod runs (restart it)";
        return false;
    }
    if (next.overlay != current.overlay) {
        error = "overlay (keys, encryption) cannot change while jakirod runs (restart it)";
        return false;
    }
    if (next.conntrack.max_flows != current.conntrack.max_flows) {
        error = "host.conntrack.max_flows cannot change while jakirod runs (restart it)";
        return false;
    }
    // A vNIC whose identity changed is removed and added again.
    auto same_vnic = [](const vnic_config& a, const vnic_config& b) {
        return a.port == b.port && a.mac == b.mac && a.ip.address == b.ip.address &&
               a.ip6 == b.ip6 && a.vpc == b.vpc;
    };
    std::set<std::string> keep, removed, added;
    for (const auto& vnic : current.vnics) {
        removed.insert(vnic.name);
    }
    for (const auto& vnic : next.vnics) {
        const auto* old = [&]() -> const vnic_config* {
            for (const auto& v : current.vnics) {
                if (v.name == vnic.name) {
                    return &v;
                }
            }
            return nullptr;
        }();
        if (old != nullptr && same_vnic(*old, vnic)) {
            keep.insert(vnic.name);
            removed.erase(vnic.name);
        } else {
            added.insert(vnic.name);
        }
    }
    // Slots are not reused while jakirod runs: only the vNICs this apply adds take new ones.
    if (next.vnics.size() > max_vnics || _next_slot + added.size() > max_vnics) {
        error = "no vNIC slots left (restart jakirod to renumber)";
        return false;
    }
    // Ports of removed vNICs close only after the new snapshot is out, so a vNIC that is
    // replaced by one with the same port must be closed first; such a vNIC loses its flows.
    auto port_reused = [&]() {
        for (const auto& name : added) {
            for (const auto& vnic : next.vnics) {
                if (vnic.name == name && removed.count(name)) {
                    return true;
                }
            }
        }
        return false;
    }();
    if (port_reused) {
        error =
            "a vNIC's port, MAC, IP or VPC changed: delete it in one apply and add it in the next";
        return false;
    }
    // New vNICs' Ethernet faces first; nothing else changes if one cannot open.
    std::vector<std::string> opened;
    for (const auto& v : next.vnics) {
        if (!added.count(v.name)) {
            continue;
        }
        auto fresh = vnic::open(v, _next_slot, _pool, current.underlay.mtu, error);
        if (fresh == nullptr) {
            for (const auto& name : opened) {
                _vnics.erase(name);  // never published: the worker never saw them
            }
            return false;
        }
        place_next_slot();
        ++_next_slot;
        _vnics[v.name] = std::move(fresh);
        opened.push_back(v.name);
    }
    auto tables = build(next, error);
    if (tables == nullptr) {
        for (const auto& name : opened) {
            _vnics.erase(name);  // never published: the worker never saw them
        }
        return false;
    }
    // A removed vNIC's RDMA face goes before its slot leaves the snapshot: its clients learn
    // the device is gone and its QPs leave the engine while the datapath still knows where
    // their last frames go, and no tenant can post through a vNIC that is half gone.
    for (const auto& name : removed) {
        _vnics.at(name)->close_rdma_face();
    }
    publish(std::move(tables));
    // No worker counts under the old rule ids any more: ids that name other rules now start at
    // zero.
    _state.rule_hits.renumber(current.security_groups, next.security_groups, [&](uint32_t id) {
        uint64_t counted = 0;
        for (const auto* worker : _state.workers) {
            counted += id < max_rules ? worker->counters.rule_hits[id].read() : 0;
        }
        return counted;
    });
    // publish() waited for the worker to leave the old snapshot: the removed ports are idle.
    for (const auto& name : removed) {
        _vnics.erase(name);  // closes its port
        // Its counts go with it: a vNIC added under its name later is another and starts at 0.
        forget_counter_bases_of_vnic(_state.counter_bases, name);
    }
    _state.config = std::move(next);
    refresh_port_records();
    // The RDMA faces of new vNICs open now that the datapath knows them; kept ones take their
    // new limits in place.
    std::string rdma_error;
    if (_state.verbs != nullptr) {
        for (const auto& v : _state.config.vnics) {
            std::string why;
            auto& opened = *_vnics.at(v.name);
            if (!opened.open_rdma_face(*_state.verbs, v, _worker_of_slot.at(opened.slot()), why)) {
                rdma_error += "RDMA face: " + why + "\n";
            }
        }
        // New quotas, vNICs added or gone, host.rdma_limits: the shares follow.
        rdma_error += size_rdma_reserve(_state.verbs->reserve(), _state.config);
    }

    std::ostringstream out;
    out << "applied " << _state.config.source_file << ": policy generation " << _generation << ", "
        << _state.config.security_groups.size() << " security groups, "
        << _state.config.vnics.size() << " vNICs (" << added.size() << " added, " << removed.size()
        << " removed), " << _state.config.peers.size() << " peers\n";
    summary = out.str() + rdma_error;
    return true;
}

void host_manager::stop() {
    for (auto& [name, v] : _vnics) {
        v->close_rdma_face();
    }
    _vnics.clear();  // closes their ports
    stop_port(_uplink_port);
}

}  // namespace jakiro
