#pragma once
// Wakes a sleeping worker when a frame arrives on an af_packet port. The worker's adaptive
// sleep (lcore_loop) only wakes early for a tenant's verbs doorbell; a frame on the uplink or a
// tenant port otherwise waits out the sleep (up to 2 ms at each hop: a ping between hosts took
// 3.7 ms). DPDK's af_packet PMD has no rx interrupts, but its sockets are ordinary AF_PACKET
// sockets of this process that poll() reports readable while their ring holds a frame. A
// helper thread waits on them, only while the worker sleeps, and then rings the worker's
// doorbell (the same futex tenants ring). It looks for the sockets again every second, and
// at once when one of them is closed, so ports added or removed live are followed.
//
// A tap uplink's descriptor (/dev/net/tun) is polled the same way. While the engine has no QP
// and every port is a vnet face, the worker sleeps in frame_sleeper instead (one epoll_wait
// that a frame ends directly) and this helper is not armed.
//
// Per sleep the worker pays one eventfd write; the helper one wake-up and one poll(). Ports
// that are not af_packet (memif, tap) keep the timed sleep.
//
// The sockets frame_sources.hh has ignored are left out of the watch.
//
// Used only where the worker cannot wait on its frame sources and its doorbells at once
// (uring_sleeper.hh: no io_uring, or one without IORING_OP_FUTEX_WAITV, Linux < 6.7), or has
// no engine and so no doorbells.
//
// Thread-safety: before_sleep()/after_sleep() from the worker only.

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include <poll.h>

namespace jakiro {

class rx_waker {
  public:
    // `wake` runs on the helper thread; it must be safe to call at any time.
    explicit rx_waker(std::function<void()> wake);
    ~rx_waker();
    rx_waker(const rx_waker&) = delete;
    rx_waker& operator=(const rx_waker&) = delete;

    void before_sleep();
    void after_sleep() { _sleeping.store(false, std::memory_order_relaxed); }

  private:
    void run();
    // Blocks until the worker goes to sleep (true) or the destructor wants the end (false).
    bool wait_for_sleep();
    // While the worker sleeps: until a frame is there (then wakes it), or the end (false).
    bool watch_sockets();
    void find_packet_sockets();
    // Helper thread: the watched sockets' events after a change of the ignored set.
    void apply_ignored();

    std::function<void()> _wake;
    int _arm_fd = -1;   // eventfd: the worker is going to sleep
    int _stop_fd = -1;  // eventfd: the destructor wants the thread gone
    // Helper thread only: _stop_fd first, then the sockets; when they were last looked for.
    std::vector<pollfd> _fds;
    std::chrono::steady_clock::time_point _scanned{};
    bool _rescan = true;
    std::atomic<bool> _sleeping{false};
    uint64_t _applied_generation = 0;  // helper thread: of frame_sources' ignored set
    std::thread _thread;
};

}  // namespace jakiro
