#pragma once
// A worker's sleep that a frame and a doorbell both end directly: one io_uring wait on the
// doorbells' futexes (IORING_OP_FUTEX_WAITV, Linux 6.7+) and on the frame sources' epoll set
// (IORING_OP_POLL_ADD, one shot), with a timeout. No helper thread is in the path: before it, a
// frame woke rx_waker's thread, which rang the doorbell, which woke the worker (two wake-ups in
// series on the receive side of every message, about 1.4 helper wake-ups per round trip on each
// host, perf/README.md).
//
// Why io_uring rather than a pipe per vNIC in an epoll set: see docs/architecture.md §9 (the
// doorbells stay futex words in the vNICs' sealed pages; the shim, the verbs ABI, the
// descriptors a tenant holds and a restart carries, and what a tenant can do to jakirod are
// unchanged). The ring is the worker's own and lives as long as its loop.
//
// Lost wake-ups: the futex wait is set up with the counts engine::prepare_sleep() noted before
// its last look at the rings, so a ring after that look fails the setup (-EAGAIN: the sleep
// ends at once). A futex wait that outlives a sleep (a frame or the timeout ended it) stays
// queued for the next one while the set of pages is the same (doorbell_set::generation): it was
// queued before that next sleep's last look, so a ring after the look wakes it. Otherwise it is
// cancelled and a new one set up. The poll on the epoll set is level-triggered when it is
// queued (a frame already waiting completes it at once) and likewise stays queued until a frame
// comes. A wait or poll that completed while the worker was awake ends no sleep (the worker may
// have done that work already): it is set up again, and tells the truth then.
//
// Where io_uring is missing, disabled (kernel.io_uring_disabled, a seccomp filter such as a
// container runtime's default) or lacks FUTEX_WAITV, open() returns null and the worker sleeps
// the other way: on the doorbells with rx_waker's helper thread watching the sockets.
//
// Thread-safety: one per worker, used by that worker only.

#include <linux/futex.h>

#include <cstdint>
#include <memory>
#include <span>

namespace jakiro {

class uring_sleeper {
  public:
    // Null where the kernel cannot do it (above).
    static std::unique_ptr<uring_sleeper> open();
    ~uring_sleeper();
    uring_sleeper(const uring_sleeper&) = delete;
    uring_sleeper& operator=(const uring_sleeper&) = delete;

    struct woken {
        bool frames = false;    // the frame sources had a frame
        bool doorbell = false;  // a futex was woken, or moved before the wait began
    };
    // Sleeps until a frame is readable on `frames_fd` (any pollable descriptor; -1: none), a
    // futex of `waiters` is woken or no longer holds its value, or `us` microseconds passed.
    // `generation` names the set of futexes (a new one replaces a queued wait); the array
    // itself is read only while this call sets a wait up.
    woken sleep(int frames_fd, std::span<const futex_waitv> waiters, uint64_t generation,
                uint64_t us);

  private:
    struct ring;
    explicit uring_sleeper(std::unique_ptr<ring> r);
    void reap(woken& w);

    std::unique_ptr<ring> _ring;
    int _polled_fd = -1;         // the descriptor a queued poll watches; -1: none queued
    bool _futex_queued = false;  // a futex wait is queued, for _futex_generation
    uint64_t _futex_generation = 0;
    uint64_t _futex_tag = 0;   // user_data of the queued futex wait (older ones: cancelled)
    uint64_t _poll_tag = 0;    // user_data of the queued poll (older ones: removed)
    uint64_t _tags = 1;        // the last user_data given (1 is the cancels')
    int _failed_poll_fd = -1;  // a descriptor the poll failed on: not polled again
};

}  // namespace jakiro
