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

// Returns nullptr and sets `error` when DPDK cannot allocate a table or the VLT is full.
// Registers every remote host in `neighbors` so the worker starts resolving it.
std::unique_ptr<datapath_tables> build_tables(const host_config& config,
                                              const port_assignment& ports,
                                              overlay::underlay_neighbors& neighbors,
                                              uint32_t policy_generation, std::string& error);

}  // namespace jakiro
