#pragma once
// Per-lcore transmit batching: packets are queued per port while a burst is processed and sent
// with one rte_eth_tx_burst per port at the end of it. What a port cannot take yet stays queued
// for the next round (a full memif or af_packet ring drains within microseconds); only a packet
// that finds its port's queue still full is dropped, and counted.
//
// With several workers only a port's owner may send on it (an ethdev or vnet face queue is
// single-threaded): frames for a port another worker owns go to that worker's hand-off ring
// instead (worker/handoff.hh), in order, with the same keep-the-leftovers rule.

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>

#include "dataplane/counters.hh"
#include "dataplane/overlay/sealing/sealed_datagrams.hh"
#include "dataplane/overlay/sealing/uplink_sealing.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/vxlan_datagrams.hh"
#include "dataplane/port_io.hh"
#include "dataplane/worker/clock.hh"
#include "dataplane/worker/handoff.hh"

namespace jakiro {

class tx_batch {
  public:
    static constexpr uint16_t capacity = 256;  // per port: several rx bursts of backlog

    // Several workers: `self` is this batch's worker, ports it does not own go through
    // `handoff`. Until set_owner() says otherwise a port is worker 0's.
    void hand_off_through(worker_handoff* handoff, uint8_t self) {
        _handoff = handoff;
        _self = self;
    }
    void set_owner(uint16_t port, uint8_t worker) { _owner[port] = worker; }

    // The uplink: what this batch sends there in plaintext is joined into UDP GSO
    // super-datagrams where the uplink takes them (overlay/vxlan_datagrams.hh).
    void join_on_uplink(uint16_t uplink) { _uplink = uplink; }

    // The sealed overlay: what this batch sends on `uplink` itself is sealed in bursts just
    // before it leaves (super-frames cut and sealed frames written into mbufs of `pool`) and,
    // where the uplink takes them, joined into UDP GSO super-datagrams (sealed_datagrams.hh).
    // Sealed frames wait in a queue of their own until the port takes them: a frame is never
    // sealed twice, and a super-frame is sealed only when all its frames have room there.
    void seal_uplink(overlay::sealing::uplink_sealing* sealing, uint16_t uplink,
                     rte_mempool* pool) {
        _sealing = sealing;
        _sealed_port = uplink;
        _seal_pool = pool;
    }

    void enqueue(uint16_t port, rte_mbuf* m, lcore_counters& counters) {
        auto& queue = _queues[port];
        if (queue.count == capacity) {
            send(port, counters);
            if (queue.count == capacity) {
                counters.drops[static_cast<std::size_t>(drop_reason::tx_queue_full)].add(1);
                rte_pktmbuf_free(m);
                return;
            }
        }
        if (!queue.pending) {
            queue.pending = true;
            _pending_ports[_pending_count++] = port;
        }
        queue.pkts[queue.count++] = m;
    }

    // Sends what every port takes; ports with leftovers stay pending. `port_live(port)` says
    // whether a port is still in the current snapshot: packets left for a port that was just
    // removed are dropped instead of sent to a device that is being closed.
    template <typename Live>
    void flush(Live port_live, lcore_counters& counters) {
        uint16_t still_pending = 0;
        for (uint16_t i = 0; i < _pending_count; ++i) {
            const uint16_t port = _pending_ports[i];
            if (!port_live(port)) {
                auto& queue = _queues[port];
                counters.drops[static_cast<std::size_t>(drop_reason::port_removed)].add(
                    queue.count);
                rte_pktmbuf_free_bulk(queue.pkts, queue.count);
                queue.count = 0;
                queue.pending = false;
                if (port == _sealed_port) {
                    counters.drops[static_cast<std::size_t>(drop_reason::port_removed)].add(
                        _sealed.count);
                    rte_pktmbuf_free_bulk(_sealed.pkts, _sealed.count);
                    _sealed.count = 0;
                }
                continue;
            }
            send(port, counters);
            if (_queues[port].count > 0 || (port == _sealed_port && _sealed.count > 0)) {
                _pending_ports[still_pending++] = port;
            } else {
                _queues[port].pending = false;
            }
        }
        _pending_count = still_pending;
    }

    bool empty() const { return _pending_count == 0; }

    // What is queued for `port` and not yet sent (tests inspect the pipelines' decisions).
    std::span<rte_mbuf* const> queued(uint16_t port) const {
        return {_queues[port].pkts, _queues[port].count};
    }
    // Forgets the queued packets without sending them; the caller now owns them.
    void discard_all() {
        for (uint16_t i = 0; i < _pending_count; ++i) {
            _queues[_pending_ports[i]].count = 0;
            _queues[_pending_ports[i]].pending = false;
        }
        _pending_count = 0;
        rte_pktmbuf_free_bulk(_sealed.pkts, _sealed.count);  // no caller could see them
        _sealed.count = 0;
    }

  private:
    void send(uint16_t port, lcore_counters& counters) {
        auto& queue = _queues[port];
        uint16_t sent;
        if (_handoff != nullptr && _owner[port] != _self) {
            sent = _handoff->give_port(_owner[port], port, queue.pkts, queue.count);
            counters.handed_port.add(sent);
        } else {
            if (_sealing != nullptr && port == _sealed_port) {
                sent = seal_and_send(port, queue, counters);
            } else {
                if (port == _uplink && uplink_takes_udp_gso(port)) {
                    // Datagrams already joined and left over from the last round stay as
                    // they are: join_vxlan_datagrams passes them by.
                    queue.count = overlay::join_vxlan_datagrams(queue.pkts, queue.count);
                }
                sent = port_tx_burst(port, queue.pkts, queue.count);
            }
        }
        if (sent > 0 && sent < queue.count) {
            std::copy(queue.pkts + sent, queue.pkts + queue.count,
                      queue.pkts);  // towards the front
        }
        queue.count -= sent;
    }

    struct queue {
        uint16_t count = 0;
        bool pending = false;
        rte_mbuf* pkts[capacity];
    };

    // Sends what the sealed queue holds, then seals `queue`'s frames into it and sends them,
    // for as long as the port takes everything; returns how many of `queue` were consumed
    // (sealed or dropped). A super-frame becomes up to overlay::max_segments frames before
    // they are joined: sealing waits until the sealed queue has room for that many.
    uint16_t seal_and_send(uint16_t port, const queue& queue, lcore_counters& counters) {
        uint16_t consumed = 0;
        send_sealed(port);
        while (consumed < queue.count && _sealed.count + overlay::max_segments <= capacity) {
            uint16_t taken = 0;
            rte_mbuf** fresh = _sealed.pkts + _sealed.count;
            uint16_t made = _sealing->seal_burst(
                queue.pkts + consumed, static_cast<uint16_t>(queue.count - consumed), fresh,
                static_cast<uint16_t>(capacity - _sealed.count), taken,
                uplink_takes_vxlan_superframes(port), _seal_pool, counters, now_ns());
            if (uplink_takes_udp_gso(port)) {
                made = overlay::sealing::join_sealed_frames(fresh, made);
            }
            _sealed.count = static_cast<uint16_t>(_sealed.count + made);
            consumed = static_cast<uint16_t>(consumed + taken);
            send_sealed(port);
            if (_sealed.count > 0) {
                break;  // the port is full: the rest waits, unsealed
            }
        }
        return consumed;
    }

    void send_sealed(uint16_t port) {
        if (_sealed.count == 0) {
            return;
        }
        const uint16_t sent = port_tx_burst(port, _sealed.pkts, _sealed.count);
        if (sent > 0 && sent < _sealed.count) {
            std::copy(_sealed.pkts + sent, _sealed.pkts + _sealed.count, _sealed.pkts);
        }
        _sealed.count = static_cast<uint16_t>(_sealed.count - sent);
    }

    struct sealed_queue {
        uint16_t count = 0;
        rte_mbuf* pkts[capacity];
    };
    // Indexed by port id: ethdevs and vnet faces (port_io.hh).
    std::array<queue, vnet_face::port_id_space> _queues{};
    std::array<uint16_t, vnet_face::port_id_space> _pending_ports{};
    uint16_t _pending_count = 0;
    worker_handoff* _handoff = nullptr;
    uint8_t _self = 0;
    uint16_t _uplink = UINT16_MAX;
    overlay::sealing::uplink_sealing* _sealing = nullptr;
    uint16_t _sealed_port = UINT16_MAX;
    rte_mempool* _seal_pool = nullptr;
    sealed_queue _sealed;  // the uplink's frames sealed and not yet taken by the port
    std::array<uint8_t, vnet_face::port_id_space> _owner{};
};

}  // namespace jakiro
