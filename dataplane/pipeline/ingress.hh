#pragma once
// Ingress: frames from the underlay. Underlay ARP is answered and learnt; VXLAN is validated
// (outer headers, VNI, inner addresses), decapsulated and delivered to the local vNIC.

#include <rte_mbuf.h>

#include "dataplane/tables.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

void process_uplink_burst(worker_context& ctx, const datapath_tables& tables, rte_mbuf** pkts,
                          uint16_t count);

}  // namespace jakiro
