#pragma once
// The security-group check an RC connection passes when its QP moves to RTR (DESIGN.md §7):
// the peer must be an address of the vNIC's VPC, and the vNIC's `rdma` rules (UDP 4791) must
// let traffic go to it (egress) and come from it (ingress). Afterwards the engine checks each
// packet against the connected QP (RCFT) instead of the NFT.

#include <cstdint>

#include "../tables.hh"

namespace jakiro {

// 0, ENETUNREACH (the peer is not in the VPC) or EACCES (a security group forbids it).
int admit_rdma_peer(const datapath_tables& tables, uint16_t vnic_slot, uint32_t remote_ip_be);

}  // namespace jakiro
