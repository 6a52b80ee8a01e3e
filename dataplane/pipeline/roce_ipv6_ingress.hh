#pragma once
// RoCE v2 over IPv6 from the fabric (docs/roce-wire.md): an inner IPv6 packet to UDP 4791 for a
// vNIC of this host goes to the RoCE engine, as the IPv4 ones do in pipeline/ingress.cc: the
// destination must be a vNIC of this host in the frame's VPC, the source an address that lives
// on the host that sent the frame; the outer CE carries in (RFC 6040); the engine checks the
// rest (lengths, ICRC, RCFT or the security groups). Worker side, per packet: two VLT look-ups.

#include <rte_mbuf.h>

#include <cstdint>

#include "dataplane/overlay/vxlan.hh"
#include "dataplane/tables.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

// `m` carries, at outer.inner_offset, an inner Ethernet frame of type IPv6 in VPC `vpc`. True
// when it was RoCE v2 and is taken (handed to the engine, or dropped and counted); false when
// it is not RoCE v2 (or there is no engine), for the caller to go on with.
bool take_roce_ipv6(worker_context& ctx, const datapath_tables& tables, uint32_t vpc,
                    const overlay::outer_view& outer, rte_mbuf* m);

}  // namespace jakiro
