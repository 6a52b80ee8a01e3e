#pragma once
// A statistics counter with one writer (the worker that owns it) whose reads from other threads
// (the control thread answering `jakiroctl top`) never tear: single-writer relaxed atomics, no
// locked instruction on the hot path. The same shape as dataplane/counters.hh, without DPDK.

#include <cstdint>

namespace jakiro::qos {

class counter {
  public:
    void add(uint64_t n) { __atomic_store_n(&_value, _value + n, __ATOMIC_RELAXED); }
    void sub(uint64_t n) {
        __atomic_store_n(&_value, _value - (n < _value ? n : _value), __ATOMIC_RELAXED);
    }
    uint64_t read() const { return __atomic_load_n(&_value, __ATOMIC_RELAXED); }
    void reset() { __atomic_store_n(&_value, uint64_t{0}, __ATOMIC_RELAXED); }

  private:
    uint64_t _value = 0;
};

}  // namespace jakiro::qos
