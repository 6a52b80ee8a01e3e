#pragma once
// Monotonic nanoseconds for the RoCE engine's timers (vDSO, no system call).

#include <time.h>

#include <cstdint>

namespace jakiro {

inline uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace jakiro
