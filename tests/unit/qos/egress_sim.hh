#pragma once
// A simulated jakirod egress for the scheduler tests: per vNIC and class a queue of packets
// (sizes cycled from a list) that a source keeps topped up while active; a poll loop on a
// simulated clock that, like the worker, asks for a grant once per burst (telling the scheduler
// how much one burst can carry), sends whole packets of a class while what it sent is below
// that class's grant, and commits what left.

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <vector>

#include "qos/config.hh"
#include "qos/scheduler.hh"

namespace jakiro::qos::sim {

// Charged sizes (inner frame + 50 bytes VXLAN) of realistic packets.
// RoCEv2 data packet: inner Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload + ICRC 4.
constexpr uint32_t rdma_frame(uint32_t payload) {
    return charged_bytes(14 + 20 + 8 + 12 + payload + 4);
}
// TCP/IP frame of `ip_bytes` (the tenant MTU for a full segment): inner Ethernet 14 + IP packet.
constexpr uint32_t tcp_frame(uint32_t ip_bytes) {
    return charged_bytes(14 + ip_bytes);
}
constexpr uint32_t rdma_1024 = rdma_frame(1024);  // path MTU 1024 (underlay 1500)
constexpr uint32_t rdma_4096 = rdma_frame(4096);  // path MTU 4096 (underlay 9000)
constexpr uint32_t tcp_1450 = tcp_frame(1450);    // tenant MTU 1450 (underlay 1500)
constexpr uint32_t tcp_8950 = tcp_frame(8950);    // tenant MTU 8950 (underlay 9000)
constexpr uint32_t min_frame = charged_bytes(64);
// A tenant TCP super-frame that the tap uplink sends as one VXLAN frame, charged as the most a
// frame can be (at 100 Mbit/s it outweighs the default 64 KiB burst).
constexpr uint32_t tcp_superframe = largest_charged_frame_bytes;

struct source {
    std::vector<uint32_t> sizes{tcp_1450};
    std::size_t next = 0;
    bool active = true;
    // Every `pause_every`-th poll (0: never) the class can send nothing although packets wait,
    // as a QP whose send window is full: it is not backlogged for that grant.
    uint64_t pause_every = 0;
    std::deque<uint32_t> queue;
};

class egress_sim {
  public:
    egress_sim(scheduler& s, uint64_t start_ns, uint64_t poll_ns, uint32_t seed = 1)
        : _s(s), _now(start_ns), _poll_ns(poll_ns), _rng(seed) {}

    void add_vnic(uint32_t vnic, std::vector<uint32_t> rdma_sizes,
                  std::vector<uint32_t> tcp_sizes) {
        auto& v = _vnics[vnic];
        v[index_of(traffic_class::rdma)].sizes = std::move(rdma_sizes);
        v[index_of(traffic_class::tcp)].sizes = std::move(tcp_sizes);
    }
    source& src(uint32_t vnic, traffic_class c) { return _vnics[vnic][index_of(c)]; }
    void set_active(uint32_t vnic, traffic_class c, bool active) { src(vnic, c).active = active; }

    // Polls until the clock reaches `_now + ns`.
    void run_for(uint64_t ns) {
        const uint64_t end = _now + ns;
        while (_now < end) {
            step();
            tick();
        }
    }

    // Moves the clock on by one poll period.
    void tick() {
        uint64_t dt = _poll_ns;
        if (jitter) {
            dt = std::uniform_int_distribution<uint64_t>(_poll_ns / 2, _poll_ns * 3 / 2)(_rng);
        }
        _now += std::max<uint64_t>(dt, 1);
    }

    // One poll: top up the active queues, grant, send, commit.
    void step() {
        ++_polls;
        if (rdma_paced_bytes_per_poll != 0) {
            _paced_tokens = std::min<uint64_t>(_paced_tokens + rdma_paced_bytes_per_poll,
                                               4 * rdma_paced_bytes_per_poll + 65536);
        }
        for (auto& [vnic, classes] : _vnics) {
            for (traffic_class c : all_classes) {
                source& q = classes[index_of(c)];
                while (q.active && q.queue.size() < queue_target) {
                    const uint32_t b = q.sizes[q.next++ % q.sizes.size()];
                    q.queue.push_back(b);
                    _s.enqueue(vnic, c, b);
                }
            }
            // Like the worker, say how much one burst can carry: the first
            // `max_packets_per_burst` queued packets of each class.
            class_limits burst_limits = limits;
            for (traffic_class c : all_classes) {
                const source& q = classes[index_of(c)];
                uint64_t room = 0;
                for (std::size_t i = 0; i < q.queue.size() && i < max_packets_per_burst; ++i) {
                    room += q.queue[i];
                }
                if (q.pause_every != 0 && _polls % q.pause_every == 0) {
                    room = 0;
                } else if (c == traffic_class::rdma && rdma_room_untold && room > 0) {
                    continue;  // backlogged, but how much one burst carries is not said
                }
                burst_limits[index_of(c)] = std::min(burst_limits[index_of(c)], room);
            }
            last_grant = _s.grant(_now, vnic, burst_limits);
            ++grants;
            for (traffic_class c : all_classes) {
                source& q = classes[index_of(c)];
                uint64_t sent = 0;
                uint32_t packets = 0;
                const bool paced = c == traffic_class::rdma && rdma_paced_bytes_per_poll != 0;
                while (sent < last_grant[c] && !q.queue.empty() &&
                       packets < max_packets_per_burst &&
                       !(decline_rdma && c == traffic_class::rdma)) {
                    if (paced && _paced_tokens < q.queue.front()) {
                        _s.held_back(vnic, c);  // as the engine says of a paced QP
                        break;
                    }
                    if (paced) {
                        _paced_tokens -= q.queue.front();
                    }
                    sent += q.queue.front();
                    q.queue.pop_front();
                    ++packets;
                }
                if (packets != 0) {
                    _s.commit(vnic, c, sent, packets);
                }
            }
        }
    }

    uint64_t now() const { return _now; }
    uint64_t sent(uint32_t vnic, traffic_class c) const { return _s.counters(vnic, c).bytes; }

    bool jitter = true;                   // poll period uniform in [poll/2, 3·poll/2]
    std::size_t queue_target = 128;       // packets an active source keeps queued
    uint32_t max_packets_per_burst = 64;  // per class per poll
    bool decline_rdma = false;            // the RDMA queue is blocked: granted, never sent
    // The rdma class's limit is its backlog, not what one burst can carry (a worker that does
    // not pass the engine's per-poll packet cap on), so a grant may be larger than what it
    // sends.
    bool rdma_room_untold = false;
    // A paced RDMA class (a DCQCN-cut QP): at most this many bytes per poll on average (a few
    // polls' worth may be saved up), 0 for none; a grant it leaves for that reason is reported
    // as the engine reports it (scheduler::held_back).
    uint64_t rdma_paced_bytes_per_poll = 0;
    class_limits limits = no_limits;
    burst_grant last_grant;
    uint64_t grants = 0;

  private:
    scheduler& _s;
    uint64_t _now;
    uint64_t _paced_tokens = 0;
    uint64_t _poll_ns;
    std::mt19937_64 _rng;
    uint64_t _polls = 0;
    std::map<uint32_t, std::array<source, class_count>> _vnics;
};

// A poll period that moves about `bytes` per poll at `rate_bps`, between 200 ns and 100 µs.
inline uint64_t poll_for(uint64_t rate_bps, uint64_t bytes = 4096) {
    const uint64_t ns = bytes * 8'000'000'000 / rate_bps;
    return std::clamp<uint64_t>(ns, 200, 100'000);
}

inline vnic_qos two_class(uint64_t rate_bps, uint32_t w_rdma, uint32_t w_tcp, uint64_t burst = 0) {
    vnic_qos q;
    q.rate_bps = rate_bps;
    q.burst_bytes = burst != 0 ? burst : default_burst_bytes(rate_bps);
    q.classes[index_of(traffic_class::rdma)].weight = w_rdma;
    q.classes[index_of(traffic_class::tcp)].weight = w_tcp;
    return q;
}

// A host uplink that never binds.
inline uplink_qos wide_uplink() {
    return {max_rate_bps, max_burst_bytes};
}

}  // namespace jakiro::qos::sim
