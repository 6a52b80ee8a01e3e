#pragma once
// The receiving half of DHTB (docs/architecture.md §6): jakirod meters each vNIC's ingress per
// class and, where a class is above its share, signals the senders instead of queueing:
//  - ECN-capable inner packets (ECT(0), ECT(1)) are marked CE and delivered, so TCP with ECN
//    backs off;
//  - not-ECT packets are delivered while the excess before them is within one burst, then
//    dropped (before, not after: a TCP super-frame can outweigh a whole burst);
//  - anything beyond `hard_limit_bursts` of excess is dropped, marked or not (a sender that
//    ignores CE cannot take the vNIC);
//  - RDMA packets above the share, and RDMA packets that arrive already CE-marked, make the
//    meter ask for a RoCEv2 CNP to the sending QP, at most one per QP per 50 µs (DCQCN's NP).
//
// "Above its share" is decided by two buckets, both of which must be in debt: the vNIC's (rate,
// burst), so nothing is signalled while the vNIC as a whole is within its rate (work
// conservation: a class may use what the other leaves), and the class's share bucket (rate =
// vNIC rate × weight / sum of weights, at least the class's min), so that when the vNIC is over
// its rate only the class beyond its weighted share is signalled. A class's max, when set, is a
// bucket of its own: above it the class is signalled whatever the vNIC does.
//
// Bytes are charged bytes (config.hh): the inner frame plus 50, as the sender's scheduler
// charged them. Delivered packets (marked or not) are charged; dropped ones are not.
//
// Thread-safety: a meter belongs to the worker that receives for the vNIC; `counters` may be
// read from any thread.

#include <array>
#include <cstdint>

#include "qos/config.hh"
#include "qos/rate_control.hh"
#include "qos/token_bucket.hh"
#include "stats/counter.hh"

namespace jakiro::qos {

// The two ECN bits of the inner IPv4 TOS byte (RFC 3168).
enum class ecn : uint8_t { not_ect = 0, ect1 = 1, ect0 = 2, ce = 3 };

enum class ingress_action : uint8_t { pass, mark_ce, drop };

struct ingress_verdict {
    ingress_action action = ingress_action::pass;
    bool send_cnp = false;  // send a CNP to the packet's source QP
};

struct ingress_params {
    uint64_t cnp_interval_ns = default_cnp_interval_ns;
    // ECT packets are marked while the excess is within this many bursts, then dropped.
    uint32_t hard_limit_bursts = 4;
    // The meter's burst is at least this long at the vNIC's rate. It runs at processing time,
    // not arrival time (af_packet and memif give no receive timestamps), so a worker that was
    // off its core for a few milliseconds meets what arrived meanwhile as one clump; a burst of
    // one millisecond would read that as excess and signal senders that kept to the rate.
    uint64_t processing_jitter_ns = 5'000'000;
};

struct ingress_class_counters {
    uint64_t packets = 0;  // delivered, marked or not
    uint64_t bytes = 0;
    uint64_t ce_marked = 0;
    uint64_t dropped = 0;
    uint64_t cnps = 0;  // CNPs asked for
};

// A meter's buckets (the vNIC's, each class's share and max), for a restarted jakirod.
struct meter_bucket_states {
    token_bucket_state vnic;
    std::array<token_bucket_state, class_count> share{};
    std::array<token_bucket_state, class_count> max{};
};

class ingress_meter {
  public:
    ingress_meter() = default;
    ingress_meter(const vnic_qos& q, uint64_t now_ns, const ingress_params& p = {});

    // Live change of rate, burst, weights, min, max; debt and counters are kept.
    void configure(const vnic_qos& q, uint64_t now_ns);

    // One packet of class `c`, `bytes` charged bytes, arriving with ECN codepoint `codepoint`.
    // `qp` is the CNP state of the sending QP (RDMA; nullptr for TCP/IP).
    ingress_verdict on_packet(uint64_t now_ns, traffic_class c, uint32_t bytes, ecn codepoint,
                              cnp_pacer* qp);

    // The buckets now, and their continuation in another meter (token_bucket::resume).
    meter_bucket_states buckets() const;
    void resume(const meter_bucket_states& b, uint64_t now_ns);

    ingress_class_counters counters(traffic_class c) const;
    uint64_t share_bps(traffic_class c) const { return _cls[index_of(c)].share.rate_bps(); }

  private:
    struct class_state {
        token_bucket share;
        token_bucket max_bucket;
        bool has_max = false;
        stats::counter packets, bytes, ce_marked, dropped, cnps;
    };

    void charge(class_state& k, uint32_t bytes);

    ingress_params _p;
    token_bucket _vnic;
    uint64_t _burst_bytes = 0;
    std::array<class_state, class_count> _cls;
};

}  // namespace jakiro::qos
