#include "dataplane/poll_loop/rx_waker.hh"

#include "dataplane/poll_loop/frame_sources.hh"

#include <dirent.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace jakiro {

namespace {

// A helper poll() never blocks longer than this, so it sees the worker wake on its own.
constexpr int max_wait_ms = 50;
constexpr auto rescan_period = std::chrono::seconds(1);

}  // namespace

rx_waker::rx_waker(std::function<void()> wake)
    : _wake(std::move(wake)),
      _arm_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      _stop_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (_arm_fd >= 0 && _stop_fd >= 0) {
        _thread = std::thread([this] { run(); });
        // Named, so that its wake-ups are told apart from the worker's (perf/rdma_wakeups).
        pthread_setname_np(_thread.native_handle(), "rx-waker");
    }
}

rx_waker::~rx_waker() {
    if (_thread.joinable()) {
        const uint64_t one = 1;
        (void)!write(_stop_fd, &one, sizeof(one));
        _thread.join();
    }
    for (const int fd : {_arm_fd, _stop_fd}) {
        if (fd >= 0) {
            close(fd);
        }
    }
}

void rx_waker::before_sleep() {
    _sleeping.store(true, std::memory_order_relaxed);
    const uint64_t one = 1;
    (void)!write(_arm_fd, &one, sizeof(one));
}

void rx_waker::apply_ignored() {
    _applied_generation = frame_sources::ignored_generation();
    for (std::size_t i = 1; i < _fds.size(); ++i) {
        _fds[i].events = frame_sources::is_ignored(_fds[i].fd) ? 0 : POLLIN;
    }
}

void rx_waker::find_packet_sockets() {
    _fds.assign(1, {_stop_fd, POLLIN, 0});
    _scanned = std::chrono::steady_clock::now();
    _rescan = false;
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) {
        return;
    }
    while (const dirent* e = readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end != e->d_name && *end == '\0' && fd != dirfd(dir) &&
            frame_sources::is_frame_source(static_cast<int>(fd))) {
            _fds.push_back({static_cast<int>(fd), POLLIN, 0});
        }
    }
    closedir(dir);
    apply_ignored();
}

bool rx_waker::wait_for_sleep() {
    pollfd armed[2] = {{_arm_fd, POLLIN, 0}, {_stop_fd, POLLIN, 0}};
    while (poll(armed, 2, -1) < 0) {
        // EINTR
    }
    if (armed[1].revents != 0) {
        return false;
    }
    uint64_t count = 0;
    (void)!read(_arm_fd, &count, sizeof(count));
    return true;
}

bool rx_waker::watch_sockets() {
    if (_rescan || std::chrono::steady_clock::now() - _scanned >= rescan_period) {
        find_packet_sockets();
    }
    while (_sleeping.load(std::memory_order_relaxed)) {
        if (frame_sources::ignored_generation() != _applied_generation) {
            apply_ignored();
        }
        if (poll(_fds.data(), _fds.size(), max_wait_ms) <= 0) {
            continue;  // timeout or EINTR
        }
        if (_fds[0].revents != 0) {
            return false;
        }
        bool frame = false;
        for (std::size_t i = 1; i < _fds.size(); ++i) {
            frame |= (_fds[i].revents & POLLIN) != 0;
            // A closed, failed or hung-up socket would make every poll() return at once.
            if ((_fds[i].revents & (POLLNVAL | POLLERR | POLLHUP)) != 0) {
                _rescan = true;
                _fds[i].fd = -1;  // poll() skips it until the next scan
            }
        }
        if (frame) {
            if (_sleeping.exchange(false, std::memory_order_relaxed)) {
                _wake();
            }
            return true;
        }
    }
    return true;
}

void rx_waker::run() {
    while (wait_for_sleep() && watch_sockets()) {
    }
}

}  // namespace jakiro
