#pragma once
// Per-lcore packet counters. Each worker owns one `lcore_counters` and is its only writer; the
// control thread sums them when asked (stats/counter.hh: no lock or locked instruction on the
// hot path, reads that never tear).

#include <rte_common.h>

#include <array>
#include <cstdint>

#include "dataplane/drops.hh"
#include "stats/counter.hh"

namespace jakiro {

constexpr uint16_t max_vnics = 256;       // vNIC slots per host
constexpr uint32_t max_rules = 1u << 16;  // security-group rules per host (hit counters)
// The rule id that stands for "egress allowed" on a vNIC that carries no group.
constexpr uint32_t implicit_egress_rule = max_rules - 1;

using stats::counter;

struct vnic_counters {
    counter from_tenant_packets;
    counter from_tenant_bytes;
    counter to_tenant_packets;
    counter to_tenant_bytes;
    // The RDMA face: RoCEv2 frames the engine sent for this vNIC, and received for it.
    counter rdma_tx_packets;
    counter rdma_tx_bytes;
    counter rdma_rx_packets;
    counter rdma_rx_bytes;
    counter drops;
    // Security groups, by secgroup::direction: packets let through and refused.
    counter sg_allowed[2];
    counter sg_denied[2];
    // Refused at the vNIC's own bounds (limits:), counted in `drops` too: new flows beyond its
    // flow-table allowance, and tenant frames beyond its packet-buffer allowance.
    counter conntrack_allowance_exceeded;
    counter buffer_allowance_exceeded;
    counter packet_rate_exceeded;  // times it ran out of its packet-rate allowance, frames waiting
    // The sealed overlay: frames the uplink's worker sealed for it, and their plaintext bytes
    // (VXLAN header and inner frame), each an AES-GCM pass (overlay/sealing/uplink_sealing.hh).
    counter sealed_frames;
    counter sealed_bytes;
};

struct alignas(RTE_CACHE_LINE_SIZE) lcore_counters {
    std::array<counter, drop_reason_count> drops;
    std::array<vnic_counters, max_vnics> vnics;
    counter encapsulated;
    counter decapsulated;
    counter switched_locally;
    counter rdma_local_messages;  // RDMA messages moved memory to memory between local vNICs
    counter arp_replies_to_tenants;
    counter nd_replies_to_tenants;  // neighbour advertisements for the VPC's IPv6 addresses
    counter nd_replies_in_overlay;  // the same to foreign VTEPs' solicitations in the tunnel
    counter arp_replies_on_underlay;
    counter arp_replies_in_overlay;
    counter arp_requests_sent;
    counter ce_marked_on_decap;
    counter qos_ce_marked;                     // DHTB ingress: marked CE above a vNIC's tcp share
    counter flow_misses;                       // packets that needed a full classification
    std::array<counter, max_rules> rule_hits;  // packets allowed, by rule id
    counter busy_polls;
    counter idle_sleeps;
    counter throttled_sleeps;  // naps while only shaped frames waited for tokens
    counter rx_wakes;  // naps cut short by a frame (rx_waker's thread writes it, where it is used)
    counter doorbell_wakes;  // naps in which a doorbell rang: a tenant's post, jakirod's own call
    // Waiting for a stream's next packet (poll_loop/lcore_loop.cc): yields that kept the core away
    // too long, and the short naps taken instead of yields for a while after one.
    counter slow_yields;
    counter waiting_naps;
    // With several workers (worker/handoff.hh): frames this worker passed to the owner of their
    // vNIC or port, by kind, and frames it took from the others.
    counter handed_fabric;   // from the uplink, for another worker's vNIC
    counter handed_port;     // to transmit on a port another worker owns
    counter handed_roce;     // RoCE from this worker's engine to another's, on this host
    counter taken_handoffs;  // any kind, received from another worker
};

}  // namespace jakiro
