#include "dataplane/worker/packet_rate_buckets.hh"

#include <algorithm>

namespace jakiro {

namespace {

uint64_t burst_frames_of(uint32_t per_s) {
    return std::max<uint64_t>(packet_rate_buckets::min_burst,
                              uint64_t{per_s} * packet_rate_buckets::burst_ns / 1'000'000'000);
}

int64_t burst_units_of(uint32_t per_s, int64_t units_per_frame) {
    return static_cast<int64_t>(burst_frames_of(per_s)) * units_per_frame;
}

}  // namespace

uint32_t packet_rate_buckets::release_frames(uint32_t per_s) {
    const uint64_t frames = uint64_t{per_s} * release_ns / 1'000'000'000;
    return static_cast<uint32_t>(std::clamp<uint64_t>(frames, min_burst, burst_frames_of(per_s)));
}

uint32_t packet_rate_buckets::available(uint16_t slot, uint32_t per_s, uint64_t now_ns) {
    bucket& b = _buckets[slot];
    if (b.per_s != per_s) {
        b.per_s = per_s;
        b.burst_units = burst_units_of(per_s, units_per_frame);
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

packet_rate_buckets::carried packet_rate_buckets::state(uint16_t slot) const {
    const bucket& b = _buckets[slot];
    return {b.per_s, b.units, b.last_ns};
}

void packet_rate_buckets::resume(uint16_t slot, const carried& c, uint64_t now_ns) {
    if (c.per_s == 0) {
        return;
    }
    bucket& b = _buckets[slot];
    b.per_s = c.per_s;
    b.burst_units = burst_units_of(c.per_s, units_per_frame);
    // charge() takes at most what available() gave: never below zero, unless corrupt.
    b.units = std::clamp<int64_t>(c.units, 0, b.burst_units);
    b.last_ns = std::min(c.at_ns, now_ns);
}

void packet_rate_buckets::charge(uint16_t slot, uint32_t frames) {
    _buckets[slot].units -= static_cast<int64_t>(frames) * units_per_frame;
}

}  // namespace jakiro
