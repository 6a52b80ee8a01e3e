#pragma once
// What each vNIC's RDMA objects hold of the host, and what was refused it, for `jakiroctl stats
// --json`, `jakiroctl qps --json` and /metrics (rnic/verbs/resources.hh memory_report, the host
// reserve of rnic/queues/host_reserve.hh). Control thread.

#include <cstdint>
#include <optional>

#include "dataplane/control/daemon_state.hh"
#include "dataplane/control/json_writer.hh"
#include "dataplane/control/stats_snapshot.hh"
#include "rnic/verbs/resources.hh"

namespace jakiro {

// The vNIC in `slot`'s report, if it has an RDMA face.
std::optional<verbs::memory_report> rdma_memory_of(const daemon_state& state, uint16_t slot);
// "rdma_memory": {...} inside the vNIC's object (nothing without an RDMA face).
void write_rdma_memory(json_writer& out, const std::optional<verbs::memory_report>& m);
// "rdma_reserve": the host's capacity for every vNIC's objects, their demand and what they hold
// (nothing without RDMA faces).
void write_rdma_reserve(json_writer& out, const std::optional<verbs_snapshot>& rdma);

}  // namespace jakiro
