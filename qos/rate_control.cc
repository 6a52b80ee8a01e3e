#include "qos/rate_control.hh"

#include <algorithm>

namespace jakiro::qos {

namespace {

// advance() runs at most this many timer events one by one; a QP idle for longer (about 110 ms
// at the default timers) has its remaining recovery applied in one step.
constexpr uint32_t max_events_per_advance = 2048;

}  // namespace

dcqcn_rate::dcqcn_rate(const dcqcn_params& p, uint64_t now_ns)
    : _p(p),
      _pacer(p.line_rate_bps, pacer_depth_bytes(p.line_rate_bps), now_ns),
      _rc(p.line_rate_bps),
      _rt(p.line_rate_bps) {
    _p.alpha_timer_ns = std::max<uint64_t>(_p.alpha_timer_ns, 1);
    _p.increase_timer_ns = std::max<uint64_t>(_p.increase_timer_ns, 1);
    _p.g_shift = std::clamp<uint32_t>(_p.g_shift, 1, 20);
    _next_alpha_ns = now_ns + _p.alpha_timer_ns;
    _next_increase_ns = now_ns + _p.increase_timer_ns;
}

uint64_t dcqcn_rate::pacer_depth_bytes(uint64_t rate_bps) const {
    const auto timed = static_cast<uint64_t>(static_cast<unsigned __int128>(rate_bps) *
                                             _p.pacer_burst_ns / 8'000'000'000);
    return std::max(_p.pacer_burst_bytes, timed);
}

dcqcn_stage dcqcn_rate::stage() const {
    const uint32_t hi = std::max(_t_stage, _bc_stage);
    const uint32_t lo = std::min(_t_stage, _bc_stage);
    if (hi <= _p.fast_recovery_steps) {
        return dcqcn_stage::fast_recovery;
    }
    return lo > _p.fast_recovery_steps ? dcqcn_stage::hyper_increase
                                       : dcqcn_stage::additive_increase;
}

void dcqcn_rate::decay_alpha() {
    // alpha ×= (1 − g). Below 2^g_shift units the shift yields nothing: snap to zero rather
    // than stick (the trap Linux's DCTCP fixed in "allow dctcp alpha to drop to zero").
    const uint32_t d = _alpha >> _p.g_shift;
    _alpha = d != 0 ? _alpha - d : 0;
}

// One rate-increase event (timer or byte counter), after its stage count was bumped:
//   fast recovery     max(T, BC) ≤ F   target unchanged
//   additive increase otherwise        target += R_AI
//   hyper increase    min(T, BC) > F   target += (min(T, BC) − F) · R_HAI
// and then current = (target + current) / 2.
void dcqcn_rate::increase(uint64_t at_ns) {
    switch (stage()) {
        case dcqcn_stage::fast_recovery:
            break;
        case dcqcn_stage::additive_increase:
            _rt += _p.ai_rate_bps;
            break;
        case dcqcn_stage::hyper_increase: {
            // The factor is capped where the step would pass the line rate anyway (no overflow).
            const uint64_t i = std::min(_t_stage, _bc_stage) - _p.fast_recovery_steps;
            const uint64_t cap = _p.line_rate_bps / std::max<uint64_t>(_p.hai_rate_bps, 1) + 1;
            _rt += std::min(i, cap) * _p.hai_rate_bps;
            break;
        }
    }
    _rt = std::min(_rt, _p.line_rate_bps);
    // Rounded up, so that recovery reaches the target instead of stopping one bit/s short.
    _rc = std::max((_rt + _rc + 1) / 2, std::min(_p.min_rate_bps, _p.line_rate_bps));
    apply_rate(at_ns);
}

void dcqcn_rate::advance(uint64_t now_ns) {
    uint32_t events = 0;
    while (events < max_events_per_advance) {
        if (_next_alpha_ns <= _next_increase_ns) {
            if (_next_alpha_ns > now_ns) {
                return;
            }
            decay_alpha();
            _next_alpha_ns += _p.alpha_timer_ns;
        } else {
            if (_next_increase_ns > now_ns) {
                return;
            }
            if (_t_stage != ~uint32_t{0}) {
                ++_t_stage;
            }
            increase(_next_increase_ns);
            _next_increase_ns += _p.increase_timer_ns;
        }
        ++events;
    }
    // Still behind: more than max_events_per_advance events were due. Each increase event adds
    // at least R_AI to the target and halves the gap to it, and each alpha event shrinks alpha
    // by (1 − g); after this many of either, recovery is complete to within rounding.
    if (_next_increase_ns <= now_ns) {
        const uint64_t n = (now_ns - _next_increase_ns) / _p.increase_timer_ns + 1;
        _rt = std::min(_p.line_rate_bps, _rt + n * _p.ai_rate_bps);
        _rc = _rt;
        _t_stage = static_cast<uint32_t>(std::min<uint64_t>(_t_stage + n, ~uint32_t{0}));
        _next_increase_ns += n * _p.increase_timer_ns;
        apply_rate(now_ns);
    }
    if (_next_alpha_ns <= now_ns) {
        const uint64_t n = (now_ns - _next_alpha_ns) / _p.alpha_timer_ns + 1;
        for (uint64_t i = 0; i < n && _alpha != 0; ++i) {
            decay_alpha();
        }
        _next_alpha_ns += n * _p.alpha_timer_ns;
    }
}

void dcqcn_rate::on_cnp(uint64_t now_ns) {
    advance(now_ns);
    ++_cnps;
    _rt = _rc;
    // current × (1 − alpha/2), alpha in 2^20 fixed point; the product stays below 2^62.
    const uint64_t cut =
        static_cast<uint64_t>((static_cast<unsigned __int128>(_rc) * _alpha) >> 21);
    _rc = std::max(_rc - cut, std::min(_p.min_rate_bps, _p.line_rate_bps));
    _alpha = _alpha - (_alpha >> _p.g_shift) + (alpha_one >> _p.g_shift);
    _t_stage = 0;
    _bc_stage = 0;
    _bytes_since = 0;
    _next_alpha_ns = now_ns + _p.alpha_timer_ns;
    _next_increase_ns = now_ns + _p.increase_timer_ns;
    apply_rate(now_ns);
}

dcqcn_rate dcqcn_rate::resumed(const dcqcn_params& p, const carried& c, uint64_t now_ns) {
    dcqcn_rate r(p, now_ns);
    const uint64_t floor = std::min(r._p.min_rate_bps, r._p.line_rate_bps);
    r._rc = std::clamp(c.rate_bps, floor, r._p.line_rate_bps);
    r._rt = std::clamp(c.target_bps, floor, r._p.line_rate_bps);
    r._alpha = std::min(c.alpha, alpha_one);
    r._t_stage = c.time_stage;
    r._bc_stage = c.byte_stage;
    r._bytes_since = r._p.byte_counter_bytes == 0 ? 0 : c.bytes_since % r._p.byte_counter_bytes;
    r._cnps = c.cnps;
    r.apply_rate(now_ns);
    return r;
}

void dcqcn_rate::on_sent(uint64_t bytes) {
    _pacer.consume(bytes);
    if (_p.byte_counter_bytes == 0) {
        return;
    }
    _bytes_since += bytes;
    while (_bytes_since >= _p.byte_counter_bytes) {
        _bytes_since -= _p.byte_counter_bytes;
        if (_bc_stage != ~uint32_t{0}) {
            ++_bc_stage;
        }
        increase(_pacer.last_ns());
    }
}

void dcqcn_rate::set_line_rate(uint64_t now_ns, uint64_t line_rate_bps) {
    advance(now_ns);
    _p.line_rate_bps = line_rate_bps;
    _rt = std::min(_rt, line_rate_bps);
    _rc = std::min(_rc, line_rate_bps);
    apply_rate(now_ns);
}

}  // namespace jakiro::qos
