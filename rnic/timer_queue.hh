#pragma once
// The QPs of one engine that wait for nothing but a timer of their own
// (queue_pair::waits_for_timer: WRs in flight, their ACK not in, the retransmit or RNR timer
// running). They are out of their vNIC's visit queue, so such a QP costs no visit and no unit while
// it waits, and come back to it when the timer is due (engine::poll), or earlier when a packet, a
// ring or a control call queues them (engine::queue_visit takes them out of here).
//
// A binary min-heap on the due time. Each QP is in it at most once and knows its place
// (queue_pair::turn_state::timer_at), so taking one out is O(log n) without a search; room for
// every QP of the engine is reserved when a QP is added, so nothing is allocated per packet or
// visit.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace jakiro::rnic {

class queue_pair;

class timer_queue {
  public:
    // turn_state::timer_at of a QP that is not here.
    static constexpr uint32_t not_queued = UINT32_MAX;

    // Room for `qps` QPs (control path: add_qp).
    void reserve(std::size_t qps) { _heap.reserve(qps); }
    // `qp`, not here yet, is due at `due_ns`.
    void schedule(queue_pair& qp, uint64_t due_ns);
    // Takes `qp` out, if it is here.
    void cancel(queue_pair& qp);
    // The QP due earliest, if it is due at `now_ns`, taken out; nullptr otherwise.
    queue_pair* pop_due(uint64_t now_ns);
    std::size_t size() const { return _heap.size(); }
    // When the earliest is due; UINT64_MAX when none waits.
    uint64_t next_due_ns() const;

  private:
    void place(std::size_t at, queue_pair* qp);
    void sift_up(std::size_t at);
    void sift_down(std::size_t at);
    uint64_t due_of(std::size_t at) const;

    std::vector<queue_pair*> _heap;
};

}  // namespace jakiro::rnic
