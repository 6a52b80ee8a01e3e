#pragma once
// The QoS model shared by the egress scheduler and the ingress meter: the two traffic classes,
// per-vNIC rate, burst and class weights (docs/architecture.md §6), and which bytes a packet is
// charged. Plain data; `validate` runs on the control side (it allocates its message).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace jakiro::qos {

enum class traffic_class : uint8_t { rdma = 0, tcp = 1 };
constexpr std::size_t class_count = 2;
constexpr std::array<traffic_class, class_count> all_classes = {traffic_class::rdma,
                                                                traffic_class::tcp};

constexpr std::size_t index_of(traffic_class c) {
    return static_cast<std::size_t>(c);
}
constexpr const char* class_name(traffic_class c) {
    return c == traffic_class::rdma ? "rdma" : "tcp";
}

// Weights are the small integers an operator writes ("rdma: 3, tcp: 1"). Bounding them keeps the
// scheduler's virtual time exact in 64-bit integers (one byte advances it by at most 1000).
constexpr uint32_t max_weight = 1000;

// Rates are bit/s of charged bytes (see `charged_bytes`). 2 Tbit/s is far above any port a
// software dataplane drives and keeps the token arithmetic within 64 bits (token_bucket.hh).
constexpr uint64_t max_rate_bps = 2'000'000'000'000;
// 256 MiB: a burst is a few milliseconds of traffic; the bound keeps a bucket and one burst of
// debt within 2^62 token units (token_bucket.hh).
constexpr uint64_t max_burst_bytes = uint64_t{256} << 20;

struct class_qos {
    uint32_t weight = 1;   // share of the vNIC rate while both classes are backlogged
    uint64_t min_bps = 0;  // guaranteed rate, whatever the weights say (0: none)
    uint64_t max_bps = 0;  // cap, even when the other class is idle (0: none)

    bool operator==(const class_qos&) const = default;
};

struct vnic_qos {
    uint64_t rate_bps = 0;
    uint64_t burst_bytes = 0;
    std::array<class_qos, class_count> classes{};  // by index_of(traffic_class)

    bool operator==(const vnic_qos&) const = default;
};

struct uplink_qos {
    uint64_t rate_bps = 0;
    uint64_t burst_bytes = 0;
};

// Which bytes count. A vNIC's rate is a rate of *outer frames on the underlay*: the inner
// Ethernet frame as the tenant port hands it over (destination MAC to the end of the payload, no
// FCS; for RoCEv2 the inner frame includes BTH, extension headers and ICRC) plus the 50 bytes of
// VXLAN encapsulation jakirod adds (outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8, RFC 7348).
// Those 50 bytes are real load on the uplink (3.4 % of a 1450-byte TCP frame, 4.7 % of a 1024-byte
// RDMA payload), so leaving them out would let a vNIC exceed its rate on the wire. Same-host
// traffic, which is not encapsulated, is charged the same so that a vNIC's share does not depend
// on where its peer runs. The physical-layer overhead (preamble and SFD 8, FCS 4, inter-frame gap
// 12) is not charged by default: jakirod's underlay is a veth, memif or TAP where none of it
// exists, and it is also absent from what DPDK's `obytes` and the kernel's interface counters
// report, which is what the rates are checked against. A host on a physical Ethernet port may
// charge it by passing `ethernet_l1_overhead_bytes`.
constexpr uint32_t vxlan_overhead_bytes = 50;
constexpr uint32_t ethernet_l1_overhead_bytes = 24;

constexpr uint32_t charged_bytes(uint32_t inner_frame_bytes, uint32_t l1_overhead_bytes = 0) {
    return inner_frame_bytes + vxlan_overhead_bytes + l1_overhead_bytes;
}

// The most one queued frame can be charged: a tenant's TCP super-frame (an IPv4 packet of up to
// 65 535 bytes) that leaves as at most 64 segments (overlay/superframe.hh), each carrying its
// inner Ethernet, IPv4 and TCP headers (up to 134 bytes) and the VXLAN encapsulation. A bucket
// must be able to go this far into debt, or a super-frame sent on the last token would be partly
// free; the scheduler's fairness allowances are counted in it.
constexpr uint32_t largest_charged_frame_bytes = 65'535 + 64 * (14 + 120 + vxlan_overhead_bytes);

// A class's share of its vNIC's rate: the rate split by weight (what it gets while both classes
// are backlogged), at least its min, at most its max. The ingress meter signals above it;
// `jakiroctl qos`, `jakiroctl top` and the metrics show it. `q` must pass `validate`.
constexpr uint64_t class_share_bps(const vnic_qos& q, traffic_class c) {
    const class_qos& k = q.classes[index_of(c)];
    uint64_t weights = 0;
    for (const class_qos& each : q.classes) {
        weights += each.weight;
    }
    // rate <= 2 Tbit/s and weight <= 1000: the product stays below 2^51.
    uint64_t share = weights == 0 ? q.rate_bps / class_count : q.rate_bps * k.weight / weights;
    share = share > k.min_bps ? share : k.min_bps;
    if (k.max_bps != 0 && share > k.max_bps) {
        share = k.max_bps;
    }
    return share;
}

// A burst that lets the scheduler hold its rate whatever the caller's poll period: four
// milliseconds of traffic, and never less than 64 KiB (seven 9000-byte frames). A software
// shaper's worker can lose its core for a few milliseconds on a shared host; with a 1 ms bucket
// the tokens of that gap were lost and a backlogged vNIC fell to 60 % of its rate on a busy
// 2-core box. Four ms is what Linux HTB's default buffer gives at HZ=250, and stays below the
// receiving meter's 5 ms of jitter allowance (ingress_meter.hh), so a full burst still passes it.
// A QP's DCQCN pacer holds as much (rate_control.hh), so that one grant after such a gap can be
// taken by the rdma class, not given to tcp.
constexpr uint64_t default_burst_ns = 4'000'000;
constexpr uint64_t default_burst_bytes(uint64_t rate_bps) {
    const uint64_t timed = rate_bps / 8 * default_burst_ns / 1'000'000'000;
    return timed > (64u << 10) ? timed : (64u << 10);
}

// Empty when the configuration is usable, otherwise what is wrong ("classes.rdma.weight: 0 is
// not in 1..1000"). Rules: rate 1 bit/s..2 Tbit/s; burst 1 B..256 MiB; weight 1..1000; the
// mins sum to at most the rate; a class's max, when set, is at least its min.
std::string validate(const vnic_qos& q);
std::string validate(const uplink_qos& q);

}  // namespace jakiro::qos
