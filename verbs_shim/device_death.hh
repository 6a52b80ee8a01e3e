#pragma once
// jakirod going away: how a context notices, and what its verbs do from then on.
//
// Noticing. jakirod holds the far end of the context's channel (its connection); when it
// exits, or drops us, that socket hangs up. The hot paths (ibv_poll_cq finding nothing,
// ibv_post_send, ibv_post_recv) call check(): one relaxed load of the `dead` flag and a coarse
// clock read (vDSO, no system call); at most once per check_interval_ns one of them looks at
// the socket with a poll() that does not wait. The blocking waits (ibv_get_cq_event,
// ibv_get_async_event) wait in poll() on their own descriptor *and* the channel's hang-up, so
// they end as soon as jakirod does. A control verb sees the hang-up on its own (EIO).
//
// Once dead (mark_dead, once): the async event channel and every completion channel of the
// context are shut down for reading, so a program waiting on them in its own poll()/epoll
// wakes; ibv_get_async_event reports IBV_EVENT_DEVICE_FATAL once (jakirod's own, or one made
// here), then fails with EIO; ibv_get_cq_event hands out the events already queued, then
// fails with EIO; ibv_post_send / ibv_post_recv fail with EIO; and ibv_poll_cq, once it has
// handed out the completions jakirod had published, returns a IBV_WC_WR_FLUSH_ERR completion
// for every work request still outstanding on the QPs that feed the CQ, then nothing.
//
// Thread-safety: check(), dead() and mark_dead() from any thread; flush_completions() under
// the CQ's poll lock (it takes this object's flush mutex, the context's targets mutex and,
// once per queue, the queue's lock: in that order). One per context, made by open_device and
// deleted by close_device.

#include <infiniband/verbs.h>
#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace jakiro::verbs_shim {

struct shim_cq;
struct shim_qp;

// How often the hot path may look at the socket: a poll() costs ~0.3 µs, so this keeps the
// cost of noticing below 0.1 % of a spinning core, and a dead jakirod is noticed within a
// millisecond or so (CLOCK_MONOTONIC_COARSE ticks once per jiffy, 1-4 ms).
constexpr int64_t check_interval_ns = 1'000'000;

// ibv_wc.vendor_err of the completions made here, so a program (or perftest's "vendor
// error" line) can tell "jakirod is gone" from a QP that went to ERR in the engine (0).
constexpr uint32_t vendor_err_jakirod_gone = 0xdead;

class device_death {
  public:
    // `watch_fd`: the context's channel (jakirod's end hangs up when it goes);
    // `async_fd`: the context's async event channel.
    device_death(int watch_fd, int async_fd) : _watch_fd(watch_fd), _async_fd(async_fd) {}
    device_death(const device_death&) = delete;
    device_death& operator=(const device_death&) = delete;

    bool dead() const { return _dead.load(std::memory_order_relaxed); }

    // The hot path's question: true once jakirod is known gone. No system call unless
    // check_interval_ns has passed since the last look (then one poll() without waiting).
    bool check() {
        if (dead()) {
            return true;
        }
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        const int64_t now = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
        if (now < _next_look_ns.load(std::memory_order_relaxed)) {
            return false;
        }
        return look(now);
    }
    // Looks at the socket now (the blocking paths): true if jakirod is gone.
    bool check_now();
    // From now on the device is dead; wakes whoever waits on the context's event channels.
    void mark_dead();
    // ibv_get_async_event: true exactly once, for the IBV_EVENT_DEVICE_FATAL to report.
    bool take_fatal_report() { return !_fatal_reported.exchange(true); }

    int watch_fd() const { return _watch_fd; }

    // Completion channels of the context (create_comp_channel / destroy_comp_channel): shut
    // down for reading when the device dies.
    void add_channel(int fd);
    void remove_channel(int fd);

    // ibv_poll_cq on a dead device with nothing left in the CQ ring: up to `num_entries`
    // IBV_WC_WR_FLUSH_ERR completions for work requests still outstanding on the QPs that feed
    // `cq` (each reported once), then 0. Called with cq's poll lock held.
    int flush_completions(shim_cq& cq, int num_entries, ibv_wc* wc);

  private:
    // A queue's outstanding work requests, from the first not yet flushed to the shim's own
    // producer index (fixed: nothing can be posted once the device is dead).
    struct flush_range {
        bool taken = false;  // the range has been read from the queue
        uint32_t next = 0;
        uint32_t end = 0;
    };
    struct qp_flush {
        flush_range sq;
        flush_range rq;
    };

    bool look(int64_t now);

    const int _watch_fd;
    const int _async_fd;
    std::atomic<bool> _dead{false};
    std::atomic<bool> _fatal_reported{false};
    std::atomic<int64_t> _next_look_ns{0};
    std::mutex _channels_mutex;
    std::vector<int> _channels;  // guarded by _channels_mutex
    std::mutex _flush_mutex;
    // By QP; only QPs the context still knows (event_targets) are ever looked up.
    std::unordered_map<const shim_qp*, qp_flush> _flushes;  // guarded by _flush_mutex
};

// What a blocking event wait does (ibv_get_cq_event, ibv_get_async_event): receives one
// message from `fd`. Waits unless the program made `fd` non-blocking (then -1 with EAGAIN), but
// never past jakirod's end: messages already queued come first, then 0 ("gone"), as at EOF.
// -1 with errno otherwise (EINTR reaches the caller, as a blocking read's does).
ssize_t receive_event(device_death& death, int fd, void* buffer, std::size_t size);

}  // namespace jakiro::verbs_shim
