#pragma once
// Polling a CQ that stays empty gives the core away now and then. The "NIC" behind this shim
// is jakirod, a process on the same cores as the application: an application that spins on
// ibv_poll_cq (perftest, most RDMA code) would otherwise take the CPU time the device needs to
// produce the completions it waits for, and on a 2-core host it starves the other tenants.
// After `spins_before_yield` empty polls in a row each further empty poll calls sched_yield(),
// which returns at once when nothing else wants the core, so a lone poller loses ~1 µs of
// latency at worst. JAKIRO_POLL_YIELD=0 in the environment turns it off (a program alone on
// dedicated cores may prefer to spin). Not thread-safe: the caller holds the CQ's poll lock.

#include <sched.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace jakiro::shim {

class idle_yield {
  public:
    static constexpr uint32_t spins_before_yield = 64;

    void on_empty() {
        if (_empty < spins_before_yield) {
            ++_empty;
            return;
        }
        if (enabled()) {
            sched_yield();
        }
    }
    void on_progress() { _empty = 0; }

  private:
    static bool enabled() {
        static const bool on = [] {
            const char* v = std::getenv("JAKIRO_POLL_YIELD");
            return v == nullptr || std::strcmp(v, "0") != 0;
        }();
        return on;
    }

    uint32_t _empty = 0;
};

}  // namespace jakiro::shim
