#pragma once
// Per-lcore transmit batching: packets are queued per port while a burst is processed and sent
// with one rte_eth_tx_burst per port at the end of it. What a port refuses is freed and counted.

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <array>
#include <cstdint>
#include <span>

#include "../counters.hh"

namespace jakiro {

class tx_batch {
  public:
    static constexpr uint16_t capacity = 64;  // two rx bursts' worth, then flush early

    void enqueue(uint16_t port, rte_mbuf* m, lcore_counters& counters) {
        auto& queue = _queues[port];
        if (queue.count == capacity) {
            flush_port(port, counters);
        }
        if (queue.count == 0) {
            _pending_ports[_pending_count++] = port;
        }
        queue.pkts[queue.count++] = m;
    }

    void flush(lcore_counters& counters) {
        for (uint16_t i = 0; i < _pending_count; ++i) {
            flush_port(_pending_ports[i], counters);
        }
        _pending_count = 0;
    }

    // What is queued for `port` and not yet sent (tests inspect the pipelines' decisions).
    std::span<rte_mbuf* const> queued(uint16_t port) const {
        return {_queues[port].pkts, _queues[port].count};
    }
    // Forgets the queued packets without sending them; the caller now owns them.
    void discard_all() {
        for (uint16_t i = 0; i < _pending_count; ++i) {
            _queues[_pending_ports[i]].count = 0;
        }
        _pending_count = 0;
    }

  private:
    void flush_port(uint16_t port, lcore_counters& counters) {
        auto& queue = _queues[port];
        uint16_t sent = 0;
        // af_packet may accept part of a burst when the socket ring is full; retry a little
        // before giving up so a momentary stall does not turn into loss.
        for (int attempt = 0; attempt < 4 && sent < queue.count; ++attempt) {
            sent += rte_eth_tx_burst(port, 0, queue.pkts + sent, queue.count - sent);
        }
        if (sent < queue.count) {
            counters.drops[static_cast<std::size_t>(drop_reason::tx_queue_full)].add(queue.count -
                                                                                     sent);
            rte_pktmbuf_free_bulk(queue.pkts + sent, queue.count - sent);
        }
        queue.count = 0;
    }

    struct queue {
        uint16_t count = 0;
        rte_mbuf* pkts[capacity];
    };
    std::array<queue, RTE_MAX_ETHPORTS> _queues{};
    std::array<uint16_t, RTE_MAX_ETHPORTS> _pending_ports{};
    uint16_t _pending_count = 0;
};

}  // namespace jakiro
