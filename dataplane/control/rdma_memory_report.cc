#include "dataplane/control/rdma_memory_report.hh"

#include "rnic/verbs/channel_server.hh"

namespace jakiro {

std::optional<verbs::memory_report> rdma_memory_of(const daemon_state& state, uint16_t slot) {
    if (state.verbs == nullptr || !state.verbs->serves(slot)) {
        return std::nullopt;
    }
    return state.verbs->resources(slot).memory();
}

}  // namespace jakiro
