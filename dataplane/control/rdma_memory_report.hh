#pragma once
// What each vNIC's RDMA objects hold of the host, and what was refused it (rnic/verbs/resources.hh
// memory_report), read into the stats snapshot for the metric table. Control thread.

#include <cstdint>
#include <optional>

#include "dataplane/control/daemon_state.hh"
#include "rnic/verbs/resources.hh"

namespace jakiro {

// The vNIC in `slot`'s report, if it has an RDMA face.
std::optional<verbs::memory_report> rdma_memory_of(const daemon_state& state, uint16_t slot);

}  // namespace jakiro
