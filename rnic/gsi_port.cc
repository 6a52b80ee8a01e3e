#include "rnic/gsi_port.hh"

#include <sys/eventfd.h>
#include <unistd.h>

namespace jakiro::roce {

gsi_port::gsi_port() : _notify_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

gsi_port::~gsi_port() {
    if (_notify_fd >= 0) {
        close(_notify_fd);
    }
}

bool gsi_port::push_tx(const gsi_datagram& d) {
    std::lock_guard lock(_mutex);
    if (_tx.size() >= max_queued) {
        _dropped.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    _tx.push_back(d);
    _tx_pending.store(true, std::memory_order_release);
    return true;
}

std::vector<gsi_datagram> gsi_port::take_rx() {
    std::lock_guard lock(_mutex);
    std::vector<gsi_datagram> out(_rx.begin(), _rx.end());
    _rx.clear();
    return out;
}

std::vector<gsi_datagram> gsi_port::take_tx() {
    std::lock_guard lock(_mutex);
    std::vector<gsi_datagram> out(_tx.begin(), _tx.end());
    _tx.clear();
    _tx_pending.store(false, std::memory_order_release);
    return out;
}

void gsi_port::push_rx(const gsi_datagram& d) {
    {
        std::lock_guard lock(_mutex);
        if (_rx.size() >= max_queued) {
            _dropped.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        _rx.push_back(d);
    }
    if (_notify_fd >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = write(_notify_fd, &one, sizeof(one));
    }
}

}  // namespace jakiro::roce
