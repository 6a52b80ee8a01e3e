#pragma once
// A QP's send and receive queues on jakirod's side: the memfd ring the shim posts work
// requests into (layout: verbs_abi/rings.hh). jakirod creates, sizes and seals it (so a
// client can neither shrink it under jakirod, which would SIGBUS the daemon, nor grow it),
// maps it, and hands it to the shim with the create_qp reply.
//
// The engine takes each WQE out exactly once, by copy (take_send / take_recv), so a client
// that rewrites a posted slot changes nothing jakirod acts on; it never trusts a producer
// index that runs more than a ring ahead of what it has *retired* (handed back to the shim),
// so the engine never holds more than `capacity` WQEs of a queue, whatever the client posts.
//
// Thread-safety: one engine thread at a time; create() on the control thread.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "rnic/queues/host_reserve.hh"
#include "verbs_abi/rings.hh"

namespace jakiro::verbs {

class qp_ring {
  public:
    // Capacities are powers of two. 0 or an errno; on 0, `fd` is the memfd for the shim
    // (the caller closes it once sent: the mapping keeps the memory).
    static int create(uint32_t sq_capacity, uint32_t rq_capacity, uint32_t qp_num,
                      std::unique_ptr<qp_ring>& out, int& fd);
    // A restarted jakirod: maps the ring in `fd`, a memfd its predecessor made with create()
    // and handed over, checked against the capacities the caller kept (never the header's: the
    // tenant writes that page). The WQEs and the shim's producer indices are in the memfd; the
    // engine's own indices (what it took and retired) start at zero until the QP that owns the
    // ring resumes them. 0 or an errno (EINVAL: not such a ring); the caller keeps `fd`.
    static int attach(int fd, uint32_t sq_capacity, uint32_t rq_capacity,
                      std::unique_ptr<qp_ring>& out);
    ~qp_ring();
    qp_ring(const qp_ring&) = delete;
    qp_ring& operator=(const qp_ring&) = delete;

    // WQEs posted and not yet taken; a producer index that makes no sense (more than a ring
    // ahead of what was retired, or behind what was taken) reads as `corrupt` (the engine
    // moves the QP to ERR).
    struct pending {
        uint32_t count = 0;
        bool corrupt = false;
    };
    pending send_pending() const {
        return pending_of(_header->sq_producer, _sq_taken, _sq_retired, _sq_cap);
    }
    pending recv_pending() const {
        return pending_of(_header->rq_producer, _rq_taken, _rq_retired, _rq_cap);
    }

    // Copies the next posted WQE out (callers check *_pending first).
    void take_send(verbs_proto::send_wqe& out);
    void take_recv(verbs_proto::recv_wqe& out);
    // Hands slots back to the shim: `count` more send (receive) WQEs are finished with.
    void retire_send(uint32_t count);
    void retire_recv(uint32_t count);
    // Taken but not retired: bounded by the capacity, so the engine's copies fit in arrays
    // of `capacity` entries indexed by (index & (capacity - 1)).
    uint32_t send_taken() const { return _sq_taken; }
    uint32_t send_retired() const { return _sq_retired; }
    uint32_t recv_taken() const { return _rq_taken; }
    uint32_t recv_retired() const { return _rq_retired; }
    // The engine's indices as its predecessor left them (the QP saves them: they are never read
    // back from shared memory). False, changing nothing, when they cannot be a ring's: more
    // taken than retired by over a ring, or retired past taken.
    bool resume(uint32_t sq_taken, uint32_t sq_retired, uint32_t rq_taken, uint32_t rq_retired);
    // The ring goes on in a successor that attached the same memfd: the destructor unmaps
    // jakirod's mapping without punching the pages out (release_sealed_mapping would hand the
    // tenant, and the successor, zeros).
    void leave_pages_to_successor() { _leave_pages = true; }
    // Forgets everything posted so far (modify to RESET): all of it counts as taken and retired.
    void discard_all();
    // The same for one queue (a flush that met a corrupt producer index).
    void discard_send();
    void discard_recv();

    void set_doorbell_wanted(verbs_proto::doorbell_want wanted) {
        verbs_proto::set_doorbell_wanted(*_header, wanted);
    }
    // Does its shim ring the doorbell for a parked QP (ring version 2 on)? A ring a predecessor
    // made for a shim of an older release (a live upgrade) does not: its QP is never parked.
    // Read once, at create or attach: the tenant writes the header afterwards.
    bool rings_doorbell() const { return _rings_doorbell; }

    uint32_t sq_capacity() const { return _sq_cap; }
    uint32_t rq_capacity() const { return _rq_cap; }
    std::size_t bytes() const { return _bytes; }
    verbs_proto::qp_ring_header* header() const { return _header; }

    // The mapping this ring holds, charged to its vNIC until the ring goes (whose destructor
    // gives its pages back: release_sealed_mapping).
    void hold(account_charge charge) { _charge = std::move(charge); }

  private:
    qp_ring() = default;
    static pending pending_of(const uint32_t& producer, uint32_t taken, uint32_t retired,
                              uint32_t capacity);

    verbs_proto::qp_ring_header* _header = nullptr;
    std::size_t _bytes = 0;
    uint32_t _sq_cap = 0;
    uint32_t _rq_cap = 0;
    uint32_t _sq_taken = 0;  // ours: never read back from shared memory
    uint32_t _sq_retired = 0;
    uint32_t _rq_taken = 0;
    uint32_t _rq_retired = 0;
    bool _leave_pages = false;
    bool _rings_doorbell = true;
    account_charge _charge;
};

}  // namespace jakiro::verbs
