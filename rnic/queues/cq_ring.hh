#pragma once
// Completion queues on jakirod's side. A CQ ring lives in a memfd jakirod creates and seals
// (so a client can neither shrink it under jakirod, which would SIGBUS the daemon, nor grow
// it), maps, and hands to the shim, which polls it (layout: verbs_abi/rings.hh).
//
//  cq_ring           the producer end: push() one completion, or refuse when full
//  completion_queue  a verbs CQ: its ring, its completion channel, its owner; complete() is
//                    what the engine calls for every work completion
//
// Thread-safety: push()/complete() from one thread at a time, the engine thread that owns
// the CQ; everything else (creation, destruction, counters) from the control thread.
// produced(), overflowed() and the ring's shared header may be read from anywhere.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rnic/queues/host_reserve.hh"
#include "verbs_abi/rings.hh"

namespace jakiro::verbs {

// ibv_resize_cq in two steps (cq_ring::begin_take_over, finish_take_over): which completions of
// the old ring move to the new one's first slots.
struct cq_take_over {
    uint32_t first = 0;  // the old ring's consumer index when the engine switched rings
    uint32_t count = 0;  // completions that move
};

class cq_ring {
  public:
    // A ring of `capacity` slots (a power of two) in a new sealed memfd, mapped here. 0 or an
    // errno; on 0, `out` is the ring and `fd` the memfd for the shim (the caller closes it
    // once sent: the mapping keeps the memory).
    static int create(uint32_t capacity, std::unique_ptr<cq_ring>& out, int& fd);

    // What a successor needs besides the memfd to go on producing into the same ring (a state
    // image, handover/): the indices only jakirod keeps.
    struct carried {
        uint32_t capacity = 0;
        uint32_t producer = 0;
        uint32_t consumer_seen = 0;
        uint64_t pushed = 0;
    };
    carried carry() const { return {_capacity, _producer, _consumer_seen, produced()}; }
    // The ring a predecessor `carry()`d, mapped from its memfd `fd` (borrowed), checked against
    // what it carried (never the header's fields: the tenant writes that page). EINVAL when the
    // memfd is not a sealed ring of that capacity.
    static int resume(int fd, const carried& c, std::unique_ptr<cq_ring>& out);
    // The ring goes on in a successor that mapped the same memfd: the destructor unmaps
    // jakirod's mapping without punching the pages out.
    void leave_pages_to_successor() { _leave_pages = true; }

    ~cq_ring();
    cq_ring(const cq_ring&) = delete;
    cq_ring& operator=(const cq_ring&) = delete;

    // Writes one completion and publishes it. When the consumer has not freed a slot (or its
    // index makes no sense) nothing is written: the ring's overflow flag is set and push
    // returns false. A full CQ is an error of the CQ, never memory corruption.
    bool push(const verbs_proto::cqe& completion);

    // After a successful push: whether the CQ was armed for this completion (next, or
    // solicited and the completion is); if so the arm is consumed and the caller notifies
    // the completion channel.
    bool take_arm_after_push(bool solicited);

    // After a successful push: wakes a poller napping on the empty ring
    // (verbs_proto::nap_until_completion), so that a program that polls sees the completion now
    // and not at the end of its nap.
    // True if it woke one (a system call).
    bool wake_napping_poller() { return verbs_proto::wake_napping_poller(*_header); }

    // ibv_resize_cq: this fresh ring takes over `old`'s unconsumed completions (moved to its
    // first slots, in order), its arm and overflow state and its count. EINVAL, with nothing
    // changed, when they do not fit or `old`'s consumer index makes no sense: ahead of the
    // producer, or behind where jakirod last saw it (a consumer index never goes back; one set
    // back, e.g. a whole ring behind, would make jakirod copy completions the client had read
    // or that were never written). So what moves is bounded by completions the client really
    // has unread.
    //
    // Two steps, so that the work proportional to the ring's size never runs on the engine:
    //   begin_take_over   on the thread that pushes (nothing is pushed into either ring
    //                     meanwhile): checks, reserves the first `plan.count` slots, carries the
    //                     arm, error state and count over. O(1). The engine then pushes into
    //                     this ring, behind the reserved slots.
    //   finish_take_over  on any one thread, after begin, before the ring is handed to the
    //                     client: copies the reserved completions from `old`, which nothing
    //                     writes any more (the client reads its new ring only once it has it).
    // take_over() runs both at once (no engine).
    int begin_take_over(const cq_ring& old, cq_take_over& plan);
    void finish_take_over(const cq_ring& old, const cq_take_over& plan);
    int take_over(const cq_ring& old, uint32_t& moved);

    // A ring replaced by ibv_resize_cq: its slots' pages go back to the host now (nothing reads
    // them: the client polls its new ring), the header page stays until the ring is destroyed,
    // because the client still reads the old ring's arm once after the resize (verbs_shim/cq.cc
    // carries an arm another thread set during it). The destructor gives back every page.
    void retire();
    // The mapping this ring holds, charged to its vNIC until the ring goes.
    void hold(account_charge charge) { _charge = std::move(charge); }

    uint32_t capacity() const { return _capacity; }
    uint64_t produced() const { return _pushed.load(std::memory_order_relaxed); }
    bool overflowed() const { return verbs_proto::overflowed(*_header); }
    std::size_t bytes() const { return _bytes; }
    verbs_proto::cq_ring_header* header() const { return _header; }

  private:
    cq_ring() = default;

    verbs_proto::cq_ring_header* _header = nullptr;  // our mapping of the memfd
    std::size_t _bytes = 0;
    uint32_t _capacity = 0;
    uint32_t _producer = 0;  // ours: never read back from shared memory
    // The consumer index as push() last read it, sane (not ahead, not a ring behind): the
    // client's consumer index may only be at or past it. Engine thread.
    uint32_t _consumer_seen = 0;
    std::atomic<uint64_t> _pushed{0};
    account_charge _charge;
    bool _leave_pages = false;
};

// Who hears that a CQ overflowed: the channel server, which tells the owning client
// (IBV_EVENT_CQ_ERR on its async channel). Called from the thread that hit the overflow;
// the callee must only queue the event.
struct cq_error_sink {
    void (*raise)(void* context, uint64_t client, uint32_t cq_handle) = nullptr;
    void* context = nullptr;
};

class completion_queue {
  public:
    // Takes ownership of `channel_fd` (-1: no completion channel).
    // `timestamps`: every completion gets completion_ts and wallclock_ns (cq_with_timestamps).
    completion_queue(std::unique_ptr<cq_ring> ring, uint32_t handle, uint64_t owner, int channel_fd,
                     cq_error_sink sink, bool timestamps = false);
    ~completion_queue();
    completion_queue(const completion_queue&) = delete;
    completion_queue& operator=(const completion_queue&) = delete;

    // One work completion: pushed to the ring, then, if the CQ was armed for it, announced on
    // the completion channel. False when the ring was full: the completion is dropped and the
    // owner gets IBV_EVENT_CQ_ERR (once per CQ); the engine moves the QPs to the error state.
    bool complete(const verbs_proto::cqe& completion);
    // The futex wakes complete() made for a poller napping on the empty ring: a system call of
    // the engine's each, which a program keeping the napping word set could ask for at every
    // completion. The engine charges them to the vNIC (queue_pair_stats::poller_wakes).
    uint64_t poller_wakes() const { return _poller_wakes; }

    // ibv_resize_cq, on the thread that calls complete() (the engine's, through
    // engine::call): `ring` begins to take over the unconsumed completions (begin_take_over)
    // and replaces this CQ's ring; on 0 `ring` holds the old one, and the caller finishes the
    // take-over (finish_take_over into the new ring, off the engine) before it hands the new
    // ring to the client, then retires the old one (retire). On an error nothing changed.
    int replace_ring(std::unique_ptr<cq_ring>& ring, cq_take_over& plan);
    // Control thread: the ring replace_ring() took out, kept (header page only) until the next
    // resize or the CQ's end, when the previous one goes; see cq_ring::retire.
    void retire(std::unique_ptr<cq_ring> old);
    // A successor produces into the rings from now on (cq_ring::leave_pages_to_successor).
    void leave_pages_to_successor();
    // A state image's counts and the error already raised, in a successor.
    int channel_fd() const { return _channel_fd; }
    bool error_raised() const { return _error_raised.load(std::memory_order_relaxed); }
    void resume_counts(bool error_raised, uint64_t notified, uint64_t lost) {
        _error_raised = error_raised;
        _notified = notified;
        _lost = lost;
    }
    // The completion channel's descriptor, charged to the vNIC while the CQ holds it.
    void hold_channel(account_charge charge) { _channel_charge = std::move(charge); }

    cq_ring& ring() { return *_ring; }
    uint32_t handle() const { return _handle; }
    uint64_t owner() const { return _owner; }
    bool has_channel() const { return _channel_fd >= 0; }
    bool timestamps() const { return _timestamps; }
    uint64_t notifications() const { return _notified.load(std::memory_order_relaxed); }
    uint64_t lost_notifications() const { return _lost.load(std::memory_order_relaxed); }

    // QPs that complete into this CQ (control thread): destroy_cq answers EBUSY while any do.
    uint32_t users = 0;

  private:
    void notify();

    std::unique_ptr<cq_ring> _ring;
    uint32_t _handle;
    uint64_t _owner;
    int _channel_fd;
    cq_error_sink _sink;
    bool _timestamps;
    std::atomic<bool> _error_raised{false};
    uint64_t _poller_wakes = 0;  // engine thread
    std::atomic<uint64_t> _notified{0};
    std::atomic<uint64_t> _lost{0};
    std::unique_ptr<cq_ring> _retired;  // control thread
    account_charge _channel_charge;
};

// The smallest power of two >= n (1 for 0), for ring capacities.
constexpr uint32_t ring_capacity_for(uint32_t n) {
    uint32_t c = 1;
    while (c < n && c < (1u << 31)) {
        c <<= 1;
    }
    return c;
}

}  // namespace jakiro::verbs
