#pragma once
// DHTB on the sending side (docs/architecture.md §6), one per worker: the vNIC → {rdma, tcp}
// scheduler of qos/ driven once per poll iteration. A shaped vNIC's tenant frames (the tcp class:
// every non-RDMA frame) wait in a per-vNIC FIFO after routing and leave within the class's grant;
// a full FIFO tail-drops (counted). Full is measured in time of the vNIC's rate (20 ms of it,
// at least a burst and one largest super-frame: a 10 Mbit/s vNIC gains nothing from a longer
// queue but latency) and in frames (no more than the packet buffers the vNIC may hold,
// vnic_view::max_packet_buffers), so a vNIC that sends far beyond its rate holds neither
// seconds of its own traffic nor the buffers the other vNICs need. The RoCE engine's frames are the
// rdma class: they are never queued or dropped here, the engine asks admit_rdma() before building
// each packet (or each intra-host message) and simply waits while the grant is spent, so RC is
// paced, not lost. Unshaped vNICs pass straight through.
//
// Thread-safety: the owning worker only, except counters() (relaxed reads).

#include <rte_mbuf.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "dataplane/counters.hh"
#include "dataplane/tables.hh"
#include "qos/scheduler.hh"

namespace jakiro {

namespace rnic {
class engine;
}
struct worker_context;

// What the shaper must know of the RoCE engine's QPs, per vNIC slot (rnic/engine.hh answers;
// a test may stand in): how many bytes its next poll could send (0: nothing waits), and
// whether its last poll left sends for a reason that may last (a paced QP, a full port).
struct rdma_queues {
    std::function<uint64_t(uint16_t)> send_room;
    std::function<bool(uint16_t)> held_back;

    static rdma_queues of(const rnic::engine* engine);  // no engine: nothing ever waits
};

struct shaper_vnic_counters {
    counter tcp_queue_drops;   // frames tail-dropped: the tcp FIFO was full
    counter tcp_queue_holds;   // times its face was left unread: the tcp FIFO was full
    counter rdma_waits;        // times the engine found the rdma grant spent
    counter rdma_granted;      // bytes the scheduler granted the rdma class
    counter rdma_busy_grants;  // grants made while the engine had rdma work
    counter tcp_busy_grants;   // grants made while the tcp FIFO held frames
    counter grants;            // grants made: with the two above, how often each class had
                               // nothing to send (its share then went to the other)
};

class egress_shaper {
  public:
    static constexpr uint32_t tcp_queue_frames = 1024;  // the FIFO's room (at most)
    // How long a full tcp FIFO takes to leave at the vNIC's rate. TCP keeps the class
    // backlogged with far less on the test bed's sub-millisecond RTTs (test_qos); Linux tbf
    // setups commonly allow 50 ms.
    static constexpr uint64_t tcp_queue_ns = 20'000'000;

    // Bytes a shaped vNIC's tcp FIFO holds at most before tail drop: tcp_queue_ns of its rate,
    // but never less than a burst or one largest frame (an empty FIFO takes any frame).
    static uint64_t queue_byte_limit(const qos::vnic_qos& q);

    // `queue_limit` (<= tcp_queue_frames): frames a vNIC's tcp FIFO holds before tail drop.
    explicit egress_shaper(uint64_t now_ns, uint32_t queue_limit = tcp_queue_frames);
    ~egress_shaper();

    // Applies the QoS settings of a snapshot the first time it is seen: vNICs gain, change
    // or lose shaping live; frames already queued stay queued (or leave unshaped). Only the
    // vNICs `ctx` owns are shaped here: both their classes, as its engine runs their QPs.
    void sync(const datapath_tables& tables, worker_context& ctx, uint64_t now_ns);
    bool shaped(uint16_t slot) const { return slot < max_vnics && _vnics[slot] != nullptr; }

    // A restarted jakirod's shaper continues its predecessor's buckets (docs/restart.md):
    // `carry` before the worker runs, for a vNIC by its new slot and for the uplink; the next
    // sync that shapes the vNIC (the first, with the configuration the predecessor's state
    // was restored into) resumes them instead of starting full. What no sync shapes is dropped.
    void carry(uint16_t slot, const qos::vnic_bucket_states& b) { _carried[slot] = b; }
    void carry_uplink(const qos::token_bucket_state& b) { _carried_uplink = b; }

    // A routed frame of shaped vNIC `slot`'s tcp class, for tx port `port`, charged `bytes`
    // (qos::charged_bytes). False when the FIFO is full: the caller drops it.
    bool enqueue_tcp(uint16_t slot, uint16_t port, rte_mbuf* m, uint32_t bytes);

    // Once per iteration, before the engine polls: grants every shaped vNIC's classes, moves
    // tcp frames within their grant to the tx batches and sets the rdma budgets, each at most
    // what `rdma` says the engine's next poll can send.
    void run(worker_context& ctx, const rdma_queues& rdma, uint64_t now_ns);
    // The engine wants to send `bytes` (charged) for `slot`: true while its grant lasts (the
    // last packet may overshoot; the scheduler carries the debt).
    bool admit_rdma(uint16_t slot, uint32_t bytes);
    // Bytes `slot`'s rdma class put on the wire beyond what admit_rdma was asked for (the
    // padding that lets a QP's packets share a super-datagram, overlay/udp_gso.hh).
    void charge_rdma(uint16_t slot, uint32_t bytes);
    // After the engine polled: charges what it sent, and tells the scheduler of a grant it
    // left because a QP was held back (`rdma`: paced, port full).
    void commit_rdma(const rdma_queues& rdma);

    bool has_queued() const { return _queued_frames > 0; }
    // Backpressure, as a NIC's full transmit ring gives its driver: a shaped vNIC whose tcp
    // FIFO is full (no frame could join it) is not read, so what it sends beyond its rate and
    // queue is dropped by the kernel at its face, in the sender's time, not read, routed and
    // dropped by the worker; it is read again once the FIFO has drained to half (a full
    // burst's room, not a frame at a time). Both false for an unshaped vNIC.
    bool tcp_queue_full(uint16_t slot) const;
    bool tcp_queue_drained(uint16_t slot) const;
    void count_hold(uint16_t slot) { _counters[slot].tcp_queue_holds.add(1); }
    // Nanoseconds from `now_ns` until a vNIC with queued tcp frames can send again (its next
    // grant is due and its bucket holds tokens); 0 if one can now. Only meaningful while
    // has_queued(): the worker sleeps that long instead of spinning on a throttled queue.
    uint64_t ns_until_sendable(uint64_t now_ns) const;
    const qos::scheduler& scheduler() const { return *_sched; }
    const shaper_vnic_counters& counters(uint16_t slot) const { return _counters[slot]; }

  private:
    struct queued_frame {
        rte_mbuf* m;
        uint16_t port;
        uint32_t bytes;
    };
    struct vnic_state {
        std::array<queued_frame, tcp_queue_frames> fifo;
        uint32_t head = 0;
        uint32_t count = 0;
        uint64_t queued_bytes = 0;
        uint32_t frame_limit = 0;  // the FIFO's bounds for this vNIC (set by sync)
        uint64_t byte_limit = 0;
        int64_t rdma_budget = 0;
        uint64_t rdma_used = 0;
        uint32_t rdma_packets = 0;
        uint64_t rdma_reported = 0;  // backlog told to the scheduler
        uint64_t next_grant_ns = 0;
    };

    void flush_unshaped(uint16_t slot, worker_context& ctx);

    std::unique_ptr<qos::scheduler> _sched;
    const datapath_tables* _seen = nullptr;
    std::array<std::unique_ptr<vnic_state>, max_vnics> _vnics{};
    std::array<std::optional<qos::vnic_qos>, max_vnics> _config{};
    std::array<std::optional<qos::vnic_bucket_states>, max_vnics> _carried{};
    std::optional<qos::token_bucket_state> _carried_uplink;
    std::vector<uint16_t> _active;  // shaped slots
    std::array<shaper_vnic_counters, max_vnics> _counters{};
    uint64_t _queued_frames = 0;
    uint32_t _queue_limit;
};

}  // namespace jakiro
