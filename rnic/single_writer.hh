#pragma once
// Counters one thread writes (the engine's, per QP and per engine) and any thread reads: the
// writer adds with a relaxed load and store, not a locked read-modify-write. Readers see every
// value whole, as with fetch_add; only a second writer could lose an add, and there is none.

#include <atomic>
#include <cstdint>

namespace jakiro::rnic {

inline void bump(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace jakiro::rnic
