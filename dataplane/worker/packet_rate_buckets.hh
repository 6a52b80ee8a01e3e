#pragma once
// Each vNIC's allowance of frames per second that the worker reads from its port (YAML
// vnics[].limits.max_packet_rate), as AWS ENA's per-interface pps allowance. A frame costs the
// worker its read, classification, flow lookup, encapsulation and send, and the far host as
// much again, whatever its size; a vNIC that sends small frames as fast as its kernel can
// would otherwise take the worker's time from every other vNIC it serves. What the worker does
// beyond the allowance is lcore_loop's: a vnet face goes unread (out of the epoll set and the
// wake-up watch) until release_frames have refilled, so that its frames cost the worker
// nothing and the kernel drops what the socket cannot hold in the sender's time; reading
// frames only to drop them cost the worker 70 % of a core at 250 000 a second here.
//
// A token bucket per vNIC slot that refills at the rate and holds `burst_ns` of it, at least
// one pass's reads (poll_loop/lcore_loop.cc). A GSO super-frame counts once: a TCP stream of
// 64 KB super-frames at 10 Gbit/s is ~20 000 frames a second.
//
// Thread-safety: none; one per worker (per-lcore state). Times are passed in.

#include <array>
#include <cstdint>

#include "dataplane/counters.hh"

namespace jakiro {

class packet_rate_buckets {
  public:
    // A slot's bucket as it is, for a restarted jakirod to continue (docs/restart.md).
    struct carried {
        uint32_t per_s = 0;  // the allowance it was filling at; 0: the slot has no bucket
        int64_t units = 0;
        uint64_t at_ns = 0;  // CLOCK_MONOTONIC, as every now_ns passed in
    };

    static constexpr uint64_t burst_ns = 10'000'000;
    static constexpr uint32_t min_burst = 128;
    // A face held over its rate is read again once `release_ns` of its allowance has refilled
    // (at least min_burst frames, at most the burst); the socket holds what waits meanwhile.
    // Released at every 32 frames instead, a vNIC flooding at its 100 000 frames a second would
    // have the worker wake 2 600 times a second for them: 0.55 of a core here, 0.21 with 2 ms.
    static constexpr uint64_t release_ns = 2'000'000;
    static uint32_t release_frames(uint32_t per_s);

    // Frames vNIC `slot` may read at `now_ns` under an allowance of `per_s` frames a second.
    // A changed allowance (`apply`, or a new vNIC in the slot) starts with a full bucket.
    uint32_t available(uint16_t slot, uint32_t per_s, uint64_t now_ns);
    // Charges `frames` read for `slot` (at most what available() said).
    void charge(uint16_t slot, uint32_t frames);

    carried state(uint16_t slot) const;
    // Continues `c` in `slot`, clipped to its burst; the time since `c.at_ns` (at most up to
    // `now_ns`) is credited by the next available(). If the allowance has changed meanwhile,
    // available() starts the bucket full, as for any changed allowance.
    void resume(uint16_t slot, const carried& c, uint64_t now_ns);

  private:
    static constexpr int64_t units_per_frame = 1'000'000'000;  // a frame·s in frame·ns
    struct bucket {
        int64_t units = 0;  // frames × units_per_frame
        int64_t burst_units = 0;
        uint32_t per_s = 0;
        uint64_t last_ns = 0;
    };
    std::array<bucket, max_vnics> _buckets{};
};

}  // namespace jakiro
