#pragma once
// What an empty CQ poll does next. The "NIC" behind this shim is jakirod, a process on the same
// cores as the application: an application that spins on ibv_poll_cq (perftest, most RDMA
// code) takes the CPU time the device needs to produce the completions it waits for, and
// sched_yield() does not give it back (the scheduler's own work became a quarter of all
// samples). So after `spins` empty polls in a row each further empty poll naps `nap_ns` (the
// kernel's timer slack adds ~50 µs); a completion starts the spins over. A nap ends early when
// jakirod writes a completion into the CQ (verbs_proto::nap_until_completion): a program that
// polls hears of its completion as soon as one waiting on the CQ's completion channel would,
// instead of up to a whole nap (and its timer slack) later.
//
// Measured on a 2-core host across two jakirods (ib_write_bw 64 KiB, ib_send_lat 64 B, MTU
// 9000, vnet uplink): spinning gave 0.82-1.04 GB/s and 380-432 µs typical latency, yielding
// 0.84-1.04 GB/s and 324-377 µs (after a 300 µs yield window), napping 1.54-1.92 GB/s and
// 68-126 µs. A program alone on dedicated cores may prefer to spin: JAKIRO_POLL_YIELD=0 in the
// environment turns the naps off. Not thread-safe: the caller holds the CQ's poll lock.

#include <cstdint>

#include "verbs_abi/rings.hh"

namespace jakiro::verbs_shim {

class idle_backoff {
  public:
    static constexpr uint32_t spins = 64;
    static constexpr long nap_ns = 50'000;

    // Another empty poll: whether to nap before returning.
    bool nap_after_empty_poll() {
        if (_empty < spins) {
            ++_empty;
            return false;
        }
        return true;
    }
    void on_progress() { _empty = 0; }

  private:
    uint32_t _empty = 0;
};

// The nap itself (none with JAKIRO_POLL_YIELD=0), taken without the CQ's poll lock: up to
// `nap_ns`, over as soon as `ring`'s producer moves from `seen` (the one the empty poll read).
void nap_on_idle_cq(verbs_proto::cq_ring_header& ring, uint32_t seen);

}  // namespace jakiro::verbs_shim
