#include "dataplane/control/worker_assignment.hh"

#include <array>

#include "dataplane/config/host_config.hh"

namespace jakiro {

uint8_t least_loaded_worker(std::span<const uint8_t> owners, unsigned workers) {
    std::array<unsigned, max_workers> load{};
    for (const uint8_t owner : owners) {
        if (owner < workers) {
            ++load[owner];
        }
    }
    uint8_t best = 0;
    for (unsigned w = 1; w < workers && w < max_workers; ++w) {
        if (load[w] < load[best]) {
            best = static_cast<uint8_t>(w);
        }
    }
    return best;
}

}  // namespace jakiro
