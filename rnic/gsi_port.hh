#pragma once
// QP1 of every vNIC (the General Services Interface, IBTA 13.4.6.1): MADs between jakirod's
// control side (the rdma_cm agents, rnic/rdmacm/) and the wire. The engine thread hands
// every datagram addressed to QP1 with the GSI Q_Key to the queue of the vNIC it came to, and
// sends whatever the vNICs' agents queued on its next polls, as UD SEND Only packets from QP1
// to QP1.
//
// Every vNIC has queues of its own, each bounded by the vNIC's quota (`rdma.max_qp1_queue`):
// a vNIC whose MADs pile up (a peer flooding it, its own agent sending thousands of requests)
// fills only its own queues and loses only its own MADs (counted per vNIC); another vNIC's
// MADs always find room. A full queue drops, and the CM's retransmissions recover, as they do
// from a lossy fabric. The engine takes at most `tx_burst` of a vNIC's MADs per poll, so no
// vNIC's burst holds the worker either.
//
// Neither queue is on the datapath's fast path: the engine looks at one atomic flag per poll
// and takes the mutex only when MADs move (a datagram to QP1 is not a data packet).
//
// Thread-safety: open/close/set_limit/push_tx/take_rx from the control side (any thread, each
// vNIC's from its own); take_tx/push_rx from the engine's; counters() from any thread.

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "rnic/wire/ip_address.hh"

namespace jakiro::rnic {

constexpr std::size_t gsi_mad_bytes = 256;
constexpr uint32_t gsi_qkey = 0x8001'0000u;
constexpr uint32_t gsi_qpn = 1;

struct gsi_datagram {
    uint16_t vnic = 0;  // the local vNIC it came to / leaves from
    // The peer: over IPv4 remote_ip_be, over IPv6 remote_ip6 (and remote_ip_be 0).
    uint32_t remote_ip_be = 0;
    ipv6_address remote_ip6{};
    // Sending: who we are on the wire (local_ip6 over IPv6).
    std::array<uint8_t, 6> local_mac{};
    uint32_t local_ip_be = 0;
    ipv6_address local_ip6{};
    uint8_t traffic_class = 0;
    std::array<uint8_t, gsi_mad_bytes> mad{};

    bool over_ipv6() const { return !is_unspecified(remote_ip6); }
};

// One vNIC's QP1 counters.
struct gsi_counters {
    uint64_t received = 0;    // handed to its agent's queue
    uint64_t sent = 0;        // taken by the engine to send
    uint64_t rx_dropped = 0;  // its receive queue was full
    uint64_t tx_dropped = 0;  // its send queue was full
};

class gsi_port {
  public:
    // MADs of one vNIC the engine sends per poll; the rest wait for the next one.
    static constexpr std::size_t tx_burst = 32;
    static constexpr uint32_t default_max_queued = 256;

    gsi_port();
    ~gsi_port();
    gsi_port(const gsi_port&) = delete;
    gsi_port& operator=(const gsi_port&) = delete;

    // ---- control side
    // Gives vNIC `slot` its queues, at most `max_queued` MADs each way; `notify_fd` (an
    // eventfd, borrowed until close(), -1: none) is written when MADs arrive for it. Opening an
    // open slot changes its limit.
    void open(uint16_t slot, uint32_t max_queued = default_max_queued, int notify_fd = -1);
    // A new bound, live: lowering it drops nothing queued, it only refuses more.
    void set_limit(uint16_t slot, uint32_t max_queued);
    // The vNIC's agent is gone: its eventfd is written no more (the caller may close it once
    // this returns) and nothing more is received or queued for it; the MADs it queued last (a
    // removed vNIC's DREQs and REJs) still leave, then its queues go.
    void close(uint16_t slot);
    // False (and counted for the vNIC) when its send queue is full or it has none.
    bool push_tx(const gsi_datagram& d);
    // Everything received for `slot` so far.
    std::vector<gsi_datagram> take_rx(uint16_t slot);
    gsi_counters counters(uint16_t slot) const;
    // MADs dropped for every vNIC together, and for vNICs with no queues (none served).
    uint64_t dropped() const { return _dropped.load(std::memory_order_relaxed); }

    // ---- engine thread
    bool tx_pending() const { return _tx_pending.load(std::memory_order_acquire); }
    // Up to tx_burst MADs of every vNIC, vNIC by vNIC.
    std::vector<gsi_datagram> take_tx();
    void push_rx(const gsi_datagram& d);

  private:
    struct vnic_queues {
        std::deque<gsi_datagram> tx, rx;
        uint32_t max_queued = default_max_queued;
        int notify_fd = -1;
        bool closed = false;  // sending what is left, then erased
        gsi_counters counters;
    };

    mutable std::mutex _mutex;
    std::map<uint16_t, std::unique_ptr<vnic_queues>> _vnics;  // guarded by _mutex
    std::atomic<bool> _tx_pending{false};
    std::atomic<uint64_t> _dropped{0};
};

}  // namespace jakiro::rnic
