#pragma once
// QP1 of every vNIC (the General Services Interface, IBTA 13.4.6.1): MADs between jakirod's
// control side (the rdma_cm agents, rnic/rdmacm/) and the wire. The engine thread hands
// every datagram addressed to QP1 with the GSI Q_Key to `received`, and sends whatever the
// control side queued on its next poll, as UD SEND Only packets from QP1 to QP1.
//
// Neither queue is on the datapath's fast path: the engine looks at one atomic flag per poll
// and takes the mutex only when MADs move. Both are bounded; a full queue drops (counted), and
// the CM's retransmissions recover, as they do from a lossy fabric.
//
// Thread-safety: push_tx/take_rx from the control thread, take_tx/push_rx from the engine's.

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace jakiro::roce {

constexpr std::size_t gsi_mad_bytes = 256;
constexpr uint32_t gsi_qkey = 0x8001'0000u;
constexpr uint32_t gsi_qpn = 1;

struct gsi_datagram {
    uint16_t vnic = 0;  // the local vNIC it came to / leaves from
    uint32_t remote_ip_be = 0;
    // Sending: who we are on the wire.
    std::array<uint8_t, 6> local_mac{};
    uint32_t local_ip_be = 0;
    uint8_t traffic_class = 0;
    std::array<uint8_t, gsi_mad_bytes> mad{};
};

class gsi_port {
  public:
    static constexpr std::size_t max_queued = 512;

    // ---- control thread
    // False (and counted) when the queue is full.
    bool push_tx(const gsi_datagram& d);
    // Everything received so far.
    std::vector<gsi_datagram> take_rx();
    // An eventfd that becomes readable when MADs arrive (the control thread polls it).
    int rx_notify_fd() const { return _notify_fd; }
    uint64_t dropped() const { return _dropped.load(std::memory_order_relaxed); }

    // ---- engine thread
    bool tx_pending() const { return _tx_pending.load(std::memory_order_acquire); }
    std::vector<gsi_datagram> take_tx();
    void push_rx(const gsi_datagram& d);

    gsi_port();
    ~gsi_port();
    gsi_port(const gsi_port&) = delete;
    gsi_port& operator=(const gsi_port&) = delete;

  private:
    std::mutex _mutex;
    std::deque<gsi_datagram> _tx;  // guarded by _mutex
    std::deque<gsi_datagram> _rx;  // guarded by _mutex
    std::atomic<bool> _tx_pending{false};
    std::atomic<uint64_t> _dropped{0};
    int _notify_fd = -1;
};

}  // namespace jakiro::roce
