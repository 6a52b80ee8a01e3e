#include "dataplane/worker/handoff.hh"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <rte_errno.h>

#include <ctime>

namespace jakiro {

std::unique_ptr<worker_handoff> worker_handoff::create(unsigned workers, const std::string& name,
                                                       std::string& error) {
    if (workers == 0 || workers > max_lanes) {
        error = "workers must be 1.." + std::to_string(max_lanes);
        return nullptr;
    }
    std::unique_ptr<worker_handoff> handoff(new worker_handoff(workers));
    for (unsigned w = 0; w < workers; ++w) {
        for (unsigned k = 0; k < kinds; ++k) {
            // rte_ring names are global to the process: `name` keeps two handoffs apart.
            const std::string ring_name = name + "_" + kind_names[k] + std::to_string(w);
            rte_ring* ring =
                rte_ring_create(ring_name.c_str(), ring_size, SOCKET_ID_ANY, RING_F_SC_DEQ);
            if (ring == nullptr) {
                error = "cannot create hand-off ring " + ring_name + ": " + rte_strerror(rte_errno);
                return nullptr;
            }
            handoff->_lanes[w].rings[k] = ring;
        }
    }
    return handoff;
}

worker_handoff::~worker_handoff() {
    for (unsigned w = 0; w < _workers; ++w) {
        for (rte_ring* ring : _lanes[w].rings) {
            if (ring == nullptr) {
                continue;
            }
            rte_mbuf* left[64];
            unsigned n;
            while ((n = rte_ring_dequeue_burst(ring, reinterpret_cast<void**>(left), 64, nullptr)) >
                   0) {
                rte_pktmbuf_free_bulk(left, n);
            }
            rte_ring_free(ring);
        }
    }
}

uint16_t worker_handoff::give(kind k, unsigned to, rte_mbuf** pkts, uint16_t n) {
    const auto taken = static_cast<uint16_t>(rte_ring_enqueue_burst(
        _lanes[to].rings[k], reinterpret_cast<void* const*>(pkts), n, nullptr));
    if (taken > 0) {
        wake_if_sleeping(to);
    }
    return taken;
}

uint16_t worker_handoff::take(kind k, unsigned self, rte_mbuf** out, uint16_t max) {
    return static_cast<uint16_t>(
        rte_ring_dequeue_burst(_lanes[self].rings[k], reinterpret_cast<void**>(out), max, nullptr));
}

uint16_t worker_handoff::give_fabric(unsigned to, rte_mbuf** pkts, uint16_t n) {
    return give(fabric_ring, to, pkts, n);
}

uint16_t worker_handoff::give_port(unsigned to, uint16_t port, rte_mbuf** pkts, uint16_t n) {
    for (uint16_t i = 0; i < n; ++i) {
        pkts[i]->port = port;  // the receiving worker's only clue where it goes
    }
    return give(port_ring, to, pkts, n);
}

uint16_t worker_handoff::give_roce(unsigned to, rte_mbuf** pkts, uint16_t n) {
    return give(roce_ring, to, pkts, n);
}

unsigned worker_handoff::roce_room(unsigned self) const {
    unsigned room = ring_size;
    for (unsigned w = 0; w < _workers; ++w) {
        if (w != self) {
            room = std::min(room, rte_ring_free_count(_lanes[w].rings[roce_ring]));
        }
    }
    return room;
}

uint16_t worker_handoff::take_fabric(unsigned self, rte_mbuf** out, uint16_t max) {
    return take(fabric_ring, self, out, max);
}

uint16_t worker_handoff::take_port(unsigned self, rte_mbuf** out, uint16_t max) {
    return take(port_ring, self, out, max);
}

uint16_t worker_handoff::take_roce(unsigned self, rte_mbuf** out, uint16_t max) {
    return take(roce_ring, self, out, max);
}

bool worker_handoff::pending(unsigned self) const {
    for (const rte_ring* ring : _lanes[self].rings) {
        if (!rte_ring_empty(ring)) {
            return true;
        }
    }
    return false;
}

void worker_handoff::set_waker(unsigned worker, std::function<void()> wake) {
    _lanes[worker].wake = std::move(wake);
}

bool worker_handoff::before_sleep(unsigned self) {
    lane& l = _lanes[self];
    l.bell_seen = l.bell.load(std::memory_order_seq_cst);
    // Announce the sleep, then look once more: a producer that enqueued before this store sees
    // nothing to wake, so its frames must be found here (the seq_cst pair rules out both missing).
    l.sleeping.store(true, std::memory_order_seq_cst);
    if (pending(self)) {
        l.sleeping.store(false, std::memory_order_relaxed);
        return false;
    }
    return true;
}

void worker_handoff::after_sleep(unsigned self) {
    _lanes[self].sleeping.store(false, std::memory_order_relaxed);
}

void worker_handoff::sleep(unsigned self, uint64_t us) {
    lane& l = _lanes[self];
    timespec timeout{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
    // Returns at once if the bell rang since before_sleep() (the value no longer matches).
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&l.bell), FUTEX_WAIT_PRIVATE, l.bell_seen,
            &timeout, nullptr, 0);
}

void worker_handoff::ring(unsigned worker) {
    lane& l = _lanes[worker];
    if (l.wake) {
        l.wake();
        return;
    }
    l.bell.fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&l.bell), FUTEX_WAKE_PRIVATE, 1, nullptr,
            nullptr, 0);
}

void worker_handoff::wake_if_sleeping(unsigned worker) {
    // Pairs with before_sleep(): the enqueue is visible before this load.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (_lanes[worker].sleeping.load(std::memory_order_seq_cst)) {
        ring(worker);
    }
}

}  // namespace jakiro
