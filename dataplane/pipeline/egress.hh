#pragma once
// Egress: frames a tenant sent on its vNIC's Ethernet face. ARP is answered (virtual gateway),
// IPv4 is checked against the vNIC's identity, looked up in the VLT, then switched to a local
// vNIC or VXLAN-encapsulated towards the remote host.

#include <rte_mbuf.h>

#include "dataplane/tables.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

void process_tenant_burst(worker_context& ctx, const datapath_tables& tables, uint16_t vnic_slot,
                          rte_mbuf** pkts, uint16_t count);

}  // namespace jakiro
