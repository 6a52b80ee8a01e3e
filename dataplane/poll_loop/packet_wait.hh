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
// waits to naps for a period; then a yield is tried again. Those naps last the rest of the
// window wherever an arrival ends them (nap_us).
//
// Napping costs a wake-up per message, though (an RDMA ping-pong on one host: about 25 µs one
// way against 10 µs yielding), and most slow yields are passing: a program starting, a
// compiler's burst. So the first period is short, and it doubles, up to `max_napping_period`,
// only while every yield tried after a period is slow again soon (a neighbour that keeps
// spinning ends up costing one slow yield a second, as with a fixed period of a second); a
// slow yield after as long a calm as the last period starts from the short one again.
//
// Thread-safety: none; one per worker. Times are TSC cycles, passed in (tests choose them).

#include <algorithm>
#include <cstdint>

namespace jakiro {

class packet_wait {
  public:
    static constexpr uint64_t slow_yield_us = 250;
    // Four scheduler ticks at HZ=250: long enough that a spinner met again right after it
    // costs a neighbour's ping at most one tick in five while the period grows.
    static constexpr uint64_t first_napping_period_ms = 16;
    static constexpr uint64_t max_napping_period_ms = 1024;

    explicit packet_wait(uint64_t tsc_hz)
        : _tsc_hz(tsc_hz),
          _slow_yield(tsc_hz * slow_yield_us / 1'000'000),
          _first_period(tsc_hz * first_napping_period_ms / 1000),
          _max_period(tsc_hz * max_napping_period_ms / 1000) {}

    // Whether the wait that starts at `now` should be a nap rather than a yield.
    bool nap_now(uint64_t now) const { return now < _nap_until; }

    // A yield from `began` to `ended`. True when it was slow (the waits turn to naps).
    bool yielded(uint64_t began, uint64_t ended) {
        if (ended - began <= _slow_yield) {
            return false;
        }
        const bool again_soon = _period != 0 && ended < _nap_until + _period;
        _period = again_soon ? std::min(_period * 2, _max_period) : _first_period;
        _nap_until = ended + _period;
        return true;
    }

    // How long a nap in the window that ends at `window_end` lasts, in µs, at least `shortest`.
    // Where a frame, a doorbell and a hand-off each end the nap (`arrivals_end_it`), the rest of
    // the window: a timer that ended it early would wake the worker to find nothing, and each
    // such wake-up costs the core the message's other parties are waiting for (with 10 µs naps,
    // two to five per RDMA round trip on each host across hosts). Otherwise `shortest`, so that
    // the worker looks again soon.
    uint64_t nap_us(uint64_t now, uint64_t window_end, bool arrivals_end_it,
                    uint64_t shortest) const {
        if (!arrivals_end_it || now >= window_end) {
            return shortest;
        }
        return std::max(shortest, (window_end - now) * 1'000'000 / _tsc_hz);
    }

    // How long the current (or last) napping period is, in cycles; 0 before the first.
    uint64_t napping_period() const { return _period; }

  private:
    uint64_t _tsc_hz;
    uint64_t _slow_yield;
    uint64_t _first_period;
    uint64_t _max_period;
    uint64_t _period = 0;
    uint64_t _nap_until = 0;
};

}  // namespace jakiro
