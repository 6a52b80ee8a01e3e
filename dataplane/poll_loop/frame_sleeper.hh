#pragma once
// A worker's sleep when only frames and jakirod's own calls can bring it work: one epoll_wait
// on the vnet faces' epoll set (nested: it is readable while any face has frames) and the
// engine's wake eventfd (control calls, MADs to send). A frame wakes the worker directly. The
// doorbell nap (rnic/doorbell_set.hh) must instead wait on the tenants' futexes and learns of
// frames through rx_waker's helper thread: two thread hops per wake, which on a busy host cost
// more than the 200 µs spin before a nap saves. Used while the engine has no QP (a tenant can
// then ring no doorbell), every port is a face, and the worker is the only one (with more,
// every worker would wake for every face), and only where uring_sleeper.hh cannot be (no
// io_uring FUTEX_WAITV), which waits for frames and doorbells at once in every case.
//
// Thread-safety: the worker only.

#include <cstdint>

namespace jakiro {

class frame_sleeper {
  public:
    explicit frame_sleeper(int wake_fd) : _wake_fd(wake_fd) {}
    ~frame_sleeper();
    frame_sleeper(const frame_sleeper&) = delete;
    frame_sleeper& operator=(const frame_sleeper&) = delete;

    // Whether sleep() can be used now: the faces' epoll set exists (the first face opened)
    // and the set of the two could be made.
    bool ready();
    // Sleeps until a face has frames, wake_fd is signalled, or `us` microseconds passed;
    // drains wake_fd. True if frames ended the sleep.
    bool sleep(uint64_t us);

  private:
    int _wake_fd;
    int _epoll_fd = -1;  // the faces' set and _wake_fd
    bool _failed = false;
};

}  // namespace jakiro
