#pragma once
// A shared receive queue on jakirod's side: the memfd ring the shim posts receive WQEs into
// (layout: verbs_abi/rings.hh, "SRQ rings") and the limit event. jakirod creates, sizes and
// seals the memfd (a client can neither shrink it under jakirod's mapping nor grow it), maps
// it and hands it to the shim with the create_srq reply.
//
// The engine takes each WQE out exactly once, by copy, and frees its slot at once (the WQEs
// of an SRQ complete out of order on many QPs); it never trusts the producer index. The limit
// (ibv_modify_srq IBV_SRQ_LIMIT): once armed, the take that leaves fewer than `limit` WQEs
// posted raises IBV_EVENT_SRQ_LIMIT_REACHED and disarms, as rxe and mlx5 do (arming below the
// limit fires at the next take, not at once).
//
// Thread-safety: take() on the engine thread only (every QP of the host runs there); create(),
// arm_limit() and the accessors on any thread (the limit is an atomic the engine reads once
// per take). `users` is the resources table's, guarded by its mutex.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rnic/queues/host_reserve.hh"
#include "verbs_abi/protocol.hh"
#include "verbs_abi/rings.hh"

namespace jakiro::verbs {

// Who hears about an SRQ's events (the channel server; the same shape as rnic::qp_event_sink).
struct srq_event_sink {
    void (*raise)(void* context, uint64_t client, uint32_t type, uint32_t handle) = nullptr;
    void* context = nullptr;
};

class shared_receive_queue {
  public:
    // `capacity` a power of two. 0 or an errno; on 0, `fd` is the memfd for the shim (the
    // caller sends and closes it: the mapping keeps the memory).
    static int create(uint32_t capacity, uint32_t handle, uint64_t owner, uint32_t pd,
                      uint32_t max_sge, srq_event_sink events,
                      std::shared_ptr<shared_receive_queue>& out, int& fd);
    // What a successor needs besides the memfd (a state image, handover/).
    struct carried {
        uint32_t capacity = 0;
        uint32_t handle = 0;
        uint64_t owner = 0;
        uint32_t pd = 0;
        uint32_t max_sge = 0;
        uint32_t taken = 0;
        uint32_t limit = 0;
        uint8_t broken = 0;  // a byte, not a bool: an image's byte may be anything
    };
    carried carry() const {
        return {_capacity, _handle, _owner,        _pd,
                _max_sge,  _taken,  armed_limit(), static_cast<uint8_t>(_broken ? 1 : 0)};
    }
    // The SRQ a predecessor `carry()`d, mapped from its memfd `fd` (borrowed), checked against
    // what it carried (never the header's fields: the tenant writes that page). EINVAL when the
    // memfd is not a sealed ring of that capacity.
    static int resume(int fd, const carried& c, srq_event_sink events,
                      std::shared_ptr<shared_receive_queue>& out);
    // The ring goes on in a successor that mapped the same memfd: the destructor unmaps
    // jakirod's mapping without punching the pages out.
    void leave_pages_to_successor() { _leave_pages = true; }

    ~shared_receive_queue();
    shared_receive_queue(const shared_receive_queue&) = delete;
    shared_receive_queue& operator=(const shared_receive_queue&) = delete;

    // ---- engine thread
    // Copies the next posted WQE out and frees its slot; false when none is posted (or the
    // ring is broken: a producer more than a ring ahead, reported once as IBV_EVENT_SRQ_ERR).
    bool take(verbs_proto::recv_wqe& out);
    // Posted and not taken, as the engine last could tell (0 for a broken ring).
    uint32_t posted() const;

    // ---- any thread
    // IBV_SRQ_LIMIT: 0 disarms; callers check limit <= capacity.
    void arm_limit(uint32_t limit) { _limit.store(limit, std::memory_order_relaxed); }
    uint32_t armed_limit() const { return _limit.load(std::memory_order_relaxed); }

    uint32_t handle() const { return _handle; }
    uint64_t owner() const { return _owner; }
    uint32_t pd() const { return _pd; }
    uint32_t capacity() const { return _capacity; }
    uint32_t max_sge() const { return _max_sge; }
    std::size_t bytes() const { return _bytes; }
    verbs_proto::srq_ring_header* header() const { return _header; }

    uint32_t users = 0;  // QPs attached (destroy answers EBUSY); the resources table's

    // The mapping this ring holds, charged to its vNIC until the ring goes (whose destructor
    // gives its pages back: release_sealed_mapping).
    void hold(account_charge charge) { _charge = std::move(charge); }

  private:
    shared_receive_queue() = default;
    void raise(verbs_proto::event_type type) const;

    verbs_proto::srq_ring_header* _header = nullptr;
    std::size_t _bytes = 0;
    uint32_t _capacity = 0;
    uint32_t _handle = 0;
    uint64_t _owner = 0;
    uint32_t _pd = 0;
    uint32_t _max_sge = 0;
    srq_event_sink _events;
    uint32_t _taken = 0;  // engine thread; never read back from shared memory
    bool _broken = false;
    std::atomic<uint32_t> _limit{0};
    account_charge _charge;
    bool _leave_pages = false;
};

}  // namespace jakiro::verbs
