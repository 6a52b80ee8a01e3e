#include "dataplane/control/table_builder.hh"

#include <rte_byteorder.h>

#include <algorithm>
#include <cstring>

#include "dataplane/control/vnic_limits.hh"

namespace jakiro {

namespace {
rte_ether_addr to_ether(const mac_address& mac) {
    rte_ether_addr out;
    std::memcpy(out.addr_bytes, mac.data(), RTE_ETHER_ADDR_LEN);
    return out;
}
}  // namespace

secgroup::membership group_members(const host_config& config) {
    secgroup::membership members;
    members.of_group.resize(config.security_groups.size());
    for (const auto& vnic : config.vnics) {
        for (const auto& name : vnic.security_groups) {
            members.of_group[config.group_index(vnic.vpc, name)].push_back(vnic.ip.address);
        }
    }
    for (const auto& peer : config.peers) {
        for (const auto& name : peer.security_groups) {
            members.of_group[config.group_index(peer.vpc, name)].push_back(peer.ip);
        }
    }
    return members;
}

secgroup::membership6 group_members6(const host_config& config) {
    secgroup::membership6 members;
    members.of_group.resize(config.security_groups.size());
    for (const auto& vnic : config.vnics) {
        for (const auto& name : vnic.security_groups) {
            if (vnic.ip6) {
                members.of_group[config.group_index(vnic.vpc, name)].push_back(vnic.ip6->address);
            }
        }
    }
    for (const auto& peer : config.peers) {
        for (const auto& name : peer.security_groups) {
            if (peer.ip6) {
                members.of_group[config.group_index(peer.vpc, name)].push_back(*peer.ip6);
            }
        }
    }
    return members;
}

uint32_t vpc_index(const host_config& config, const std::string& name) {
    for (uint32_t i = 0; i < config.vpcs.size(); ++i) {
        if (config.vpcs[i].name == name) {
            return i;
        }
    }
    return no_vpc;
}

bool peer_vlt_entry(const peer_config& peer, overlay::underlay_neighbors& neighbors,
                    overlay::vlt_entry& entry) {
    entry = {};
    entry.kind = overlay::vlt_kind::remote_host;
    entry.host_ip = rte_cpu_to_be_32(peer.host);
    entry.neighbor = neighbors.slot_for(entry.host_ip);
    if (entry.neighbor == overlay::underlay_neighbors::none) {
        return false;
    }
    entry.has_inner_mac = peer.mac.has_value();
    if (peer.mac) {
        entry.inner_mac = to_ether(*peer.mac);
    }
    return true;
}

bool compile_vnic_policy(const host_config& config, std::size_t index,
                         const secgroup::membership& members, const secgroup::membership6& members6,
                         const secgroup::rule_catalog& catalog,
                         datapath_tables::vnic_policy& policy, std::string& error) {
    std::vector<std::size_t> groups;
    for (const auto& name : config.vnics[index].security_groups) {
        groups.push_back(
            static_cast<std::size_t>(config.group_index(config.vnics[index].vpc, name)));
    }
    for (auto dir : {secgroup::direction::ingress, secgroup::direction::egress}) {
        auto flat = secgroup::expand_rules(config.security_groups, groups, dir, members, catalog);
        if (groups.empty() && dir == secgroup::direction::egress) {
            // docs/architecture.md §7 default for a vNIC without groups: egress allowed,
            // ingress denied.
            flat.push_back({implicit_egress_rule, true, 0, {0, 0}, {}});
        }
        auto flat6 =
            secgroup::expand_rules6(config.security_groups, groups, dir, members6, catalog);
        if (groups.empty() && dir == secgroup::direction::egress) {
            flat6.push_back({implicit_egress_rule, true, 0, {}, {}});
        }
        policy.acl6[static_cast<int>(dir)] =
            std::make_shared<const secgroup::ipv6_rules>(std::move(flat6));
        policy.acl[static_cast<int>(dir)] = secgroup::acl_table::build(flat, error);
        if (!policy.acl[static_cast<int>(dir)]) {
            error = "vNIC " + config.vnics[index].name + ": " + error;
            return false;
        }
    }
    return true;
}

namespace {

// Compiles each vNIC's groups, both directions, into tables->policies.
bool compile_policies(const host_config& config, const std::vector<uint16_t>& slots,
                      datapath_tables& tables, std::string& error) {
    const secgroup::rule_catalog catalog(config.security_groups);
    if (catalog.size() >= implicit_egress_rule) {
        error = "more than " + std::to_string(implicit_egress_rule) + " security group rules";
        return false;
    }
    const auto members = group_members(config);
    const auto members6 = group_members6(config);
    for (std::size_t i = 0; i < config.vnics.size(); ++i) {
        if (!compile_vnic_policy(config, i, members, members6, catalog, tables.policies[slots[i]],
                                 error)) {
            return false;
        }
    }
    return true;
}

}  // namespace

std::unique_ptr<datapath_tables> build_tables(const host_config& config,
                                              const port_assignment& ports,
                                              overlay::underlay_neighbors& neighbors,
                                              uint32_t policy_generation, std::string& error) {
    if (config.vnics.size() > max_vnics) {
        error = "more than " + std::to_string(max_vnics) + " vNICs";
        return nullptr;
    }
    std::vector<uint16_t> slots = ports.vnic_slots;
    if (slots.empty()) {
        for (std::size_t i = 0; i < config.vnics.size(); ++i) {
            slots.push_back(static_cast<uint16_t>(i));
        }
    }
    uint16_t slot_count = 0;
    for (const uint16_t slot : slots) {
        slot_count = std::max<uint16_t>(slot_count, slot + 1);
    }
    auto tables = std::make_unique<datapath_tables>();
    tables->policy_generation = policy_generation;
    // A slot with no vNIC (one removed by apply) belongs to no VPC: anything still sent in its
    // name (a QP being torn down) must not read as VPC 0.
    vnic_view unused{};
    unused.vpc = no_vpc;
    tables->vnics.resize(slot_count, unused);
    tables->policies.resize(slot_count);
    tables->qos.resize(slot_count);
    tables->uplink_qos = config.uplink_qos;
    tables->uplink_port = ports.uplink_port;
    tables->underlay_ip = rte_cpu_to_be_32(config.underlay.ip);
    tables->underlay_mac = ports.uplink_mac;
    tables->gateway_mac = to_ether(config.gateway_mac);
    tables->tenant_mtu = config.tenant_mtu();
    tables->uplink_sealed = config.overlay.may_seal();
    tables->vnic_of_port.fill(no_vnic);

    auto vpcs = vni_map::create(static_cast<uint32_t>(config.vpcs.size()), error);
    uint32_t ipv6_addresses = 0;
    for (const auto& vnic : config.vnics) {
        ipv6_addresses += vnic.ip6.has_value();
    }
    for (const auto& peer : config.peers) {
        ipv6_addresses += peer.ip6.has_value();
    }
    tables->vlt = overlay::vlt::create(
        vlt_room(static_cast<uint32_t>(config.vnics.size() + config.peers.size())), error,
        vlt_room(ipv6_addresses));
    if (!vpcs || !tables->vlt) {
        return nullptr;
    }
    for (uint32_t i = 0; i < config.vpcs.size(); ++i) {
        tables->vni_of_vpc.push_back(config.vpcs[i].vni);
        vpcs->add(config.vpcs[i].vni, i);
    }
    tables->vpcs = std::move(vpcs);
    auto worker_of = [&](std::size_t i) -> uint8_t {
        return ports.vnic_workers.empty() ? 0 : ports.vnic_workers[i];
    };
    std::array<uint32_t, max_workers> vnics_of_worker{};
    for (std::size_t i = 0; i < config.vnics.size(); ++i) {
        ++vnics_of_worker[worker_of(i) % max_workers];
    }
    for (std::size_t i = 0; i < config.vnics.size(); ++i) {
        const auto& vnic = config.vnics[i];
        const uint16_t slot = slots[i];
        vnic_view view{};
        view.slot = slot;
        view.port_id = ports.vnic_ports[i];
        view.vpc = vpc_index(config, vnic.vpc);
        view.ip = rte_cpu_to_be_32(vnic.ip.address);
        view.mac = to_ether(vnic.mac);
        view.has_ip6 = vnic.ip6.has_value();
        if (vnic.ip6) {
            view.ip6 = vnic.ip6->address;
        }
        view.worker = worker_of(i);
        view.max_flows = flow_allowance(vnic.limits, config.conntrack.max_flows,
                                        vnics_of_worker[view.worker % max_workers]);
        view.rdma_local_work_rate = vnic.rdma.max_local_work_rate;
        view.max_packet_rate = packet_rate_allowance(vnic.limits);
        view.max_packet_buffers =
            packet_buffer_allowance(vnic.limits, vnet_face::superframe_pool_buffers,
                                    static_cast<uint32_t>(config.vnics.size()));
        tables->vnics[slot] = view;
        tables->qos[slot] = vnic.qos;
        tables->active_slots.push_back(slot);
        tables->vnic_of_port[view.port_id] = slot;
        overlay::vlt_entry entry{};
        entry.kind = overlay::vlt_kind::local_vnic;
        entry.vnic = slot;
        if (!tables->vlt->add(view.vpc, view.ip, entry) ||
            (view.has_ip6 && !tables->vlt->add6(view.vpc, view.ip6.data(), entry))) {
            error = "VLT rejected vNIC " + vnic.name;
            return nullptr;
        }
    }
    for (const auto& peer : config.peers) {
        overlay::vlt_entry entry{};
        if (!peer_vlt_entry(peer, neighbors, entry)) {
            error = "too many remote hosts";
            return nullptr;
        }
        const uint32_t vpc = vpc_index(config, peer.vpc);
        if (!tables->vlt->add(vpc, rte_cpu_to_be_32(peer.ip), entry) ||
            (peer.ip6 && !tables->vlt->add6(vpc, peer.ip6->data(), entry))) {
            error = "VLT rejected peer " + format_ipv4(peer.ip);
            return nullptr;
        }
    }
    if (!compile_policies(config, slots, *tables, error)) {
        return nullptr;
    }
    return tables;
}

}  // namespace jakiro
