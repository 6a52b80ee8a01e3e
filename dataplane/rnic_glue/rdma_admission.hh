#pragma once
// The security-group check an RC connection passes when its QP moves to RTR (docs/architecture.md
// §7): the peer must be an address of the vNIC's VPC, and the vNIC's `rdma` rules (UDP 4791) must
// let traffic go to it (egress) and come from it (ingress). Afterwards the engine checks each
// packet against the connected QP (RCFT) instead of the NFT. A QP connected to another QP of
// its own vNIC (loopback, as on any RNIC port) passes: its packets never leave the vNIC.

#include <array>
#include <cstdint>

#include "dataplane/tables.hh"
#include "secgroup/rule.hh"

namespace jakiro {

// 0, ENETUNREACH (the peer is not in the VPC) or EACCES (a security group forbids it).
int admit_rdma_peer(const datapath_tables& tables, uint16_t vnic_slot, uint32_t remote_ip_be);

// The same for an IPv6 peer (RoCE v2 over IPv6): the peer must be an IPv6 address of the VPC,
// and the `rdma` rules are matched on that address (rules with an IPv6 CIDR, and groups by their
// members' IPv6 addresses), on their own: what a rule says of the peer's IPv4 address does not
// matter here, as an IPv6 rule says nothing of an IPv4 peer.
int admit_rdma_peer_ipv6(const datapath_tables& tables, uint16_t vnic_slot,
                         const std::array<uint8_t, 16>& remote);
bool admit_rdma_datagram_ipv6(const datapath_tables& tables, uint16_t vnic_slot,
                              const std::array<uint8_t, 16>& remote, secgroup::direction dir);

// UD has no connection to admit once, so every datagram is checked (on the worker, per
// packet): the vNIC's `rdma` rules of direction `dir` must allow `remote_ip_be`. That the
// address is in the vNIC's VPC the path itself enforces, once: egress frames go through the
// VLT (vlt_miss), ingress ones arrived on the VPC's VNI from a source that lives there.
bool admit_rdma_datagram(const datapath_tables& tables, uint16_t vnic_slot, uint32_t remote_ip_be,
                         secgroup::direction dir);

}  // namespace jakiro
