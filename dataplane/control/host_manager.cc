#include "host_manager.hh"

#include <rte_dev.h>
#include <rte_ethdev.h>

#include <set>
#include <sstream>

#include "../ports.hh"
#include "../verbs/channel_server.hh"
#include "../vnet_face/face_registry.hh"
#include "table_builder.hh"

namespace jakiro {

bool host_manager::open_port(const std::string& role, const std::string& devargs, uint16_t& port,
                             std::string& error) {
    const auto probed = probe_port(devargs, error, role == "uplink" ? _pool : nullptr);
    if (!probed || !start_port(*probed, _pool, _state.config.underlay.mtu, error)) {
        error = role + ": " + error;
        return false;
    }
    port = *probed;
    return true;
}

void host_manager::close_port(uint16_t port) {
    if (vnet::is_face_port(port)) {
        stop_port(port);  // closes the face
        return;
    }
    rte_eth_dev_info info{};
    rte_eth_dev_info_get(port, &info);
    stop_port(port);
    // Detach the virtual device too, so the same devargs can be probed again later.
    if (info.device != nullptr) {
        rte_dev_remove(info.device);
    }
}

bool host_manager::start(std::string& error) {
    const auto& config = _state.config;
    if (!open_port("uplink", config.underlay.port, _uplink_port, error)) {
        return false;
    }
    for (const auto& vnic : config.vnics) {
        uint16_t port = 0;
        if (!open_port(vnic.name, vnic.port, port, error)) {
            return false;
        }
        _vnics[vnic.name] = {_next_slot++, port, vnic.port};
    }
    refresh_port_records();
    return publish(config, error);
}

void host_manager::refresh_port_records() {
    _state.ports.clear();
    _state.ports.push_back({"uplink", _state.config.underlay.port, _uplink_port});
    _state.slot_names.assign(_next_slot, "");
    for (const auto& vnic : _state.config.vnics) {
        const auto& binding = _vnics.at(vnic.name);
        _state.ports.push_back({vnic.name, binding.devargs, binding.port});
        _state.slot_names[binding.slot] = vnic.name;
    }
}

bool host_manager::publish(const host_config& config, std::string& error) {
    port_assignment assignment;
    assignment.uplink_port = _uplink_port;
    assignment.uplink_mac = port_mac(_uplink_port);
    for (const auto& vnic : config.vnics) {
        const auto& binding = _vnics.at(vnic.name);
        assignment.vnic_ports.push_back(binding.port);
        assignment.vnic_slots.push_back(binding.slot);
    }
    auto tables = build_tables(config, assignment, *_state.neighbors, _generation + 1, error);
    if (!tables) {
        return false;
    }
    ++_generation;
    _state.publisher->publish(std::move(tables));
    return true;
}

bool host_manager::apply(host_config next, std::string& summary, std::string& error) {
    const host_config& current = _state.config;
    if (next.name != current.name || next.underlay.port != current.underlay.port ||
        next.underlay.ip != current.underlay.ip || next.underlay.mtu != current.underlay.mtu) {
        error = "host name and underlay cannot change while jakirod runs (restart it)";
        return false;
    }
    if (next.conntrack.max_flows != current.conntrack.max_flows) {
        error = "host.conntrack.max_flows cannot change while jakirod runs (restart it)";
        return false;
    }
    // A vNIC whose identity changed is removed and added again.
    auto same_vnic = [](const vnic_config& a, const vnic_config& b) {
        return a.port == b.port && a.mac == b.mac && a.ip.address == b.ip.address && a.vpc == b.vpc;
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
    std::vector<std::string> opened;
    for (const auto& vnic : next.vnics) {
        if (!added.count(vnic.name)) {
            continue;
        }
        uint16_t port = 0;
        if (!open_port(vnic.name, vnic.port, port, error)) {
            for (const auto& name : opened) {
                close_port(_vnics.at(name).port);
                _vnics.erase(name);
            }
            return false;
        }
        _vnics[vnic.name] = {_next_slot++, port, vnic.port};
        opened.push_back(vnic.name);
    }
    if (!publish(next, error)) {
        for (const auto& name : opened) {
            close_port(_vnics.at(name).port);
            _vnics.erase(name);
        }
        return false;
    }
    // publish() waited for the worker to leave the old snapshot: the removed ports are idle.
    for (const auto& name : removed) {
        close_port(_vnics.at(name).port);
        _vnics.erase(name);
    }
    _state.config = std::move(next);
    refresh_port_records();
    // The RDMA faces follow: a removed vNIC's clients learn the device is gone and its QPs
    // leave the engine; an added one gets its endpoint; limits change in place.
    std::string rdma_error;
    if (_state.verbs != nullptr &&
        !_state.verbs->sync(verbs::endpoints_of(_state.config, slots_of(_state.config)),
                            rdma_error)) {
        rdma_error = "RDMA face: " + rdma_error + "\n";
    }

    std::ostringstream out;
    out << "applied " << _state.config.source_file << ": policy generation " << _generation << ", "
        << _state.config.security_groups.size() << " security groups, "
        << _state.config.vnics.size() << " vNICs (" << added.size() << " added, " << removed.size()
        << " removed), " << _state.config.peers.size() << " peers\n";
    summary = out.str() + rdma_error;
    return true;
}

std::vector<uint16_t> host_manager::slots_of(const host_config& config) const {
    std::vector<uint16_t> slots;
    for (const auto& vnic : config.vnics) {
        slots.push_back(_vnics.at(vnic.name).slot);
    }
    return slots;
}

void host_manager::stop_ports() {
    for (const auto& port : _state.ports) {
        stop_port(port.port_id);
    }
}

}  // namespace jakiro
