#include "verbs_shim/idle_backoff.hh"

#include <cstdlib>
#include <cstring>

namespace jakiro::verbs_shim {

namespace {

bool naps_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("JAKIRO_POLL_YIELD");
        return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    return on;
}

}  // namespace

void nap_on_idle_cq(verbs_proto::cq_ring_header& ring, uint32_t seen) {
    if (naps_enabled()) {
        const timespec nap{0, idle_backoff::nap_ns};
        verbs_proto::nap_until_completion(ring, seen, nap);
    }
}

}  // namespace jakiro::verbs_shim
