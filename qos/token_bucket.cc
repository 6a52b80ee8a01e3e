#include "qos/token_bucket.hh"

#include "qos/config.hh"

namespace jakiro::qos {

token_bucket::token_bucket(uint64_t rate_bps, uint64_t burst_bytes, uint64_t now_ns) {
    _last_ns = now_ns;
    set(rate_bps, burst_bytes, now_ns);
    _units = _burst_units;
}

namespace {

uint64_t fill_ns(uint64_t rate_bps, int64_t burst_units, int64_t debt_units) {
    if (rate_bps == 0) {
        return std::numeric_limits<uint64_t>::max();
    }
    return (static_cast<uint64_t>(burst_units + debt_units) + rate_bps - 1) / rate_bps;
}

}  // namespace

void token_bucket::set(uint64_t rate_bps, uint64_t burst_bytes, uint64_t now_ns) {
    refill(now_ns);
    _rate_bps = std::min(rate_bps, max_rate_bps);
    _burst_units = static_cast<int64_t>(std::min(burst_bytes, max_burst_bytes)) * units_per_byte;
    if (_debt_is_burst) {
        _debt_units = _burst_units;
    }
    _fill_ns = fill_ns(_rate_bps, _burst_units, _debt_units);
    _units = std::clamp(_units, -_debt_units, _burst_units);
}

void token_bucket::set_max_debt(uint64_t debt_bytes) {
    _debt_is_burst = false;
    _debt_units = static_cast<int64_t>(std::min(debt_bytes, max_burst_bytes)) * units_per_byte;
    _fill_ns = fill_ns(_rate_bps, _burst_units, _debt_units);
    _units = std::max(_units, -_debt_units);
}

void token_bucket::resume(const token_bucket_state& s, uint64_t now_ns) {
    _units = std::clamp(s.units, -_debt_units, _burst_units);
    _last_ns = std::min(s.at_ns, now_ns);
}

uint64_t token_bucket::ns_until_tokens() const {
    if (_units > 0) {
        return 0;
    }
    if (_rate_bps == 0) {
        return std::numeric_limits<uint64_t>::max();
    }
    return static_cast<uint64_t>(-_units) / _rate_bps + 1;
}

}  // namespace jakiro::qos
