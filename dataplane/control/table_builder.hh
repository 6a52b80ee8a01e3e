#pragma once
// Turns a validated host_config into the datapath snapshot workers read: vNICs, VPCs, the VLT
// and every vNIC's security groups compiled to rte_acl.

#include <memory>
#include <string>
#include <vector>

#include "dataplane/config/host_config.hh"
#include "dataplane/counters.hh"
#include "dataplane/overlay/underlay_neighbors.hh"
#include "dataplane/tables.hh"
#include "secgroup/compiler.hh"

namespace jakiro {

struct port_assignment {
    uint16_t uplink_port = 0;
    rte_ether_addr uplink_mac{};
    std::vector<uint16_t> vnic_ports;   // same order as host_config::vnics
    std::vector<uint16_t> vnic_slots;   // same order; empty means slot = position
    std::vector<uint8_t> vnic_workers;  // same order; empty means worker 0 for all
};

// Addresses of the members of every group: local vNICs and peers that carry it.
secgroup::membership group_members(const host_config& config);
// The IPv6 addresses of the same members, for the groups' IPv6 side (members without one are
// not in it).
secgroup::membership6 group_members6(const host_config& config);

// The index of VPC `name` in config.vpcs (and so in the snapshot), or no_vpc.
uint32_t vpc_index(const host_config& config, const std::string& name);

// The VLT entry of a peer, its host registered in `neighbors` (false: no neighbour slot left).
bool peer_vlt_entry(const peer_config& peer, overlay::underlay_neighbors& neighbors,
                    overlay::vlt_entry& entry);

// Room a built VLT keeps beyond its entries, so that peers added later are patched in rather
// than the table built again: a quarter more, and a few for a small table. When it runs out the
// next change builds the table whole, with room again: no bound is fixed.
constexpr uint32_t vlt_room(uint32_t entries) {
    return entries + entries / 4 + 64;
}

// Compiles vNIC `index` of `config`'s groups, both directions, into `policy` with the members
// given (group_members and group_members6 of the configuration).
bool compile_vnic_policy(const host_config& config, std::size_t index,
                         const secgroup::membership& members, const secgroup::membership6& members6,
                         const secgroup::rule_catalog& catalog,
                         datapath_tables::vnic_policy& policy, std::string& error);

// Returns nullptr and sets `error` when DPDK cannot allocate a table or the VLT is full.
// Registers every remote host in `neighbors` so the worker starts resolving it.
std::unique_ptr<datapath_tables> build_tables(const host_config& config,
                                              const port_assignment& ports,
                                              overlay::underlay_neighbors& neighbors,
                                              uint32_t policy_generation, std::string& error);

}  // namespace jakiro
