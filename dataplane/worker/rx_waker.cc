#include "rx_waker.hh"

#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace jakiro {

namespace {

// A helper poll() never blocks longer than this, so a socket closed by a removed port (whose
// number may be reused) is noticed at the next rescan rather than waited on forever.
constexpr int max_wait_ms = 50;

bool is_packet_socket(int fd) {
    int domain = 0;
    socklen_t len = sizeof(domain);
    return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_PACKET;
}

}  // namespace

rx_waker::rx_waker(std::function<void()> wake)
    : _wake(std::move(wake)),
      _arm_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      _stop_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (_arm_fd >= 0 && _stop_fd >= 0) {
        _thread = std::thread([this] { run(); });
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

void rx_waker::find_packet_sockets() {
    _sockets.clear();
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) {
        return;
    }
    while (const dirent* e = readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) {
            continue;
        }
        if (is_packet_socket(static_cast<int>(fd))) {
            _sockets.push_back(static_cast<int>(fd));
        }
    }
    closedir(dir);
}

void rx_waker::run() {
    std::vector<pollfd> fds;
    for (;;) {
        // Wait for the worker to go to sleep (or for the end).
        pollfd armed[2] = {{_arm_fd, POLLIN, 0}, {_stop_fd, POLLIN, 0}};
        if (poll(armed, 2, -1) < 0) {
            continue;  // EINTR
        }
        if (armed[1].revents != 0) {
            return;
        }
        uint64_t count = 0;
        (void)!read(_arm_fd, &count, sizeof(count));
        if (_rescan.exchange(false, std::memory_order_relaxed)) {
            find_packet_sockets();
        }
        fds.clear();
        fds.push_back({_stop_fd, POLLIN, 0});
        for (const int fd : _sockets) {
            fds.push_back({fd, POLLIN, 0});
        }
        // Until a frame is there, the worker is awake anyway, or the end.
        while (_sleeping.load(std::memory_order_relaxed)) {
            const int n = poll(fds.data(), fds.size(), max_wait_ms);
            if (n < 0) {
                continue;
            }
            if (fds[0].revents != 0) {
                return;
            }
            if (n == 0) {
                continue;
            }
            bool frame = false;
            for (std::size_t i = 1; i < fds.size(); ++i) {
                frame |= (fds[i].revents & POLLIN) != 0;
                // A closed, failed or hung-up socket would make every poll() return at once.
                if ((fds[i].revents & (POLLNVAL | POLLERR | POLLHUP)) != 0) {
                    _rescan.store(true, std::memory_order_relaxed);
                    fds[i].fd = -1;  // poll() skips it until the next rescan
                }
            }
            if (frame && _sleeping.exchange(false, std::memory_order_relaxed)) {
                _wake();
            }
            if (frame) {
                break;
            }
        }
    }
}

}  // namespace jakiro
