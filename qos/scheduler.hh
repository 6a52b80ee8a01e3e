#pragma once
// The DHTB egress scheduler: host uplink → vNIC (rate, burst) → classes {rdma, tcp} (weight,
// optional min and max). Token buckets shape (uplink, vNIC, each class's max) and guarantee
// (each class's min); between the two classes of a vNIC a byte-exact virtual clock decides who
// gets the tokens, so that while both are backlogged each class's bytes follow its weight, and
// an idle, capped or blocked class's share goes to the other up to the vNIC rate. The reasons
// for this shape are in qos/README.md.
//
// The scheduler holds no packets. The caller keeps its queues (TCP frames per vNIC, the RoCE
// engine's send queues) and tells the scheduler how many bytes wait (`enqueue`). Once per burst
// it asks `grant` how many bytes each class of a vNIC may start now, sends packets of a class
// while what it sent is below that class's grant (the last packet may overshoot; the overshoot
// is charged and repaid from later tokens), and reports what left with `commit`. Bytes are
// charged bytes (config.hh `charged_bytes`: inner frame + 50 bytes of VXLAN).
//
//     sched.enqueue(v, traffic_class::tcp, charged_bytes(len));         // per queued frame
//     const burst_grant g = sched.grant(now_ns, v, {rdma_room, tcp_room}); // per burst
//     uint64_t sent = 0;
//     while (sent < g[traffic_class::tcp] && !q.empty()) { sent += charged(q.front()); tx(...); }
//     sched.commit(v, traffic_class::tcp, sent, packets);
//     sched.refund(v, traffic_class::tcp, unsent_bytes, unsent_packets); // tx ring refused some
//
// Thread-safety: one scheduler per worker lcore, which owns it. Every member function except
// `counters`, `effective_rate_bps` and `configured` runs on the owning worker only; that includes
// `configure`, which the worker calls when it picks up a new configuration snapshot (the control
// thread never touches the scheduler). `counters` may be called from any thread (single-writer
// relaxed atomics). The hot path (`enqueue`, `grant`, `commit`, `refund`) takes no lock, does
// not allocate and makes no syscall; only the constructor allocates.

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "qos/config.hh"
#include "qos/token_bucket.hh"
#include "stats/counter.hh"

namespace jakiro::qos {

struct class_counters {
    uint64_t bytes = 0;    // charged bytes sent
    uint64_t packets = 0;  // packets sent
};

// Bytes each class of one vNIC may start sending now.
struct burst_grant {
    std::array<uint64_t, class_count> bytes{};
    uint64_t operator[](traffic_class c) const { return bytes[index_of(c)]; }
    uint64_t total() const { return bytes[0] + bytes[1]; }
};

// What the caller can send in this burst per class, when that is less than its backlog: the
// bytes of the first 32 queued frames, what a RoCE engine's QPs may send under their DCQCN
// pacers, the room in a tx ring. A class granted bytes that then sends fewer while bytes are
// still queued is taken to be blocked and loses its claim to catch up (so that the other class
// is not held back by grants nobody takes); callers whose bursts carry less than the backlog
// should therefore pass limits, or a class may lose share it could have used a burst later.
// Likewise a class granted all its limit allows while the other class takes the remaining
// tokens is, for that burst, not competing: it is not owed what the other took.
using class_limits = std::array<uint64_t, class_count>;

// A vNIC's buckets (its own, each class's min and max), for a restarted jakirod to continue.
struct vnic_bucket_states {
    token_bucket_state vnic;
    std::array<token_bucket_state, class_count> min{};
    std::array<token_bucket_state, class_count> max{};
};
constexpr class_limits no_limits = {~uint64_t{0}, ~uint64_t{0}};

class scheduler {
  public:
    // Allocates room for `max_vnics` vNICs (ids 0..max_vnics-1, not checked on the hot path),
    // none configured yet.
    scheduler(uint32_t max_vnics, const uplink_qos& uplink, uint64_t now_ns);

    // --- configuration, owning worker (live: nothing queued or counted is lost) ---------------
    // Adds vNIC `vnic` or changes its rates, burst, weights, min and max. Backlog and counters
    // are kept; time up to `now_ns` is credited at the old rates and the new shares apply from
    // the next `grant`. A weight change starts both classes level (no catch-up owed under the
    // old weights). The configuration must pass `validate`.
    void configure(uint64_t now_ns, uint32_t vnic, const vnic_qos& q);
    void configure_uplink(uint64_t now_ns, const uplink_qos& uplink);
    // Forgets the vNIC: backlog, counters, buckets.
    void remove(uint32_t vnic);
    // The buckets of a configured vNIC and of the uplink as they are now, and their
    // continuation in another scheduler (a restarted jakirod's) once the vNIC is configured
    // there: clipped to its rates and bursts, the time since credited (token_bucket::resume).
    vnic_bucket_states buckets(uint32_t vnic) const;
    void resume(uint32_t vnic, const vnic_bucket_states& b, uint64_t now_ns);
    token_bucket_state uplink_bucket() const { return _uplink.state(); }
    void resume_uplink(const token_bucket_state& b, uint64_t now_ns) { _uplink.resume(b, now_ns); }

    // --- hot path, owning worker ----------------------------------------------------------
    // Enqueue accounting: `bytes` more are waiting in class `c` of `vnic`.
    void enqueue(uint32_t vnic, traffic_class c, uint64_t bytes) {
        _vnics[vnic].cls[index_of(c)].backlog += bytes;
    }
    // Bytes that left the queue without being sent (tail drop, flush on vNIC removal).
    void dequeue_unsent(uint32_t vnic, traffic_class c, uint64_t bytes);
    // The bytes class `c` of `vnic` may start sending now. `limits` caps what a class can use
    // in this burst (default: its whole backlog). Grants are not reserved: what is not sent is
    // simply not committed.
    burst_grant grant(uint64_t now_ns, uint32_t vnic, const class_limits& limits = no_limits);
    // `bytes` (in `packets`) of class `c` left; charges the uplink, the vNIC, the class buckets
    // and the class's virtual clock, and takes the bytes off the backlog. Once per class per
    // burst, or per packet.
    void commit(uint32_t vnic, traffic_class c, uint64_t bytes, uint32_t packets);
    // Class `c` of `vnic` left part of its last grant for a reason that may last, not because
    // its queue ran dry: its sender is paced (a QP that DCQCN slowed down), waits for the
    // receiver (RNR) or found its port full. It is owed nothing for those tokens (see grant).
    void held_back(uint32_t vnic, traffic_class c) { _vnics[vnic].cls[index_of(c)].held = true; }
    // Undoes part of a commit: bytes that were charged but did not leave after all (the tx ring
    // was full) and are back in the queue.
    void refund(uint32_t vnic, traffic_class c, uint64_t bytes, uint32_t packets);
    // Nanoseconds after the last grant until the vNIC (and uplink) hold tokens again: how long a
    // worker with only throttled queues may sleep. With `now_ns`: counted from then.
    uint64_t ns_until_tokens(uint32_t vnic) const;
    uint64_t ns_until_tokens(uint32_t vnic, uint64_t now_ns) const {
        return std::max(_vnics[vnic].bucket.ns_until_tokens(now_ns),
                        _uplink.ns_until_tokens(now_ns));
    }

    uint64_t backlog(uint32_t vnic, traffic_class c) const {
        return _vnics[vnic].cls[index_of(c)].backlog;
    }

    // --- any thread ---------------------------------------------------------------------------
    class_counters counters(uint32_t vnic, traffic_class c) const;
    // The vNIC's rate after scaling for an oversubscribed uplink (see README).
    uint64_t effective_rate_bps(uint32_t vnic) const {
        return __atomic_load_n(&_vnics[vnic].effective_rate_bps, __ATOMIC_RELAXED);
    }
    bool configured(uint32_t vnic) const {
        return __atomic_load_n(&_vnics[vnic].configured, __ATOMIC_RELAXED);
    }
    uint32_t max_vnics() const { return static_cast<uint32_t>(_vnics.size()); }

  private:
    struct class_state {
        token_bucket min_bucket;  // rate = min; used only when has_min
        token_bucket max_bucket;  // rate = max; used only when has_max
        uint64_t backlog = 0;
        // Virtual clock: bytes served × vt_scale, where vt_scale = (product of all weights) /
        // own weight. Equal clocks mean byte counts in the ratio of the weights.
        uint64_t vtime = 0;
        // The clock before its latest commit: the start tag of the burst it sent last. A class
        // that falls idle is pulled up to the other's start tag, not its clock (SFQ's v(t)).
        uint64_t start_vtime = 0;
        uint64_t vt_scale = 1;
        uint32_t weight = 1;
        bool has_min = false;
        bool has_max = false;
        uint64_t granted = 0;    // by the last grant
        uint64_t used = 0;       // committed since the last grant
        bool satisfied = false;  // the last grant gave it all it could take
        bool held = false;       // held_back() since the last grant
        stats::counter bytes;
        stats::counter packets;
    };

    struct alignas(64) vnic_state {
        token_bucket bucket;
        std::array<class_state, class_count> cls;
        // How far behind (in its own bytes) a backlogged class may fall and still be caught up.
        uint64_t lag_bytes = 0;
        uint64_t rate_bps = 0;  // configured
        uint64_t burst_bytes = 0;
        uint64_t effective_rate_bps = 0;
        bool configured = false;
    };

    void sync_virtual_time(vnic_state& s, const std::array<bool, class_count>& eligible);
    void split_by_weight(vnic_state& s, burst_grant& g, std::array<uint64_t, class_count>& demand,
                         uint64_t avail);
    void rescale(uint64_t now_ns);

    token_bucket _uplink;
    uint64_t _uplink_rate_bps = 0;
    std::vector<vnic_state> _vnics;
};

}  // namespace jakiro::qos
