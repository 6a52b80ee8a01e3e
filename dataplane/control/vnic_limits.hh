#pragma once
// The bounds a vNIC gets in the datapath snapshot for what it shares with the other vNICs of
// its host (host_config.hh, vnic_limits): what its YAML `limits:` say, or else an equal share,
// so that with the defaults no vNIC can take what another needs however it behaves.
//
//   flows    the worker's flow table (host.conntrack.max_flows entries) among the vNICs that
//            worker owns: their shares add up to the table, so it never fills and no vNIC's
//            flows are ever evicted for another's (secgroup/flow_table.hh).
//   buffers  the super-frame pool (vnet_face/buffer_charges.hh) among the host's vNICs and one
//            more share for the host itself (the uplink's and the RDMA engines' super-frames),
//            but never fewer than a few buffers: a host with very many vNICs on vnet faces
//            is over-subscribed, each vNIC still bounded.
//   packets  frames per second its worker reads from it: a fixed default, not a share (what
//            a worker can do depends on the host; the worker serves its vNICs round robin).
//
// Plain arithmetic, control thread only.

#include <cstdint>

#include "dataplane/config/host_config.hh"

namespace jakiro {

// Fewest packet buffers a default share gives: a face needs a few to receive at all.
constexpr uint32_t min_default_packet_buffers = 8;

uint32_t flow_allowance(const vnic_limits& limits, uint32_t table_capacity,
                        uint32_t vnics_on_worker);
uint32_t packet_buffer_allowance(const vnic_limits& limits, uint32_t pool_buffers,
                                 uint32_t vnics_on_host);
uint32_t packet_rate_allowance(const vnic_limits& limits);

}  // namespace jakiro
