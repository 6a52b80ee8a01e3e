#pragma once
// Frames a vNIC on this host sent to a vNIC another worker owns (worker/handoff.hh). The
// sender's worker ran the sender's half (its egress security groups, its shaper); the
// receiver's worker runs the receiver's half here, as for a frame from the fabric: its
// ingress security groups against its own flow table (where its own replies are tracked), its
// ingress meter, then delivery on its port. `m->port` of each frame names the port.

#include <rte_mbuf.h>

#include "dataplane/tables.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

void process_local_arrivals(worker_context& ctx, const datapath_tables& tables, rte_mbuf** pkts,
                            uint16_t count);

}  // namespace jakiro
