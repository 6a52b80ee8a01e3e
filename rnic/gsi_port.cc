#include "rnic/gsi_port.hh"

#include <unistd.h>

#include <algorithm>

namespace jakiro::rnic {

gsi_port::gsi_port() = default;

gsi_port::~gsi_port() = default;

void gsi_port::open(uint16_t slot, uint32_t max_queued, int notify_fd) {
    std::lock_guard lock(_mutex);
    auto& q = _vnics[slot];
    if (q == nullptr || q->closed) {
        // A vNIC served (again) in this slot: nothing of a former one's but its last MADs out.
        auto fresh = std::make_unique<vnic_queues>();
        if (q != nullptr) {
            fresh->tx = std::move(q->tx);
        }
        q = std::move(fresh);
    }
    q->max_queued = max_queued;
    q->notify_fd = notify_fd;
}

void gsi_port::set_limit(uint16_t slot, uint32_t max_queued) {
    std::lock_guard lock(_mutex);
    if (const auto it = _vnics.find(slot); it != _vnics.end() && !it->second->closed) {
        it->second->max_queued = max_queued;
    }
}

void gsi_port::close(uint16_t slot) {
    std::lock_guard lock(_mutex);
    const auto it = _vnics.find(slot);
    if (it == _vnics.end() || it->second->closed) {
        return;
    }
    vnic_queues& q = *it->second;
    q.notify_fd = -1;
    q.rx.clear();
    q.closed = true;
    if (q.tx.empty()) {
        _vnics.erase(it);
    }
}

bool gsi_port::push_tx(const gsi_datagram& d) {
    std::lock_guard lock(_mutex);
    const auto it = _vnics.find(d.vnic);
    if (it == _vnics.end() || it->second->closed ||
        it->second->tx.size() >= it->second->max_queued) {
        if (it != _vnics.end()) {
            ++it->second->counters.tx_dropped;
        }
        _dropped.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    it->second->tx.push_back(d);
    _tx_pending.store(true, std::memory_order_release);
    return true;
}

std::vector<gsi_datagram> gsi_port::take_rx(uint16_t slot) {
    std::lock_guard lock(_mutex);
    const auto it = _vnics.find(slot);
    if (it == _vnics.end() || it->second->closed) {
        return {};
    }
    std::vector<gsi_datagram> out(it->second->rx.begin(), it->second->rx.end());
    it->second->rx.clear();
    return out;
}

gsi_counters gsi_port::counters(uint16_t slot) const {
    std::lock_guard lock(_mutex);
    const auto it = _vnics.find(slot);
    return it != _vnics.end() ? it->second->counters : gsi_counters{};
}

std::vector<gsi_datagram> gsi_port::take_tx() {
    std::lock_guard lock(_mutex);
    std::vector<gsi_datagram> out;
    bool more = false;
    for (auto it = _vnics.begin(); it != _vnics.end();) {
        vnic_queues& q = *it->second;
        const std::size_t n = std::min(q.tx.size(), tx_burst);
        out.insert(out.end(), q.tx.begin(), q.tx.begin() + static_cast<std::ptrdiff_t>(n));
        q.tx.erase(q.tx.begin(), q.tx.begin() + static_cast<std::ptrdiff_t>(n));
        q.counters.sent += n;
        more = more || !q.tx.empty();
        it = q.closed && q.tx.empty() ? _vnics.erase(it) : std::next(it);
    }
    _tx_pending.store(more, std::memory_order_release);
    return out;
}

void gsi_port::push_rx(const gsi_datagram& d) {
    std::lock_guard lock(_mutex);
    const auto it = _vnics.find(d.vnic);
    if (it == _vnics.end() || it->second->closed ||
        it->second->rx.size() >= it->second->max_queued) {
        if (it != _vnics.end()) {
            ++it->second->counters.rx_dropped;
        }
        _dropped.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    it->second->rx.push_back(d);
    ++it->second->counters.received;
    if (it->second->notify_fd >= 0) {
        // Under the mutex: once close() returned, its owner may close the descriptor (and
        // another file take its number), so never between the lookup and this write. A
        // non-blocking eventfd write is brief.
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = write(it->second->notify_fd, &one, sizeof(one));
    }
}

}  // namespace jakiro::rnic
