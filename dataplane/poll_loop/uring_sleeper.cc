#include "dataplane/poll_loop/uring_sleeper.hh"

#include <linux/io_uring.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

namespace jakiro {

namespace {

// Linux 6.7's opcode; Debian 12's headers (6.1) stop before it.
constexpr uint8_t op_futex_waitv = 53;
// Queued at once at most: a poll, a futex wait, a cancel of an older one. The completion ring
// is twice as long, and every wait reaps it whole.
constexpr unsigned ring_entries = 8;

constexpr uint64_t cancel_tag = 1;  // a wait's or a poll's own tag is never 1 (_tags)

template <typename T>
T* at(void* base, uint32_t offset) {
    return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

uint32_t load_acquire(const uint32_t* p) {
    return std::atomic_ref<const uint32_t>(*p).load(std::memory_order_acquire);
}
void store_release(uint32_t* p, uint32_t v) {
    std::atomic_ref<uint32_t>(*p).store(v, std::memory_order_release);
}

uint64_t monotonic_ns() {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(t.tv_nsec);
}

int enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags, void* arg,
          std::size_t arg_size) {
    return static_cast<int>(
        syscall(SYS_io_uring_enter, fd, to_submit, min_complete, flags, arg, arg_size));
}

}  // namespace

struct uring_sleeper::ring {
    int fd = -1;
    void* sq_map = MAP_FAILED;
    std::size_t sq_map_size = 0;
    void* cq_map = MAP_FAILED;
    std::size_t cq_map_size = 0;
    io_uring_sqe* sqes = static_cast<io_uring_sqe*>(MAP_FAILED);
    std::size_t sqes_size = 0;
    uint32_t* sq_tail = nullptr;
    uint32_t* sq_array = nullptr;
    uint32_t sq_mask = 0;
    uint32_t* cq_head = nullptr;
    uint32_t* cq_tail = nullptr;
    uint32_t cq_mask = 0;
    io_uring_cqe* cqes = nullptr;
    unsigned unpublished = 0;  // entries written after the tail
    unsigned unsubmitted = 0;  // published entries the kernel has not taken yet

    ~ring() {
        if (sqes != MAP_FAILED) {
            munmap(sqes, sqes_size);
        }
        if (cq_map != MAP_FAILED && cq_map != sq_map) {
            munmap(cq_map, cq_map_size);
        }
        if (sq_map != MAP_FAILED) {
            munmap(sq_map, sq_map_size);
        }
        if (fd >= 0) {
            close(fd);  // cancels whatever is still queued
        }
    }

    // A zeroed entry at the tail, submitted by the next enter().
    io_uring_sqe& next() {
        const uint32_t tail = *sq_tail + unpublished;
        const uint32_t index = tail & sq_mask;
        sq_array[index] = index;
        io_uring_sqe& sqe = sqes[index];
        std::memset(&sqe, 0, sizeof(sqe));
        ++unpublished;
        return sqe;
    }

    void publish() {
        store_release(sq_tail, *sq_tail + unpublished);
        unsubmitted += unpublished;
        unpublished = 0;
    }
};

std::unique_ptr<uring_sleeper> uring_sleeper::open() {
    auto r = std::make_unique<ring>();
    io_uring_params params{};
    r->fd = static_cast<int>(syscall(SYS_io_uring_setup, ring_entries, &params));
    if (r->fd < 0) {
        return nullptr;  // ENOSYS, EPERM (io_uring_disabled, seccomp), ENOMEM
    }
    if ((params.features & IORING_FEAT_EXT_ARG) == 0 ||
        (params.features & IORING_FEAT_SINGLE_MMAP) == 0) {
        return nullptr;  // older than 5.11: no FUTEX_WAITV either
    }
    // Is FUTEX_WAITV there (6.7+)?
    std::vector<char> probe_memory(sizeof(io_uring_probe) + 256 * sizeof(io_uring_probe_op));
    auto* probe = reinterpret_cast<io_uring_probe*>(probe_memory.data());
    if (syscall(SYS_io_uring_register, r->fd, IORING_REGISTER_PROBE, probe, 256) < 0 ||
        probe->last_op < op_futex_waitv ||
        (probe->ops[op_futex_waitv].flags & IO_URING_OP_SUPPORTED) == 0) {
        return nullptr;
    }
    r->sq_map_size = std::max(params.sq_off.array + params.sq_entries * sizeof(uint32_t),
                              params.cq_off.cqes + params.cq_entries * sizeof(io_uring_cqe));
    r->sq_map = mmap(nullptr, r->sq_map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                     r->fd, IORING_OFF_SQ_RING);
    if (r->sq_map == MAP_FAILED) {
        return nullptr;
    }
    r->cq_map = r->sq_map;
    r->cq_map_size = r->sq_map_size;
    r->sqes_size = params.sq_entries * sizeof(io_uring_sqe);
    r->sqes = static_cast<io_uring_sqe*>(mmap(nullptr, r->sqes_size, PROT_READ | PROT_WRITE,
                                              MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES));
    if (r->sqes == MAP_FAILED) {
        return nullptr;
    }
    r->sq_tail = at<uint32_t>(r->sq_map, params.sq_off.tail);
    r->sq_array = at<uint32_t>(r->sq_map, params.sq_off.array);
    r->sq_mask = *at<uint32_t>(r->sq_map, params.sq_off.ring_mask);
    r->cq_head = at<uint32_t>(r->cq_map, params.cq_off.head);
    r->cq_tail = at<uint32_t>(r->cq_map, params.cq_off.tail);
    r->cq_mask = *at<uint32_t>(r->cq_map, params.cq_off.ring_mask);
    r->cqes = at<io_uring_cqe>(r->cq_map, params.cq_off.cqes);
    return std::unique_ptr<uring_sleeper>(new uring_sleeper(std::move(r)));
}

uring_sleeper::uring_sleeper(std::unique_ptr<ring> r) : _ring(std::move(r)) {}

uring_sleeper::~uring_sleeper() = default;

void uring_sleeper::reap(woken& w) {
    ring& r = *_ring;
    uint32_t head = *r.cq_head;
    const uint32_t tail = load_acquire(r.cq_tail);
    for (; head != tail; ++head) {
        const io_uring_cqe& cqe = r.cqes[head & r.cq_mask];
        if (_polled_fd >= 0 && cqe.user_data == _poll_tag) {
            if (cqe.res < 0) {
                _failed_poll_fd = _polled_fd;  // polled again only once the descriptor changes
            } else {
                w.frames = true;
            }
            _polled_fd = -1;
        } else if (_futex_queued && cqe.user_data == _futex_tag) {
            _futex_queued = false;
            // Woken (the index of the futex), or a count had moved when it was set up.
            w.doorbell |= cqe.res >= 0 || cqe.res == -EAGAIN;
        }
        // Otherwise a cancel, or a wait or poll it cancelled: nothing to learn.
    }
    store_release(r.cq_head, head);
}

uring_sleeper::woken uring_sleeper::sleep(int frames_fd, std::span<const futex_waitv> waiters,
                                          uint64_t generation, uint64_t us) {
    ring& r = *_ring;
    // What completed since the last sleep, while the worker was awake: it may already have
    // done that work, so the completion ends nothing. The wait or poll is set up again
    // instead, and that tells the truth now: the poll is level-triggered, and the futex wait
    // compares the counts the caller noted before its last look.
    woken stale;
    reap(stale);
    if (_futex_queued && (_futex_generation != generation || waiters.empty())) {
        io_uring_sqe& cancel = r.next();
        cancel.opcode = IORING_OP_ASYNC_CANCEL;
        cancel.fd = -1;
        cancel.addr = _futex_tag;
        cancel.user_data = cancel_tag;
        _futex_queued = false;
    }
    if (!_futex_queued && !waiters.empty()) {
        io_uring_sqe& wait = r.next();
        wait.opcode = op_futex_waitv;
        wait.addr = reinterpret_cast<uintptr_t>(waiters.data());
        wait.len = static_cast<uint32_t>(waiters.size());
        wait.user_data = _futex_tag = ++_tags;
        _futex_queued = true;
        _futex_generation = generation;
    }
    if (_polled_fd >= 0 && _polled_fd != frames_fd) {
        io_uring_sqe& cancel = r.next();
        cancel.opcode = IORING_OP_POLL_REMOVE;
        cancel.fd = -1;
        cancel.addr = _poll_tag;
        cancel.user_data = cancel_tag;
        _polled_fd = -1;
    }
    if (_failed_poll_fd != frames_fd) {
        _failed_poll_fd = -1;
    }
    if (_polled_fd < 0 && frames_fd >= 0 && frames_fd != _failed_poll_fd) {
        io_uring_sqe& poll = r.next();
        poll.opcode = IORING_OP_POLL_ADD;
        poll.fd = frames_fd;
        poll.poll32_events = POLLIN;
        poll.user_data = _poll_tag = ++_tags;
        _polled_fd = frames_fd;
    }
    woken w;
    r.publish();

    const uint64_t deadline = monotonic_ns() + us * 1000;
    for (;;) {
        const uint64_t now = monotonic_ns();
        const uint64_t left = deadline > now ? deadline - now : 0;
        __kernel_timespec timeout{static_cast<long long>(left / 1'000'000'000),
                                  static_cast<long long>(left % 1'000'000'000)};
        io_uring_getevents_arg arg{};
        arg.sigmask_sz = _NSIG / 8;
        arg.ts = reinterpret_cast<uintptr_t>(&timeout);
        const int rc = enter(r.fd, r.unsubmitted, left > 0 ? 1 : 0,
                             IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg, sizeof(arg));
        const int error = rc < 0 ? errno : 0;
        if (rc > 0) {
            r.unsubmitted -= std::min<unsigned>(r.unsubmitted, static_cast<unsigned>(rc));
        }
        reap(w);
        if (w.frames || w.doorbell || error == ETIME || error == EINTR) {
            return w;  // a cause, the timeout, or a signal (as a futex wait ends on one)
        }
        if (error != 0 && error != EAGAIN && error != EBUSY) {
            // The ring cannot take its entries (ENOMEM, say): forget them, and sleep the rest
            // as a plain timeout rather than return at once and spin.
            r.unsubmitted = 0;
            _futex_queued = false;
            _polled_fd = -1;
            const uint64_t rest = deadline > monotonic_ns() ? deadline - monotonic_ns() : 0;
            const timespec t{static_cast<time_t>(rest / 1'000'000'000),
                             static_cast<long>(rest % 1'000'000'000)};
            nanosleep(&t, nullptr);
            return w;
        }
        if (monotonic_ns() >= deadline) {
            return w;
        }
        // Only a cancel's completions came: the sleep goes on.
    }
}

}  // namespace jakiro
