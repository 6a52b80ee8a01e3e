#pragma once
// The one statistics counter of the tree: a single writer (the worker, engine or face that owns
// it) adds with a relaxed load and store, not a locked read-modify-write, and any thread (the
// control thread answering `jakiroctl stats`, `/metrics`, a restart's image) reads it whole. Only
// a second writer could lose an add, and an owner never shares its counters for writing.

#include <atomic>
#include <cstdint>

namespace jakiro::stats {

class counter {
  public:
    void add(uint64_t n = 1) { _value.store(read() + n, std::memory_order_relaxed); }
    // Takes back what was counted too early (a frame counted as queued, then dropped); never
    // below zero, so a reader never sees a wrapped 2^64.
    void sub(uint64_t n) {
        const uint64_t now = read();
        _value.store(now - (n < now ? n : now), std::memory_order_relaxed);
    }
    uint64_t read() const { return _value.load(std::memory_order_relaxed); }
    void reset() { restore(0); }
    // The value a predecessor counted, carried over a restart.
    void restore(uint64_t value) { _value.store(value, std::memory_order_relaxed); }

  private:
    std::atomic<uint64_t> _value{0};
};

}  // namespace jakiro::stats
