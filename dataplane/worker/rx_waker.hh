#pragma once
// Wakes a sleeping worker when a frame arrives on an af_packet port. The worker's adaptive
// sleep (lcore_loop) only wakes early for a tenant's verbs doorbell; a frame on the uplink or a
// tenant port otherwise waits out the sleep (up to 2 ms at each hop: a ping between hosts took
// 3.7 ms, ib_write_lat ~330 µs). DPDK's af_packet PMD has no rx interrupts, but its sockets are
// ordinary AF_PACKET sockets of this process that poll() reports readable while their ring
// holds a frame. A helper thread waits on them, only while the worker sleeps, and then rings
// the worker's doorbell (the same futex tenants ring).
//
// Per sleep the worker pays one eventfd write; the helper one wake-up and one poll(). Ports
// that are not af_packet (memif, tap) keep the timed sleep.
//
// Thread-safety: before_sleep()/after_sleep()/rescan() from the worker only.

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace jakiro {

class rx_waker {
  public:
    // `wake` runs on the helper thread; it must be safe to call at any time.
    explicit rx_waker(std::function<void()> wake);
    ~rx_waker();
    rx_waker(const rx_waker&) = delete;
    rx_waker& operator=(const rx_waker&) = delete;

    // The set of ports changed (a new configuration snapshot): find the sockets again.
    void rescan() { _rescan.store(true, std::memory_order_relaxed); }
    void before_sleep();
    void after_sleep() { _sleeping.store(false, std::memory_order_relaxed); }

  private:
    void run();
    void find_packet_sockets();

    std::function<void()> _wake;
    int _arm_fd = -1;           // eventfd: the worker is going to sleep
    int _stop_fd = -1;          // eventfd: the destructor wants the thread gone
    std::vector<int> _sockets;  // helper thread only
    std::atomic<bool> _sleeping{false};
    std::atomic<bool> _rescan{true};
    std::thread _thread;
};

}  // namespace jakiro
