#include "rnic/queues/srq_ring.hh"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rnic/queues/sealed_memfd.hh"

namespace jakiro::verbs {

namespace proto = verbs_proto;

int shared_receive_queue::create(uint32_t capacity, uint32_t handle, uint64_t owner, uint32_t pd,
                                 uint32_t max_sge, srq_event_sink events,
                                 std::shared_ptr<shared_receive_queue>& out, int& fd) {
    if (!proto::is_power_of_two(capacity)) {
        return EINVAL;
    }
    const std::size_t bytes = proto::srq_ring_bytes(capacity);
    sealed_memfd shared;
    if (const int error = create_sealed_memfd("jakiro-srq", bytes, shared); error != 0) {
        return error;
    }
    void* const base = shared.base;
    const int memfd = shared.fd;
    std::shared_ptr<shared_receive_queue> srq(new shared_receive_queue);
    srq->_header = static_cast<proto::srq_ring_header*>(base);
    srq->_bytes = bytes;
    srq->_capacity = capacity;
    srq->_handle = handle;
    srq->_owner = owner;
    srq->_pd = pd;
    srq->_max_sge = max_sge;
    srq->_events = events;
    // A fresh memfd reads as zeros; the identity is complete before the fd leaves.
    auto& h = *srq->_header;
    h.magic = proto::srq_ring_magic;
    h.version = proto::srq_ring_version;
    h.capacity = capacity;
    h.slot_size = proto::wqe_size;
    h.srq_handle = handle;
    out = std::move(srq);
    fd = memfd;
    return 0;
}

int shared_receive_queue::resume(int fd, const carried& c, srq_event_sink events,
                                 std::shared_ptr<shared_receive_queue>& out) {
    if (!proto::is_power_of_two(c.capacity) || c.limit > c.capacity) {
        return EINVAL;
    }
    const std::size_t bytes = proto::srq_ring_bytes(c.capacity);
    void* base = nullptr;
    if (const int error = map_sealed_memfd(fd, bytes, base); error != 0) {
        return error;
    }
    std::shared_ptr<shared_receive_queue> srq(new shared_receive_queue);
    srq->_header = static_cast<proto::srq_ring_header*>(base);
    srq->_bytes = bytes;
    srq->_capacity = c.capacity;
    srq->_handle = c.handle;
    srq->_owner = c.owner;
    srq->_pd = c.pd;
    srq->_max_sge = c.max_sge;
    srq->_events = events;
    srq->_taken = c.taken;
    srq->_broken = c.broken != 0;
    srq->_limit = c.limit;
    out = std::move(srq);
    return 0;
}

shared_receive_queue::~shared_receive_queue() {
    if (_leave_pages) {
        munmap(_header, _bytes);
    } else {
        release_sealed_mapping(_header, _bytes);
    }
}

void shared_receive_queue::raise(proto::event_type type) const {
    if (_events.raise != nullptr) {
        _events.raise(_events.context, _owner, static_cast<uint32_t>(type), _handle);
    }
}

uint32_t shared_receive_queue::posted() const {
    if (_broken) {
        return 0;
    }
    const uint32_t posted = proto::load_posted_acquire(_header->producer) - _taken;
    return posted <= _capacity ? posted : 0;
}

bool shared_receive_queue::take(proto::recv_wqe& out) {
    if (_broken) {
        return false;
    }
    // The shim may be at most one ring ahead of what we took (slots are free once taken);
    // anything further is a broken or hostile client: the SRQ reads as empty from now on.
    const uint32_t posted = proto::load_posted_acquire(_header->producer) - _taken;
    if (posted > _capacity) {
        _broken = true;
        raise(proto::event_type::srq_err);
        return false;
    }
    if (posted == 0) {
        return false;
    }
    std::memcpy(&out, &proto::srq_slots(_header)[_taken & (_capacity - 1)], sizeof(out));
    ++_taken;
    proto::retire_slots(_header->consumer, _taken);
    // Armed, and this take left fewer than the limit posted: tell the owner, once.
    uint32_t limit = _limit.load(std::memory_order_relaxed);
    if (limit != 0 && posted - 1 < limit &&
        _limit.compare_exchange_strong(limit, 0, std::memory_order_relaxed)) {
        raise(proto::event_type::srq_limit_reached);
    }
    return true;
}

}  // namespace jakiro::verbs
