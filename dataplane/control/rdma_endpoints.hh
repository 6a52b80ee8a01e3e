#pragma once
// The RNIC's verbs endpoints as the host configuration describes them: the YAML side of
// verbs::channel_config, kept here so the RNIC (rnic/verbs/) never sees the configuration.

#include <cstdint>
#include <vector>

#include "dataplane/config/host_config.hh"
#include "rnic/verbs/channel_server.hh"

namespace jakiro {

// A vNIC's YAML `rdma:` quota as vnic_resources takes it (at startup, and on `apply`).
verbs::vnic_quota quota_of(const rdma_config& rdma);
// The RDMA face of `vnic`, in the datapath slot host_manager gave it, its QPs run by the
// engine of `worker`, the vNIC's owner.
verbs::endpoint_config endpoint_of(const vnic_config& vnic, uint16_t slot, uint8_t worker = 0);
// The RDMA faces of a host configuration, by the datapath slots host_manager gave the vNICs.
std::vector<verbs::endpoint_config> endpoints_of(const host_config& config,
                                                 const std::vector<uint16_t>& slots);
verbs::channel_config make_channel_config(const host_config& config);  // slots 0..n-1

}  // namespace jakiro
