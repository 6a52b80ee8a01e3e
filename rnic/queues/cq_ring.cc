#include "rnic/queues/cq_ring.hh"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "rnic/queues/sealed_memfd.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::verbs {

namespace proto = verbs_proto;

int cq_ring::create(uint32_t capacity, std::unique_ptr<cq_ring>& out, int& fd) {
    if (!proto::is_power_of_two(capacity)) {
        return EINVAL;
    }
    const std::size_t bytes = proto::cq_ring_bytes(capacity);
    sealed_memfd shared;
    if (const int error = create_sealed_memfd("jakiro-cq", bytes, shared); error != 0) {
        return error;
    }
    void* const base = shared.base;
    const int memfd = shared.fd;
    std::unique_ptr<cq_ring> ring(new cq_ring);
    ring->_header = static_cast<proto::cq_ring_header*>(base);
    ring->_bytes = bytes;
    ring->_capacity = capacity;
    // A fresh memfd reads as zeros: indices, arm and overflow start at 0. The identity is
    // written before the fd leaves this process, so the shim sees it complete.
    ring->_header->magic = proto::cq_ring_magic;
    ring->_header->version = proto::cq_ring_version;
    ring->_header->capacity = capacity;
    ring->_header->slot_size = sizeof(proto::cqe);
    out = std::move(ring);
    fd = memfd;
    return 0;
}

int cq_ring::resume(int fd, const carried& c, std::unique_ptr<cq_ring>& out) {
    if (!proto::is_power_of_two(c.capacity)) {
        return EINVAL;
    }
    const std::size_t bytes = proto::cq_ring_bytes(c.capacity);
    void* base = nullptr;
    if (const int error = map_sealed_memfd(fd, bytes, base); error != 0) {
        return error;
    }
    std::unique_ptr<cq_ring> ring(new cq_ring);
    ring->_header = static_cast<proto::cq_ring_header*>(base);
    ring->_bytes = bytes;
    ring->_capacity = c.capacity;
    ring->_producer = c.producer;
    ring->_consumer_seen = c.consumer_seen;
    ring->_pushed = c.pushed;
    if (c.producer - c.consumer_seen > c.capacity) {
        ring->_leave_pages = true;  // the tenant's ring: a failure never punches it
        return EINVAL;
    }
    out = std::move(ring);
    return 0;
}

cq_ring::~cq_ring() {
    if (_leave_pages) {
        munmap(_header, _bytes);
    } else {
        release_sealed_mapping(_header, _bytes);
    }
}

void cq_ring::retire() {
    // Whole pages past the header's: the first page keeps the header (and the arm).
    const std::size_t kept =
        (proto::cq_slots_offset + proto::ring_page - 1) / proto::ring_page * proto::ring_page;
    if (_bytes > kept) {
        give_back_pages(reinterpret_cast<std::byte*>(_header) + kept, _bytes - kept);
    }
}

bool cq_ring::push(const proto::cqe& completion) {
    const uint32_t consumer = proto::load_consumer_acquire(*_header);
    // Unsigned distance: a consumer index "ahead" of the producer (a confused or hostile
    // client) is a huge distance, i.e. full, so nothing unread is ever overwritten.
    if (_producer - consumer >= _capacity) {
        proto::mark_overflow(*_header);
        return false;
    }
    _consumer_seen = consumer;
    proto::cq_slots(_header)[_producer & (_capacity - 1)] = completion;
    ++_producer;
    proto::publish_producer(*_header, _producer);
    _pushed.fetch_add(1, std::memory_order_relaxed);
    return true;
}

int cq_ring::begin_take_over(const cq_ring& old, cq_take_over& plan) {
    const uint32_t consumer = proto::load_consumer_acquire(*old._header);
    // Unsigned distances from the last consumer index seen: one that went back, or is ahead of
    // the producer, is further away than the producer is.
    const uint32_t unread_seen = old._producer - old._consumer_seen;
    if (consumer - old._consumer_seen > unread_seen || _producer != 0) {
        return EINVAL;
    }
    const uint32_t outstanding = old._producer - consumer;
    if (outstanding > old._capacity || outstanding > _capacity) {
        return EINVAL;
    }
    plan = {consumer, outstanding};
    _producer = outstanding;
    _consumer_seen = 0;
    proto::publish_producer(*_header, _producer);
    if (old.overflowed()) {
        proto::mark_overflow(*_header);  // a CQ in error stays in error
    }
    // An arm the application set stays set (it asked for the next completion, whichever ring
    // that lands in).
    proto::fence_before_checking_arm();
    const uint32_t arm = proto::shared_index(old._header->arm).load(std::memory_order_acquire) &
                         (proto::arm_next | proto::arm_solicited);
    if (arm != 0) {
        proto::arm_and_fence(*_header, arm);
    }
    _pushed.store(old._pushed.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return 0;
}

void cq_ring::finish_take_over(const cq_ring& old, const cq_take_over& plan) {
    const proto::cqe* from = proto::cq_slots(old._header);
    proto::cqe* to = proto::cq_slots(_header);
    // Two runs at most (the old ring may wrap), each one copy.
    const uint32_t start = plan.first & (old._capacity - 1);
    const uint32_t first_run = std::min(plan.count, old._capacity - start);
    std::memcpy(to, from + start, std::size_t{first_run} * sizeof(proto::cqe));
    std::memcpy(to + first_run, from, std::size_t{plan.count - first_run} * sizeof(proto::cqe));
}

int cq_ring::take_over(const cq_ring& old, uint32_t& moved) {
    cq_take_over plan;
    if (const int error = begin_take_over(old, plan); error != 0) {
        return error;
    }
    finish_take_over(old, plan);
    moved = plan.count;
    return 0;
}

bool cq_ring::take_arm_after_push(bool solicited) {
    proto::fence_before_checking_arm();
    return proto::take_arm(*_header, solicited);
}

completion_queue::completion_queue(std::unique_ptr<cq_ring> ring, uint32_t handle, uint64_t owner,
                                   int channel_fd, cq_error_sink sink, bool timestamps)
    : _ring(std::move(ring)),
      _handle(handle),
      _owner(owner),
      _channel_fd(channel_fd),
      _sink(sink),
      _timestamps(timestamps) {}

void completion_queue::leave_pages_to_successor() {
    _ring->leave_pages_to_successor();
    if (_retired != nullptr) {
        _retired->leave_pages_to_successor();
    }
}

completion_queue::~completion_queue() {
    if (_channel_fd >= 0) {
        close(_channel_fd);
    }
}

namespace {

uint64_t clock_ns(clockid_t clock) {
    timespec ts{};
    clock_gettime(clock, &ts);  // the vDSO: no system call on the engine's path
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

bool completion_queue::complete(const proto::cqe& given) {
    proto::cqe completion = given;
    if (_timestamps) {
        completion.completion_ts = clock_ns(CLOCK_MONOTONIC);
        completion.wallclock_ns = clock_ns(CLOCK_REALTIME);
    }
    if (!_ring->push(completion)) {
        if (!_error_raised.exchange(true, std::memory_order_relaxed) && _sink.raise != nullptr) {
            _sink.raise(_sink.context, _owner, _handle);
        }
        return false;
    }
    if (_channel_fd >= 0 && _ring->take_arm_after_push(completion.solicited != 0)) {
        notify();
    }
    if (_ring->wake_napping_poller()) {
        ++_poller_wakes;
    }
    return true;
}

int completion_queue::replace_ring(std::unique_ptr<cq_ring>& ring, cq_take_over& plan) {
    if (const int error = ring->begin_take_over(*_ring, plan); error != 0) {
        return error;
    }
    std::swap(_ring, ring);
    return 0;
}

void completion_queue::retire(std::unique_ptr<cq_ring> old) {
    old->retire();
    _retired = std::move(old);  // the one before goes now, every page of it
}

void completion_queue::notify() {
    auto m = proto::make_message<proto::comp_event_message>(
        static_cast<uint16_t>(proto::opcode::comp_event), 0);
    m.cq_handle = _handle;
    // Never block on an application that does not read its channel, never die of SIGPIPE
    // for one that closed it.
    if (send(_channel_fd, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL) ==
        static_cast<ssize_t>(sizeof(m))) {
        _notified.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    // The channel is full (hundreds of unread events) or gone: keep the CQ armed so the next
    // completion tries again, rather than leave the application asleep for good.
    _lost.fetch_add(1, std::memory_order_relaxed);
    proto::arm_and_fence(*_ring->header(), proto::arm_next);
}

}  // namespace jakiro::verbs
