#include "qos/scheduler.hh"

#include <algorithm>

namespace jakiro::qos {

namespace {

// Virtual clocks are rebased (both lowered by the smaller) once they pass 2^62; a commit adds at
// most 2^32 bytes × 1000, so they never wrap.
constexpr uint64_t vtime_rebase_at = uint64_t{1} << 62;

// A min bucket remembers overshoot (a class below its min is granted a few bytes and sends a
// whole packet) but not more: service the weights gave beyond the min must not delay the
// guarantee later by more than two of the largest frames at the min rate.
constexpr uint64_t min_bucket_debt_bytes = uint64_t{2} * largest_charged_frame_bytes;

// How deep the shaping buckets (uplink, vNIC, a class's max) may go into debt: a burst, but never
// less than two of the largest frames, so that a TCP super-frame started on the last token of a
// small burst is charged in full instead of partly forgiven (at 100 Mbit/s the default 64 KiB
// burst is smaller than one super-frame).
constexpr uint64_t shaping_debt_bytes(uint64_t burst_bytes) {
    return std::max<uint64_t>(burst_bytes, uint64_t{2} * largest_charged_frame_bytes);
}

}  // namespace

scheduler::scheduler(uint32_t max_vnics, const uplink_qos& uplink, uint64_t now_ns)
    : _uplink(uplink.rate_bps, uplink.burst_bytes, now_ns),
      _uplink_rate_bps(uplink.rate_bps),
      _vnics(max_vnics) {
    _uplink.set_max_debt(shaping_debt_bytes(uplink.burst_bytes));
}

void scheduler::configure(uint64_t now_ns, uint32_t vnic, const vnic_qos& q) {
    vnic_state& s = _vnics[vnic];
    const bool fresh = !s.configured;
    if (fresh) {
        s.bucket = token_bucket(q.rate_bps, q.burst_bytes, now_ns);
    } else {
        s.bucket.set(s.bucket.rate_bps(), q.burst_bytes, now_ns);  // rate follows in rescale()
    }
    s.bucket.set_max_debt(shaping_debt_bytes(q.burst_bytes));
    s.rate_bps = q.rate_bps;
    s.burst_bytes = q.burst_bytes;
    s.lag_bytes = q.burst_bytes;

    bool weights_changed = fresh;
    for (std::size_t i = 0; i < class_count; ++i) {
        class_state& k = s.cls[i];
        const class_qos& c = q.classes[i];
        weights_changed |= k.weight != c.weight;
        k.weight = c.weight;
        // Scale = (w0·w1) / own weight = the other class's weight: bytes × scale compares
        // bytes/weight across the two classes without a division.
        k.vt_scale = q.classes[1 - i].weight;

        if (c.min_bps != 0) {
            if (k.has_min) {
                k.min_bucket.set(c.min_bps, q.burst_bytes, now_ns);
            } else {
                k.min_bucket = token_bucket(c.min_bps, q.burst_bytes, now_ns);
            }
            k.min_bucket.set_max_debt(min_bucket_debt_bytes);
        }
        k.has_min = c.min_bps != 0;
        if (c.max_bps != 0) {
            if (k.has_max) {
                k.max_bucket.set(c.max_bps, q.burst_bytes, now_ns);
            } else {
                k.max_bucket = token_bucket(c.max_bps, q.burst_bytes, now_ns);
            }
            k.max_bucket.set_max_debt(shaping_debt_bytes(q.burst_bytes));
        }
        k.has_max = c.max_bps != 0;
    }
    if (weights_changed) {
        // Clocks measured in the old weights' units cannot be compared in the new ones: start
        // level, so the new shares hold from the next grant.
        const uint64_t level = std::max(s.cls[0].vtime, s.cls[1].vtime);
        for (class_state& k : s.cls) {
            k.vtime = level;
            k.start_vtime = level;
        }
    }
    __atomic_store_n(&s.configured, true, __ATOMIC_RELAXED);
    rescale(now_ns);
}

void scheduler::configure_uplink(uint64_t now_ns, const uplink_qos& uplink) {
    _uplink.set(uplink.rate_bps, uplink.burst_bytes, now_ns);
    _uplink.set_max_debt(shaping_debt_bytes(uplink.burst_bytes));
    _uplink_rate_bps = uplink.rate_bps;
    rescale(now_ns);
}

void scheduler::remove(uint32_t vnic) {
    vnic_state& s = _vnics[vnic];
    __atomic_store_n(&s.configured, false, __ATOMIC_RELAXED);
    __atomic_store_n(&s.effective_rate_bps, uint64_t{0}, __ATOMIC_RELAXED);
    for (class_state& k : s.cls) {
        k.backlog = 0;
        k.vtime = 0;
        k.start_vtime = 0;
        k.granted = 0;
        k.used = 0;
        k.has_min = false;
        k.has_max = false;
        k.bytes.reset();
        k.packets.reset();
    }
    s.rate_bps = 0;
    rescale(_uplink.last_ns());
}

vnic_bucket_states scheduler::buckets(uint32_t vnic) const {
    const vnic_state& s = _vnics[vnic];
    vnic_bucket_states b;
    b.vnic = s.bucket.state();
    for (std::size_t i = 0; i < class_count; ++i) {
        b.min[i] = s.cls[i].min_bucket.state();
        b.max[i] = s.cls[i].max_bucket.state();
    }
    return b;
}

void scheduler::resume(uint32_t vnic, const vnic_bucket_states& b, uint64_t now_ns) {
    vnic_state& s = _vnics[vnic];
    s.bucket.resume(b.vnic, now_ns);
    for (std::size_t i = 0; i < class_count; ++i) {
        // A bound the vNIC no longer has keeps its unused bucket as it is.
        if (s.cls[i].has_min) {
            s.cls[i].min_bucket.resume(b.min[i], now_ns);
        }
        if (s.cls[i].has_max) {
            s.cls[i].max_bucket.resume(b.max[i], now_ns);
        }
    }
}

// An oversubscribed uplink (the vNIC rates add up to more than it carries) is shared in
// proportion to the vNIC rates by scaling each vNIC's bucket; see README.
void scheduler::rescale(uint64_t now_ns) {
    uint64_t sum = 0;
    for (const vnic_state& s : _vnics) {
        if (s.configured) {
            sum += s.rate_bps;
        }
    }
    for (vnic_state& s : _vnics) {
        if (!s.configured) {
            continue;
        }
        uint64_t eff = s.rate_bps;
        if (sum > _uplink_rate_bps) {
            eff = static_cast<uint64_t>(static_cast<unsigned __int128>(s.rate_bps) *
                                        _uplink_rate_bps / sum);
            eff = std::max<uint64_t>(eff, 1);
        }
        if (eff != s.bucket.rate_bps()) {
            s.bucket.set(eff, s.burst_bytes, now_ns);
        }
        __atomic_store_n(&s.effective_rate_bps, eff, __ATOMIC_RELAXED);
    }
}

void scheduler::dequeue_unsent(uint32_t vnic, traffic_class c, uint64_t bytes) {
    class_state& k = _vnics[vnic].cls[index_of(c)];
    k.backlog -= std::min(bytes, k.backlog);
}

// Keeps the virtual clocks honest before tokens are split:
//  - a class with nothing to send (idle, or capped by its max) cannot bank credit: its clock is
//    pulled up to the start tag of the other's latest burst, so when it comes back it shares
//    from now on, not from when it left (start-time fair queueing's rule: v(t) is the start tag
//    of the packet in service). Not to the other's clock itself: a 64 KB TCP super-frame moves
//    that far ahead at once, and a QP that pauses for one grant while it is owed the weights'
//    answer to that frame (its send window full) would lose it every time (up to a fifth of
//    the rdma class's share at 300 Mbit/s);
//  - a backlogged class may trail the other by at most a burst of its own bytes plus what two
//    of the largest frames of the leader are worth (one 9000-byte frame of a weight-1 class puts
//    a weight-9 class 81 000 bytes behind, which must stay owed); a deeper lag comes from
//    service the weights did not decide (the leader's min guarantee) and is not owed back.
void scheduler::sync_virtual_time(vnic_state& s, const std::array<bool, class_count>& eligible) {
    class_state& a = s.cls[0];
    class_state& b = s.cls[1];
    if (eligible[0] && eligible[1]) {
        class_state& lag = a.vtime <= b.vtime ? a : b;
        class_state& lead = a.vtime <= b.vtime ? b : a;
        const uint64_t max_gap =
            s.lag_bytes * lag.vt_scale + uint64_t{2} * largest_charged_frame_bytes * lead.vt_scale;
        if (lead.vtime - lag.vtime > max_gap) {
            lag.vtime = lead.vtime - max_gap;
        }
    } else {
        if (!eligible[0]) {
            a.vtime = std::max(a.vtime, b.start_vtime);
        }
        if (!eligible[1]) {
            b.vtime = std::max(b.vtime, a.start_vtime);
        }
    }
    const uint64_t low = std::min(a.vtime, b.vtime);
    if (low >= vtime_rebase_at) {
        for (class_state& k : s.cls) {
            k.vtime -= low;
            k.start_vtime -= std::min(low, k.start_vtime);
        }
    }
}

burst_grant scheduler::grant(uint64_t now_ns, uint32_t vnic, const class_limits& limits) {
    burst_grant g;
    vnic_state& s = _vnics[vnic];
    if (!s.configured) {
        return g;
    }
    _uplink.refill(now_ns);
    s.bucket.refill(now_ns);

    std::array<uint64_t, class_count> demand{};
    std::array<bool, class_count> eligible{};
    for (std::size_t i = 0; i < class_count; ++i) {
        class_state& k = s.cls[i];
        // A class that did not take all of its last grant, or got all it could take while
        // the other class took the rest, was not backlogged for a while: like a class that
        // went idle (sync_virtual_time) it is pulled up to the start tag of the other's latest
        // burst, SFQ's v(t), and keeps what that burst owes it. Pulled to the other's clock
        // instead, it lost ~200 KB of rdma each time a 64 KB TCP super-frame had just moved
        // that clock at 3:1, and a QP that emptied its window or ended a poll short several
        // times per millisecond got 2.0-2.5 instead of 3 at 5 Gbit/s (1 KB RoCE packets).
        // A class held back (held_back: paced, a full port) is pulled to the other's clock: it
        // may stay below its share for long, and what it is owed must not hold the other back.
        if ((k.granted > k.used && k.backlog > 0) || k.satisfied) {
            const bool blocked = k.held && k.granted > k.used;
            k.vtime = std::max(k.vtime, blocked ? s.cls[1 - i].vtime : s.cls[1 - i].start_vtime);
        }
        k.held = false;
        k.granted = 0;
        k.used = 0;
        k.satisfied = false;

        uint64_t d = std::min(k.backlog, limits[i]);
        if (k.has_min) {
            k.min_bucket.refill(now_ns);
        }
        if (k.has_max) {
            k.max_bucket.refill(now_ns);
            d = k.max_bucket.has_tokens()
                    ? std::min(d, std::max<uint64_t>(k.max_bucket.available(), 1))
                    : 0;
        }
        demand[i] = d;
        eligible[i] = d > 0;
    }
    sync_virtual_time(s, eligible);

    uint64_t avail = std::min(s.bucket.available(), _uplink.available());
    if (avail == 0 || (!eligible[0] && !eligible[1])) {
        return g;
    }
    // 1. Guarantees: a class below its min is served first, up to what its min bucket holds.
    for (std::size_t i = 0; i < class_count && avail > 0; ++i) {
        class_state& k = s.cls[i];
        if (eligible[i] && k.has_min && k.min_bucket.has_tokens()) {
            const uint64_t x =
                std::min({demand[i], std::max<uint64_t>(k.min_bucket.available(), 1), avail});
            g.bytes[i] += x;
            demand[i] -= x;
            avail -= x;
        }
    }
    // 2. The rest by weight.
    if (avail > 0) {
        split_by_weight(s, g, demand, avail);
    }
    for (std::size_t i = 0; i < class_count; ++i) {
        s.cls[i].granted = g.bytes[i];
        s.cls[i].satisfied = eligible[i] && demand[i] == 0 && g.bytes[1 - i] != 0;
    }
    return g;
}

// Splits `avail` so that the classes' virtual clocks (counting what this grant gives) end as
// level as possible: the trailing class first gets what it is owed, then what is left goes in
// the ratio of the weights; a share a class cannot use goes to the other (work conservation).
void scheduler::split_by_weight(vnic_state& s, burst_grant& g,
                                std::array<uint64_t, class_count>& demand, uint64_t avail) {
    if (demand[0] == 0 || demand[1] == 0) {
        const std::size_t i = demand[0] == 0 ? 1 : 0;
        const uint64_t x = std::min(demand[i], avail);
        g.bytes[i] += x;
        demand[i] -= x;
        return;
    }
    const uint64_t v0 = s.cls[0].vtime + g.bytes[0] * s.cls[0].vt_scale;
    const uint64_t v1 = s.cls[1].vtime + g.bytes[1] * s.cls[1].vt_scale;
    const std::size_t l = v0 <= v1 ? 0 : 1;  // trailing
    const std::size_t h = 1 - l;
    const uint64_t owed = (l == 0 ? v1 - v0 : v0 - v1) / s.cls[l].vt_scale;

    uint64_t x = std::min({owed, demand[l], avail});
    g.bytes[l] += x;
    demand[l] -= x;
    avail -= x;
    if (avail == 0) {
        return;
    }
    const uint64_t wl = s.cls[l].weight;
    const uint64_t wh = s.cls[h].weight;
    const uint64_t share_l = avail * wl / (wl + wh);
    const uint64_t xl = std::min(share_l, demand[l]);
    const uint64_t xh = std::min(avail - share_l, demand[h]);
    uint64_t spare = avail - xl - xh;
    const uint64_t more_l = std::min(spare, demand[l] - xl);
    spare -= more_l;
    const uint64_t more_h = std::min(spare, demand[h] - xh);
    g.bytes[l] += xl + more_l;
    g.bytes[h] += xh + more_h;
    demand[l] -= xl + more_l;
    demand[h] -= xh + more_h;
}

void scheduler::commit(uint32_t vnic, traffic_class c, uint64_t bytes, uint32_t packets) {
    vnic_state& s = _vnics[vnic];
    class_state& k = s.cls[index_of(c)];
    _uplink.consume(bytes);
    s.bucket.consume(bytes);
    if (k.has_min) {
        k.min_bucket.consume(bytes);
    }
    if (k.has_max) {
        k.max_bucket.consume(bytes);
    }
    k.start_vtime = k.vtime;
    k.vtime += bytes * k.vt_scale;
    k.backlog -= std::min(bytes, k.backlog);
    k.used += bytes;
    k.bytes.add(bytes);
    k.packets.add(packets);
}

void scheduler::refund(uint32_t vnic, traffic_class c, uint64_t bytes, uint32_t packets) {
    vnic_state& s = _vnics[vnic];
    class_state& k = s.cls[index_of(c)];
    _uplink.refund(bytes);
    s.bucket.refund(bytes);
    if (k.has_min) {
        k.min_bucket.refund(bytes);
    }
    if (k.has_max) {
        k.max_bucket.refund(bytes);
    }
    k.vtime -= std::min(bytes * k.vt_scale, k.vtime);
    k.start_vtime = std::min(k.start_vtime, k.vtime);
    k.backlog += bytes;
    k.used -= std::min(bytes, k.used);
    k.bytes.sub(bytes);
    k.packets.sub(packets);
}

uint64_t scheduler::ns_until_tokens(uint32_t vnic) const {
    return std::max(_vnics[vnic].bucket.ns_until_tokens(), _uplink.ns_until_tokens());
}

class_counters scheduler::counters(uint32_t vnic, traffic_class c) const {
    const class_state& k = _vnics[vnic].cls[index_of(c)];
    return {k.bytes.read(), k.packets.read()};
}

}  // namespace jakiro::qos
