#pragma once
// How the worker waits for a stream's next packet in the short window after the last one:
// by yielding the core, or by napping.
//
// Yielding is the cheap way while whoever takes the core gives it back soon: mostly a tenant
// making the stream's next packet, which returns it within microseconds. A thread that
// yielded is merely runnable, though, and preempts nobody: a thread that spins (a tenant's
// busy loop, SCHED_IDLE or not) keeps the core until the scheduler's next tick, 4 ms at
// HZ=250, and every such yield adds that to a neighbour's ping. A thread that naps instead
// *wakes*, and a waking thread preempts a SCHED_IDLE one at once and a fair one as soon as it
// is owed the core. So one yield that kept the core away longer than `slow_yield` switches the
// waits to naps for `napping_period`; then a yield is tried again.
//
// Thread-safety: none; one per worker. Times are TSC cycles, passed in (tests choose them).

#include <cstdint>

namespace jakiro {

class packet_wait {
  public:
    static constexpr uint64_t slow_yield_us = 250;
    static constexpr uint64_t napping_period_ms = 1000;

    explicit packet_wait(uint64_t tsc_hz)
        : _slow_yield(tsc_hz * slow_yield_us / 1'000'000),
          _napping_period(tsc_hz * napping_period_ms / 1000) {}

    // Whether the wait that starts at `now` should be a nap rather than a yield.
    bool nap_now(uint64_t now) const { return now < _nap_until; }

    // A yield from `began` to `ended`. True when it was slow (the waits turn to naps).
    bool yielded(uint64_t began, uint64_t ended) {
        if (ended - began <= _slow_yield) {
            return false;
        }
        _nap_until = ended + _napping_period;
        return true;
    }

  private:
    uint64_t _slow_yield;
    uint64_t _napping_period;
    uint64_t _nap_until = 0;
};

}  // namespace jakiro
