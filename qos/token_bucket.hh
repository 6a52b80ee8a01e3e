#pragma once
// A byte token bucket on an explicit clock: the caller passes the time in nanoseconds (TSC-derived
// in jakirod, simulated in tests); the bucket never reads a clock, so it is deterministic.
//
// Arithmetic is exact integer. One byte is `units_per_byte` = 8·10^9 token units, so a bucket
// filling at R bit/s gains exactly R units per nanosecond: a refill is one multiplication, with no
// division and no rounding. After T ns a bucket has gained R·T/(8·10^9) bytes to the unit, however
// the refills were spaced, so it cannot drift over long runs (a bucket that keeps per-refill
// remainders in whole bytes loses up to a byte per refill; at 1 µs polls that is 1 MB/s).
// Rates up to 2 Tbit/s and bursts up to 256 MiB (config.hh) keep every value within 2^62 units.
//
// Debt: `consume` may take the bucket below zero (a packet may start whenever tokens are
// positive, and is charged in full afterwards), down to the maximum debt: one burst unless
// `set_max_debt` says otherwise.
//
// Thread-safety: none; a bucket belongs to one thread (a worker lcore).

#include <algorithm>
#include <cstdint>
#include <limits>

namespace jakiro::qos {

constexpr int64_t units_per_byte = 8'000'000'000;

// What a bucket holds at a moment: enough for another bucket (a restarted jakirod's,
// docs/restart.md) to continue it rather than start full. `at_ns` is on the caller's clock;
// jakirod's is CLOCK_MONOTONIC, which every process of the host shares.
struct token_bucket_state {
    int64_t units = 0;  // tokens (negative: debt) in token units
    uint64_t at_ns = 0;
};

class token_bucket {
  public:
    // Rate 0 and burst 0: holds no tokens and never refills.
    token_bucket() = default;
    // Starts full (`burst_bytes` tokens) at `now_ns`.
    token_bucket(uint64_t rate_bps, uint64_t burst_bytes, uint64_t now_ns);

    // Brings the bucket to `now_ns`. A time at or before the last refill changes nothing.
    void refill(uint64_t now_ns) {
        if (now_ns <= _last_ns) {
            return;
        }
        const uint64_t dt = now_ns - _last_ns;
        _last_ns = now_ns;
        if (_units >= _burst_units) {
            return;
        }
        if (dt >= _fill_ns) {
            _units = _burst_units;
            return;
        }
        // dt < _fill_ns, so rate·dt < burst + max debt + rate: no overflow.
        _units = std::min(_units + static_cast<int64_t>(_rate_bps * dt), _burst_units);
    }

    // Charges `bytes`; the bucket may go into debt, at most the maximum debt deep.
    void consume(uint64_t bytes) { _units = std::max(_units - to_units(bytes), -_debt_units); }
    // Whether charging `bytes` now would leave the bucket no deeper than `debt_bytes` in debt.
    bool fits(uint64_t bytes, uint64_t debt_bytes) const {
        return _units - to_units(bytes) >= -to_units(debt_bytes);
    }
    // Gives back bytes charged earlier that did not leave after all; never above the burst.
    void refund(uint64_t bytes) { _units = std::min(_units + to_units(bytes), _burst_units); }
    // Fills the bucket to its burst and moves its clock to `now_ns`.
    void fill(uint64_t now_ns) {
        _units = _burst_units;
        _last_ns = std::max(_last_ns, now_ns);
    }

    // Live change: the time up to `now_ns` is credited at the old rate, then the new rate and
    // burst apply; tokens (or debt) beyond the new burst are clipped.
    void set(uint64_t rate_bps, uint64_t burst_bytes, uint64_t now_ns);
    // How deep `consume` may go into debt (default: one burst; at most 256 MiB).
    void set_max_debt(uint64_t debt_bytes);

    token_bucket_state state() const { return {_units, _last_ns}; }
    // Continues from `s` under this bucket's rate and burst (which may differ from the ones
    // `s` was taken under): tokens beyond the burst or the maximum debt are clipped, and the
    // time from `s.at_ns` on is credited at this rate by the next refill. A time after `now_ns`
    // is taken as `now_ns`, so that no stored time can hold the bucket empty.
    void resume(const token_bucket_state& s, uint64_t now_ns);

    bool has_tokens() const { return _units > 0; }
    // Whole bytes available now, 0 when empty or in debt.
    uint64_t available() const {
        return _units > 0 ? static_cast<uint64_t>(_units / units_per_byte) : 0;
    }
    // Whole bytes, negative in debt (rounded toward zero).
    int64_t tokens() const { return _units / units_per_byte; }
    int64_t units() const { return _units; }
    // Nanoseconds from the last refill until the bucket holds tokens again (0: it does now;
    // max(): never, rate 0).
    uint64_t ns_until_tokens() const;
    // The same counted from `now_ns` (the time since the last refill is already credited).
    uint64_t ns_until_tokens(uint64_t now_ns) const {
        const uint64_t wait = ns_until_tokens();
        const uint64_t elapsed = now_ns > _last_ns ? now_ns - _last_ns : 0;
        return wait > elapsed ? wait - elapsed : 0;
    }

    uint64_t rate_bps() const { return _rate_bps; }
    uint64_t burst_bytes() const { return static_cast<uint64_t>(_burst_units / units_per_byte); }
    uint64_t last_ns() const { return _last_ns; }

  private:
    static int64_t to_units(uint64_t bytes) {
        // Anything above a burst plus the deepest debt clips to the floor or ceiling anyway.
        constexpr uint64_t clip = uint64_t{512} << 20;
        return static_cast<int64_t>(std::min(bytes, clip)) * units_per_byte;
    }

    int64_t _units = 0;
    int64_t _burst_units = 0;
    int64_t _debt_units = 0;
    bool _debt_is_burst = true;  // the maximum debt follows the burst
    uint64_t _rate_bps = 0;
    uint64_t _fill_ns = std::numeric_limits<uint64_t>::max();  // from the deepest debt to full
    uint64_t _last_ns = 0;
};

}  // namespace jakiro::qos
