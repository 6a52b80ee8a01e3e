#include "dataplane/shaping/egress_shaper.hh"

#include <algorithm>

#include "dataplane/worker/worker_context.hh"
#include "rnic/engine.hh"

namespace jakiro {

namespace {

// No uplink limit configured: a bucket that never runs dry.
qos::uplink_qos unlimited_uplink() {
    return {qos::max_rate_bps, qos::max_burst_bytes};
}

constexpr auto rdma = qos::traffic_class::rdma;

uint64_t grant_period_ns(uint64_t rate_bps) {
    const uint64_t ns = uint64_t{4096} * 8'000'000'000 / rate_bps;
    return std::clamp<uint64_t>(ns, 200, 100'000);
}
constexpr auto tcp = qos::traffic_class::tcp;

}  // namespace

rdma_queues rdma_queues::of(const rnic::engine* engine) {
    if (engine == nullptr) {
        return {[](uint16_t) { return uint64_t{0}; }, [](uint16_t) { return false; }};
    }
    return {[engine](uint16_t slot) { return engine->vnic_send_room(slot); },
            [engine](uint16_t slot) { return engine->vnic_held_back(slot); }};
}

uint64_t egress_shaper::queue_byte_limit(const qos::vnic_qos& q) {
    // rate <= 2 Tbit/s: the product stays below 2^63.
    const uint64_t timed = q.rate_bps / 8 * (tcp_queue_ns / 1'000'000) / 1'000;
    return std::max({timed, q.burst_bytes, uint64_t{qos::largest_charged_frame_bytes}});
}

egress_shaper::egress_shaper(uint64_t now_ns, uint32_t queue_limit)
    : _sched(std::make_unique<qos::scheduler>(max_vnics, unlimited_uplink(), now_ns)),
      _queue_limit(std::min(queue_limit, tcp_queue_frames)) {}

egress_shaper::~egress_shaper() {
    for (auto& v : _vnics) {
        if (v == nullptr) {
            continue;
        }
        for (uint32_t i = 0; i < v->count; ++i) {
            rte_pktmbuf_free(v->fifo[(v->head + i) % tcp_queue_frames].m);
        }
    }
}

void egress_shaper::sync(const datapath_tables& tables, worker_context& ctx, uint64_t now_ns) {
    if (&tables == _seen) {
        return;
    }
    _seen = &tables;
    _sched->configure_uplink(now_ns, tables.uplink_qos.value_or(unlimited_uplink()));
    if (_carried_uplink) {
        _sched->resume_uplink(*_carried_uplink, now_ns);
        _carried_uplink.reset();
    }
    _active.clear();
    for (uint16_t slot = 0; slot < max_vnics; ++slot) {
        const std::optional<qos::vnic_qos>* wanted =
            slot < tables.qos.size() ? &tables.qos[slot] : nullptr;
        const bool active = wanted != nullptr && wanted->has_value() &&
                            slot < tables.vnics.size() && tables.vnics[slot].worker == ctx.id;
        if (!active) {
            if (_vnics[slot] != nullptr) {
                flush_unshaped(slot, ctx);  // queued frames leave now, unshaped
                _sched->remove(slot);
                _vnics[slot].reset();
                _config[slot].reset();
            }
            continue;
        }
        if (_vnics[slot] == nullptr) {
            _vnics[slot] = std::make_unique<vnic_state>();
        }
        if (!_config[slot] || *_config[slot] != **wanted) {
            _sched->configure(now_ns, slot, **wanted);  // live: backlog and counters kept
            _config[slot] = *wanted;
        }
        if (_carried[slot]) {
            _sched->resume(slot, *_carried[slot], now_ns);
        }
        // Lowered bounds drop nothing already queued; the FIFO drains below them first.
        _vnics[slot]->frame_limit = std::min(_queue_limit, tables.vnics[slot].max_packet_buffers);
        _vnics[slot]->byte_limit = queue_byte_limit(**wanted);
        _active.push_back(slot);
    }
    _carried = {};
}

void egress_shaper::flush_unshaped(uint16_t slot, worker_context& ctx) {
    vnic_state& v = *_vnics[slot];
    for (; v.count > 0; --v.count) {
        const queued_frame& f = v.fifo[v.head];
        v.head = (v.head + 1) % tcp_queue_frames;
        ctx.tx.enqueue(f.port, f.m, ctx.counters);
        --_queued_frames;
    }
    v.queued_bytes = 0;
}

bool egress_shaper::enqueue_tcp(uint16_t slot, uint16_t port, rte_mbuf* m, uint32_t bytes) {
    vnic_state& v = *_vnics[slot];
    if (v.count >= v.frame_limit || (v.count > 0 && v.queued_bytes + bytes > v.byte_limit)) {
        _counters[slot].tcp_queue_drops.add(1);
        return false;
    }
    v.fifo[(v.head + v.count) % tcp_queue_frames] = {m, port, bytes};
    ++v.count;
    v.queued_bytes += bytes;
    ++_queued_frames;
    _sched->enqueue(slot, tcp, bytes);
    return true;
}

bool egress_shaper::tcp_queue_full(uint16_t slot) const {
    if (!shaped(slot)) {
        return false;
    }
    const vnic_state& v = *_vnics[slot];
    return v.count >= v.frame_limit || (v.count > 0 && v.queued_bytes >= v.byte_limit);
}

bool egress_shaper::tcp_queue_drained(uint16_t slot) const {
    if (!shaped(slot)) {
        return true;
    }
    const vnic_state& v = *_vnics[slot];
    return v.count <= v.frame_limit / 2 && v.queued_bytes <= v.byte_limit / 2;
}

void egress_shaper::run(worker_context& ctx, const rdma_queues& rdma_q, uint64_t now_ns) {
    for (const uint16_t slot : _active) {
        vnic_state& v = *_vnics[slot];
        // Grants come every 4 KiB of the rate (at least every 100 µs), the period the
        // scheduler's fairness is proven at (tests/unit/qos): granting every microsecond of
        // a busy loop would hand each class a few bytes, and a positive grant lets a whole
        // packet start, so shares would follow packet counts instead of bytes.
        if (now_ns < v.next_grant_ns) {
            v.rdma_budget = 0;
            continue;
        }
        v.next_grant_ns = now_ns + grant_period_ns(_config[slot]->rate_bps);
        // The rdma class's backlog is what the engine could send now: one burst's worth when
        // any QP of the vNIC has something, nothing otherwise (its queues are the QPs' rings);
        // its grant, at most what the engine's next poll can send.
        const uint64_t rdma_room = rdma_q.send_room(slot);
        const bool rdma_busy = rdma_room > 0;
        const uint64_t rdma_backlog = rdma_busy ? _config[slot]->burst_bytes : 0;
        if (rdma_backlog != v.rdma_reported) {
            if (v.rdma_reported > 0) {
                _sched->dequeue_unsent(slot, rdma, v.rdma_reported);
            }
            if (rdma_backlog > 0) {
                _sched->enqueue(slot, rdma, rdma_backlog);
            }
            v.rdma_reported = rdma_backlog;
        }
        _counters[slot].grants.add(1);
        _counters[slot].tcp_busy_grants.add(v.count > 0 ? 1 : 0);
        const qos::burst_grant g = _sched->grant(now_ns, slot, {rdma_room, qos::no_limits[1]});
        // tcp: frames leave while the grant is positive; the last may overshoot.
        uint64_t sent = 0;
        uint32_t packets = 0;
        while (v.count > 0 && sent < g[tcp]) {
            const queued_frame& f = v.fifo[v.head];
            v.head = (v.head + 1) % tcp_queue_frames;
            --v.count;
            --_queued_frames;
            v.queued_bytes -= f.bytes;
            sent += f.bytes;
            ++packets;
            ctx.tx.enqueue(f.port, f.m, ctx.counters);
        }
        if (packets > 0) {
            _sched->commit(slot, tcp, sent, packets);
        }
        v.rdma_budget = static_cast<int64_t>(g[rdma]);
        _counters[slot].rdma_granted.add(g[rdma]);
        _counters[slot].rdma_busy_grants.add(rdma_busy ? 1 : 0);
        v.rdma_used = 0;
        v.rdma_packets = 0;
    }
}

uint64_t egress_shaper::ns_until_sendable(uint64_t now_ns) const {
    uint64_t wait = ~uint64_t{0};
    for (const uint16_t slot : _active) {
        const vnic_state& v = *_vnics[slot];
        if (v.count == 0) {
            continue;
        }
        const uint64_t grant_due = v.next_grant_ns > now_ns ? v.next_grant_ns - now_ns : 0;
        wait = std::min(wait, std::max(grant_due, _sched->ns_until_tokens(slot, now_ns)));
    }
    return wait == ~uint64_t{0} ? 0 : wait;
}

bool egress_shaper::admit_rdma(uint16_t slot, uint32_t bytes) {
    if (slot >= max_vnics || _vnics[slot] == nullptr) {
        return true;  // not shaped
    }
    vnic_state& v = *_vnics[slot];
    if (v.rdma_budget <= 0) {
        _counters[slot].rdma_waits.add(1);
        return false;
    }
    v.rdma_budget -= bytes;
    v.rdma_used += bytes;
    ++v.rdma_packets;
    return true;
}

void egress_shaper::charge_rdma(uint16_t slot, uint32_t bytes) {
    if (slot >= max_vnics || _vnics[slot] == nullptr) {
        return;  // not shaped
    }
    vnic_state& v = *_vnics[slot];
    v.rdma_budget -= bytes;
    v.rdma_used += bytes;  // committed with the packets that carried it
}

void egress_shaper::commit_rdma(const rdma_queues& rdma_q) {
    for (const uint16_t slot : _active) {
        vnic_state& v = *_vnics[slot];
        if (v.rdma_budget > 0 && rdma_q.held_back(slot)) {
            // Left part of this grant because a QP is paced or its port is full, not because
            // it ran dry: owed nothing for it (qos/scheduler.cc).
            _sched->held_back(slot, rdma);
        }
        if (v.rdma_packets == 0) {
            continue;
        }
        // The estimate stays the backlog: the engine's rings, not the scheduler, hold the work.
        _sched->enqueue(slot, rdma, v.rdma_used);
        _sched->commit(slot, rdma, v.rdma_used, v.rdma_packets);
        v.rdma_used = 0;
        v.rdma_packets = 0;
    }
}

}  // namespace jakiro
