#include "packet_rate_buckets.hh"

#include <algorithm>

namespace jakiro {

uint32_t packet_rate_buckets::available(uint16_t slot, uint32_t per_s, uint64_t now_ns) {
    bucket& b = _buckets[slot];
    if (b.per_s != per_s) {
        const uint64_t burst =
            std::max<uint64_t>(min_burst, uint64_t{per_s} * burst_ns / 1'000'000'000);
        b.per_s = per_s;
        b.burst_units = static_cast<int64_t>(burst) * units_per_frame;
        b.units = b.burst_units;
        b.last_ns = now_ns;
    } else if (now_ns > b.last_ns) {
        // Past the time a refill from empty takes, the bucket is full: no product overflows.
        const uint64_t dt = std::min<uint64_t>(
            now_ns - b.last_ns,
            static_cast<uint64_t>(b.burst_units) / std::max<uint32_t>(per_s, 1) + 1);
        b.units = std::min(b.units + static_cast<int64_t>(dt * per_s), b.burst_units);
        b.last_ns = now_ns;
    }
    return static_cast<uint32_t>(b.units / units_per_frame);
}

void packet_rate_buckets::charge(uint16_t slot, uint32_t frames) {
    _buckets[slot].units -= static_cast<int64_t>(frames) * units_per_frame;
}

}  // namespace jakiro
