#pragma once
// DCQCN-style congestion control for the RoCE engine (Zhu et al., "Congestion Control for
// Large-Scale RDMA Deployments", SIGCOMM 2015):
//  - `dcqcn_rate`: the reaction point (RP), one per sending QP. Cuts its rate on each CNP,
//    recovers over time (fast recovery, additive increase, hyper increase) and paces the QP's
//    packets at the current rate.
//  - `cnp_pacer`: the notification point's (NP) per-QP limit, at most one CNP per 50 µs.
// Timers are driven by the time the caller passes in; nothing here reads a clock.
//
// Thread-safety: none. A QP's state belongs to the worker that runs the QP.

#include <cstdint>

#include "qos/config.hh"
#include "qos/token_bucket.hh"

namespace jakiro::qos {

// Defaults are the DCQCN paper's, tuned there for 40 GbE; they suit the 1–100 Gbit/s vNIC rates
// here. g, K, T, B, F and the 50 µs CNP interval appear with the same values in htsim's DCQCN
// model (UCL's packet-level simulator), a second reading of the paper.
struct dcqcn_params {
    uint64_t line_rate_bps = 0;  // where a QP starts and the ceiling of recovery: the vNIC rate
    // Floor for cuts: a QP is never throttled below this, so it always makes progress (and its
    // retransmit timers do not fire just because it was slowed).
    uint64_t min_rate_bps = 10'000'000;
    uint32_t g_shift = 8;                      // g = 1/2^8 = 1/256: alpha's EWMA gain (paper)
    uint64_t alpha_timer_ns = 55'000;          // K = 55 µs: alpha decays once per K without a CNP
    uint64_t increase_timer_ns = 55'000;       // T = 55 µs: one rate-increase event per T
    uint64_t byte_counter_bytes = 10'000'000;  // B = 10 MB: one rate-increase event per B sent
    uint32_t fast_recovery_steps = 5;          // F = 5
    uint64_t ai_rate_bps = 40'000'000;         // R_AI = 40 Mbit/s (paper, 40 GbE)
    // R_HAI: 10 × R_AI, the ratio of the Mellanox-style defaults in HPCC's ns-3 DCQCN model
    // (RateAI 5, RateHAI 50 Mbit/s).
    uint64_t hai_rate_bps = 400'000'000;
    // Pacer depth: what a QP may send back to back, `pacer_burst_ns` at its current rate but at
    // least `pacer_burst_bytes` (four 4096-byte MTU packets, so the pacer never splits a burst
    // of the engine). The time term is for shared cores, where the worker may come round to a
    // QP only after milliseconds and the vNIC's scheduler then grants up to its whole burst at
    // once (default_burst_ns, config.hh). The pacer, which starts at the vNIC's rate
    // (rdma_class.hh), must hold as much: a grant the QP cannot take is given to TCP. With a
    // fixed 16 KiB, RDMA:TCP 3:1 measured 2:1 at 1 Gbit/s; with 2 ms against the scheduler's
    // 4 ms it measured 2.05-2.4 on a loaded 2-core box. It stays below the receiver's meter
    // burst (5 ms of the vNIC rate at least, ingress_meter.hh), so a QP that was just cut
    // cannot burst past the meter.
    uint64_t pacer_burst_bytes = 16384;
    uint64_t pacer_burst_ns = default_burst_ns;
};

enum class dcqcn_stage : uint8_t { fast_recovery, additive_increase, hyper_increase };

// alpha in fixed point: alpha_one is 1.0.
constexpr uint32_t alpha_one = uint32_t{1} << 20;

class dcqcn_rate {
  public:
    dcqcn_rate() = default;
    // Starts at line rate with alpha = 1 (paper: the first CNP halves the rate).
    dcqcn_rate(const dcqcn_params& p, uint64_t now_ns);

    // A CNP for this QP arrived: target = current; current ×= (1 − alpha/2); alpha = (1−g)·alpha
    // + g; the increase timer, byte counter and both stage counts restart.
    void on_cnp(uint64_t now_ns);
    // Runs the alpha and rate-increase timers up to `now_ns`.
    void advance(uint64_t now_ns);
    // Bytes the QP may start sending now (timers run, pacer refilled). A packet may start while
    // this is positive; charge it with `on_sent`.
    uint64_t grant(uint64_t now_ns) {
        advance(now_ns);
        _pacer.refill(now_ns);
        return _pacer.available();
    }
    // `bytes` left: charges the pacer and feeds the byte counter.
    void on_sent(uint64_t bytes);
    // Live change of the vNIC rate: the ceiling moves; a current or target rate above it is
    // lowered to it.
    void set_line_rate(uint64_t now_ns, uint64_t line_rate_bps);

    uint64_t rate_bps() const { return _rc; }
    uint64_t target_rate_bps() const { return _rt; }
    uint32_t alpha() const { return _alpha; }  // alpha_one = 1.0
    double alpha_value() const { return static_cast<double>(_alpha) / alpha_one; }
    uint32_t time_stage() const { return _t_stage; }
    uint32_t byte_stage() const { return _bc_stage; }
    dcqcn_stage stage() const;
    uint64_t cnps() const { return _cnps; }
    const dcqcn_params& params() const { return _p; }

    // What a restarted jakirod carries over of a QP's rate: where recovery stands. Its timers
    // are not carried: they restart when the rate is resumed, as after a CNP.
    struct carried {
        uint64_t rate_bps = 0;
        uint64_t target_bps = 0;
        uint64_t bytes_since = 0;
        uint64_t cnps = 0;
        uint32_t alpha = 0;
        uint32_t time_stage = 0;
        uint32_t byte_stage = 0;
    };
    carried carry() const { return {_rc, _rt, _bytes_since, _cnps, _alpha, _t_stage, _bc_stage}; }
    // The rate `c` describes under `p`, its timers and pacer starting at `now_ns`; values
    // out of range (a corrupt image) are clamped to what the rate could have reached.
    static dcqcn_rate resumed(const dcqcn_params& p, const carried& c, uint64_t now_ns);

  private:
    void increase(uint64_t at_ns);
    void decay_alpha();
    uint64_t pacer_depth_bytes(uint64_t rate_bps) const;
    void apply_rate(uint64_t at_ns) { _pacer.set(_rc, pacer_depth_bytes(_rc), at_ns); }

    dcqcn_params _p;
    token_bucket _pacer;
    uint64_t _rc = 0;  // current rate
    uint64_t _rt = 0;  // target rate
    uint32_t _alpha = alpha_one;
    uint32_t _t_stage = 0;
    uint32_t _bc_stage = 0;
    uint64_t _bytes_since = 0;  // toward the next byte-counter event
    uint64_t _next_alpha_ns = 0;
    uint64_t _next_increase_ns = 0;
    uint64_t _cnps = 0;
};

// DCQCN's NP rule: at most one CNP per QP per interval (50 µs in the paper), however many marked
// packets arrive; later marks within the interval are covered by the CNP already sent.
constexpr uint64_t default_cnp_interval_ns = 50'000;

class cnp_pacer {
  public:
    // True (and remembered) when a CNP may go to this QP now.
    bool try_send(uint64_t now_ns, uint64_t interval_ns = default_cnp_interval_ns) {
        if (_sent_any && now_ns < _last_ns + interval_ns) {
            ++_suppressed;
            return false;
        }
        _sent_any = true;
        _last_ns = now_ns;
        return true;
    }
    uint64_t suppressed() const { return _suppressed; }

  private:
    uint64_t _last_ns = 0;
    uint64_t _suppressed = 0;
    bool _sent_any = false;
};

}  // namespace jakiro::qos
