#pragma once
// The immutable snapshot of forwarding state that workers read: vNICs, VPCs and the VLT.
// Built by the control thread (control/table_builder.cc), or patched from the one in force
// when only peers changed (control/table_patcher.cc), and published by pointer swap
// (tables_publisher.hh); never modified while published. A patched snapshot shares what did
// not change (the VNI map, the ACLs of vNICs whose groups name no changed peer's group) with
// the one before: those parts are shared_ptrs, read-only to every holder.

#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_hash.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dataplane/overlay/vlt.hh"
#include "dataplane/vnet_face/face_registry.hh"
#include "qos/config.hh"
#include "secgroup/compiler.hh"
#include "secgroup/ipv6_rules.hh"

namespace jakiro {

constexpr uint16_t no_vnic = UINT16_MAX;
constexpr uint32_t no_vpc = UINT32_MAX;

struct vnic_view {
    uint16_t slot;  // index in the counters; stable while the vNIC exists
    uint16_t port_id;
    uint32_t vpc;  // index into datapath_tables::vni_of_vpc
    rte_be32_t ip;
    rte_ether_addr mac;
    // A dual-stack vNIC's IPv6 address (network order); has_ip6 false: IPv4 only.
    bool has_ip6 = false;
    std::array<uint8_t, 16> ip6{};
    uint8_t worker = 0;  // the worker that owns it (control/worker_assignment.hh)
    // Its bounds in what it shares with the other vNICs of its worker (control/vnic_limits.hh):
    // entries of the worker's flow table, and packet buffers it may hold at once.
    uint32_t max_flows = 0;
    uint32_t max_packet_buffers = 0;
    // Frames per second its worker reads from its port (limits.max_packet_rate).
    uint32_t max_packet_rate = 0;
    // WRs per second its RDMA engine does without a packet (rdma.max_local_work_rate).
    uint32_t rdma_local_work_rate = 0;
};

// VNI -> VPC index, an rte_hash because VNIs are sparse 24-bit numbers.
class vni_map {
  public:
    static std::unique_ptr<vni_map> create(uint32_t capacity, std::string& error);
    ~vni_map();
    vni_map(const vni_map&) = delete;
    vni_map& operator=(const vni_map&) = delete;
    bool add(uint32_t vni, uint32_t vpc);
    uint32_t find(uint32_t vni) const;  // no_vpc when unknown

  private:
    explicit vni_map(rte_hash* hash) : _hash(hash) {}
    rte_hash* _hash;
};

struct datapath_tables {
    // Which publication this is (tables_publisher): a worker that slept through several tells
    // snapshots apart by it, not by their address, which a later one may reuse.
    uint64_t publication = 0;
    uint16_t uplink_port = 0;
    rte_be32_t underlay_ip = 0;
    rte_ether_addr underlay_mac{};
    rte_ether_addr gateway_mac{};  // the MAC jakirod answers ARP with, towards tenants
    uint32_t tenant_mtu = 1450;    // largest inner IPv4 packet carried
    // Frames to the uplink may be sealed (overlay.encryption, overlay/sealing/): each wire
    // frame is sealed on its own, so the pipelines send the uplink frames, never super-frames
    // or GSO datagrams; the tx batch joins them into datagrams once they are sealed.
    bool uplink_sealed = false;

    std::vector<vnic_view> vnics;        // indexed by vNIC slot; slots of removed vNICs are holes
    std::vector<uint16_t> active_slots;  // the slots in use, in config order
    std::array<uint16_t, vnet_face::port_id_space> vnic_of_port{};  // no_vnic: uplink/unused
    std::vector<uint32_t> vni_of_vpc;
    std::shared_ptr<const vni_map> vpcs;
    std::shared_ptr<overlay::vlt> vlt;

    // Security groups compiled per vNIC slot and direction (index: secgroup::direction).
    struct vnic_policy {
        std::shared_ptr<const secgroup::acl_table> acl[2];
        std::shared_ptr<const secgroup::ipv6_rules> acl6[2];  // the same groups, for IPv6 flows
    };
    std::vector<vnic_policy> policies;  // indexed by vNIC slot
    // Bumped by every policy change; flows checked under an older one are checked again.
    uint32_t policy_generation = 1;
    // DHTB egress shaping (docs/architecture.md §6), by vNIC slot: none = not shaped. Workers apply
    // a new snapshot's values to their scheduler when they first see it.
    std::vector<std::optional<qos::vnic_qos>> qos;
    std::optional<qos::uplink_qos> uplink_qos;
};

}  // namespace jakiro
