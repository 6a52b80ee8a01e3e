#include "table_builder.hh"

#include <rte_byteorder.h>

#include <cstring>

namespace jakiro {

namespace {
rte_ether_addr to_ether(const mac_address& mac) {
    rte_ether_addr out;
    std::memcpy(out.addr_bytes, mac.data(), RTE_ETHER_ADDR_LEN);
    return out;
}
}  // namespace

std::unique_ptr<datapath_tables> build_tables(const host_config& config,
                                              const port_assignment& ports,
                                              overlay::underlay_neighbors& neighbors,
                                              std::string& error) {
    if (config.vnics.size() > max_vnics) {
        error = "more than " + std::to_string(max_vnics) + " vNICs";
        return nullptr;
    }
    auto tables = std::make_unique<datapath_tables>();
    tables->uplink_port = ports.uplink_port;
    tables->underlay_ip = rte_cpu_to_be_32(config.underlay.ip);
    tables->underlay_mac = ports.uplink_mac;
    tables->gateway_mac = to_ether(config.gateway_mac);
    tables->tenant_mtu = config.tenant_mtu();
    tables->vnic_of_port.fill(no_vnic);

    tables->vpcs = vni_map::create(static_cast<uint32_t>(config.vpcs.size()), error);
    tables->vlt = overlay::vlt::create(
        static_cast<uint32_t>(config.vnics.size() + config.peers.size()), error);
    if (!tables->vpcs || !tables->vlt) {
        return nullptr;
    }
    auto vpc_index = [&](const std::string& name) {
        for (uint32_t i = 0; i < config.vpcs.size(); ++i) {
            if (config.vpcs[i].name == name) {
                return i;
            }
        }
        return no_vpc;
    };
    for (uint32_t i = 0; i < config.vpcs.size(); ++i) {
        tables->vni_of_vpc.push_back(config.vpcs[i].vni);
        tables->vpcs->add(config.vpcs[i].vni, i);
    }
    for (uint16_t slot = 0; slot < config.vnics.size(); ++slot) {
        const auto& vnic = config.vnics[slot];
        vnic_view view{};
        view.slot = slot;
        view.port_id = ports.vnic_ports[slot];
        view.vpc = vpc_index(vnic.vpc);
        view.ip = rte_cpu_to_be_32(vnic.ip.address);
        view.mac = to_ether(vnic.mac);
        tables->vnics.push_back(view);
        tables->vnic_of_port[view.port_id] = slot;
        overlay::vlt_entry entry{};
        entry.kind = overlay::vlt_kind::local_vnic;
        entry.vnic = slot;
        if (!tables->vlt->add(view.vpc, view.ip, entry)) {
            error = "VLT rejected vNIC " + vnic.name;
            return nullptr;
        }
    }
    for (const auto& peer : config.peers) {
        overlay::vlt_entry entry{};
        entry.kind = overlay::vlt_kind::remote_host;
        entry.host_ip = rte_cpu_to_be_32(peer.host);
        entry.neighbor = neighbors.slot_for(entry.host_ip);
        if (entry.neighbor == overlay::underlay_neighbors::none) {
            error = "too many remote hosts";
            return nullptr;
        }
        entry.has_inner_mac = peer.mac.has_value();
        if (peer.mac) {
            entry.inner_mac = to_ether(*peer.mac);
        }
        if (!tables->vlt->add(vpc_index(peer.vpc), rte_cpu_to_be_32(peer.ip), entry)) {
            error = "VLT rejected peer " + format_ipv4(peer.ip);
            return nullptr;
        }
    }
    return tables;
}

}  // namespace jakiro
