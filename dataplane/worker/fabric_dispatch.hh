#pragma once
// Which worker must handle a frame from the uplink: the owner of the local vNIC it is
// addressed to (control/worker_assignment.hh), found from its headers alone: outer checks,
// VNI to VPC, inner destination to the VLT. Nothing is judged here; the owner runs the whole
// ingress pipeline, RoCEv2 included (its engine runs the vNIC's QPs). The uplink's own worker
// keeps what is not one vNIC's: underlay ARP, and anything malformed or unknown, which its
// pipeline then drops and counts as it would with a single worker.

#include <rte_mbuf.h>

#include "dataplane/tables.hh"

namespace jakiro {

uint8_t fabric_frame_owner(const datapath_tables& tables, const rte_mbuf* m, uint8_t uplink_worker);

}  // namespace jakiro
