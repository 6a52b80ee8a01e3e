#pragma once
// The road from this host to a tenant on another host, one function for every frame that takes
// it: a tenant's frame leaving egress.cc and every frame the RNIC sends (roce_port: requests,
// ACKs, READ responses, CNPs). Both must leave with the same outer headers, the same ECMP
// entropy and the same drops, or a RoCE flow and a TCP flow to one peer would be tunnelled
// differently (and a fix made to one road would miss the other).
//
// Worker side: no allocation, no lock; the caller transmits (directly, or through its vNIC's
// DHTB class) and cuts super-frames itself.

#include <rte_ip.h>
#include <rte_mbuf.h>

#include <cstdint>

#include "dataplane/overlay/vlt.hh"
#include "dataplane/tables.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

// Turns `m`, an inner Ethernet frame from vNIC `vnic_slot` whose IPv4 packet is `inner_ip`
// (`inner_ip_len` bytes, its total length), into a VXLAN frame (RFC 7348) to the host of
// `remote`, a remote_host VLT entry:
// - inner destination MAC: the entry's own (a foreign VTEP's tenant) or the gateway MAC;
// - outer Ethernet to the remote host's underlay MAC, from this host's;
// - outer IPv4 with DSCP and ECN copied from the inner header (RFC 6040 normal mode), DF, TTL 64;
// - outer UDP to 4789 from a port hashed from the inner flow (RFC 7348 §5 entropy), checksum 0;
// - VXLAN with the I flag and the VPC's VNI.
// Counts one `encapsulated` frame unless `m` is a super-frame (RTE_MBUF_F_TX_TCP_SEG): that one
// is counted by the caller as the frames it cuts it into.
// False: `m` was dropped and counted, as `underlay_neighbor_unresolved` while the remote host's
// MAC is not known yet (ARP in flight), or `tenant_too_big` when the mbuf has no headroom.
bool encapsulate_to_remote_host(worker_context& ctx, const datapath_tables& tables,
                                uint16_t vnic_slot, const overlay::vlt_entry& remote, rte_mbuf* m,
                                const rte_ipv4_hdr* inner_ip, uint32_t inner_ip_len);

// The same for an inner IPv6 packet `inner_ip` (`inner_ip_len` bytes with its header): the outer
// header stays IPv4, DSCP and ECN come from the traffic class, the entropy from the IPv6 5-tuple.
bool encapsulate_to_remote_host(worker_context& ctx, const datapath_tables& tables,
                                uint16_t vnic_slot, const overlay::vlt_entry& remote, rte_mbuf* m,
                                const rte_ipv6_hdr* inner_ip, uint32_t inner_ip_len);

// The same, for the RNIC's frames, whose IPv6 header is bytes.
bool encapsulate_to_remote_host6(worker_context& ctx, const datapath_tables& tables,
                                 uint16_t vnic_slot, const overlay::vlt_entry& remote, rte_mbuf* m,
                                 const uint8_t* inner_ip6, uint32_t inner_ip_len);

}  // namespace jakiro
