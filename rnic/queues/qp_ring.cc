#include "rnic/queues/qp_ring.hh"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rnic/queues/sealed_memfd.hh"

namespace jakiro::verbs {

namespace proto = verbs_proto;

int qp_ring::create(uint32_t sq_capacity, uint32_t rq_capacity, uint32_t qp_num,
                    std::unique_ptr<qp_ring>& out, int& fd) {
    if (!proto::is_power_of_two(sq_capacity) || !proto::is_power_of_two(rq_capacity)) {
        return EINVAL;
    }
    const std::size_t bytes = proto::qp_ring_bytes(sq_capacity, rq_capacity);
    sealed_memfd shared;
    if (const int error = create_sealed_memfd("jakiro-qp", bytes, shared); error != 0) {
        return error;
    }
    void* const base = shared.base;
    const int memfd = shared.fd;
    std::unique_ptr<qp_ring> ring(new qp_ring);
    ring->_header = static_cast<proto::qp_ring_header*>(base);
    ring->_bytes = bytes;
    ring->_sq_cap = sq_capacity;
    ring->_rq_cap = rq_capacity;
    // A fresh memfd reads as zeros; the identity is complete before the fd leaves.
    auto& h = *ring->_header;
    h.magic = proto::qp_ring_magic;
    h.version = proto::qp_ring_version;
    h.sq_capacity = sq_capacity;
    h.rq_capacity = rq_capacity;
    h.slot_size = proto::wqe_size;
    h.sq_offset = sizeof(proto::qp_ring_header);
    h.rq_offset = static_cast<uint32_t>(sizeof(proto::qp_ring_header) +
                                        std::size_t{sq_capacity} * proto::wqe_size);
    h.qp_num = qp_num;
    out = std::move(ring);
    fd = memfd;
    return 0;
}

int qp_ring::attach(int fd, uint32_t sq_capacity, uint32_t rq_capacity,
                    std::unique_ptr<qp_ring>& out) {
    if (!proto::is_power_of_two(sq_capacity) || !proto::is_power_of_two(rq_capacity)) {
        return EINVAL;
    }
    const std::size_t bytes = proto::qp_ring_bytes(sq_capacity, rq_capacity);
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        return errno;
    }
    // Exactly the size create() made, and sealed against shrinking: a shorter file would turn
    // an access into SIGBUS, and only the seal keeps it from becoming one later.
    const int seals = fcntl(fd, F_GET_SEALS);
    if (static_cast<std::size_t>(st.st_size) != bytes || seals < 0 ||
        (seals & F_SEAL_SHRINK) == 0) {
        return EINVAL;
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        return errno;
    }
    std::unique_ptr<qp_ring> ring(new qp_ring);
    ring->_header = static_cast<proto::qp_ring_header*>(base);
    ring->_bytes = bytes;
    ring->_sq_cap = sq_capacity;
    ring->_rq_cap = rq_capacity;
    ring->_rings_doorbell = ring->_header->version >= 2;
    out = std::move(ring);
    return 0;
}

bool qp_ring::resume(uint32_t sq_taken, uint32_t sq_retired, uint32_t rq_taken,
                     uint32_t rq_retired) {
    if (sq_taken - sq_retired > _sq_cap || rq_taken - rq_retired > _rq_cap) {
        return false;
    }
    _sq_taken = sq_taken;
    _sq_retired = sq_retired;
    _rq_taken = rq_taken;
    _rq_retired = rq_retired;
    return true;
}

qp_ring::~qp_ring() {
    if (_leave_pages) {
        munmap(_header, _bytes);
        return;
    }
    release_sealed_mapping(_header, _bytes);
}

qp_ring::pending qp_ring::pending_of(const uint32_t& producer, uint32_t taken, uint32_t retired,
                                     uint32_t capacity) {
    // Unsigned distances. The shim may post into slots jakirod has retired, so it may be at
    // most one ring ahead of what we *retired*; measured from what we took, a client could run
    // ahead forever while the oldest WR never completes. A producer behind what we took went
    // backwards. Either is a broken or hostile client.
    const uint32_t posted_at = proto::load_posted_acquire(producer);
    const uint32_t unretired = posted_at - retired;
    const uint32_t untaken = posted_at - taken;
    if (unretired > capacity || untaken > unretired) {
        return {0, true};
    }
    return {untaken, false};
}

void qp_ring::take_send(proto::send_wqe& out) {
    std::memcpy(&out, &proto::sq_slots(_header)[_sq_taken & (_sq_cap - 1)], sizeof(out));
    ++_sq_taken;
}

void qp_ring::take_recv(proto::recv_wqe& out) {
    std::memcpy(&out, &proto::rq_slots(_header, _sq_cap)[_rq_taken & (_rq_cap - 1)], sizeof(out));
    ++_rq_taken;
}

void qp_ring::retire_send(uint32_t count) {
    _sq_retired += count;
    proto::retire_slots(_header->sq_consumer, _sq_retired);
}

void qp_ring::retire_recv(uint32_t count) {
    _rq_retired += count;
    proto::retire_slots(_header->rq_consumer, _rq_retired);
}

void qp_ring::discard_all() {
    discard_send();
    discard_recv();
}

void qp_ring::discard_send() {
    _sq_taken = proto::load_posted_acquire(_header->sq_producer);
    _sq_retired = _sq_taken;
    proto::retire_slots(_header->sq_consumer, _sq_retired);
}

void qp_ring::discard_recv() {
    _rq_taken = proto::load_posted_acquire(_header->rq_producer);
    _rq_retired = _rq_taken;
    proto::retire_slots(_header->rq_consumer, _rq_retired);
}

}  // namespace jakiro::verbs
