// DHTB scheduler cost: nanoseconds per scheduling decision (one grant + the commits of both
// classes, as the worker does once per burst per vNIC) and per packet, for 1, 16 and 256 vNICs
// visited round robin (256 vNICs' state no longer fits in L1). Both classes backlogged, 5 Gbit/s
// vNICs, 1514-byte TCP and 1132-byte RDMA frames. The simulated clock advances so that each
// grant carries about `packets per burst` packets: 32 (a full tx burst) or 1 (a decision per
// packet, the worst case). Also the per-packet cost of DCQCN pacing and of the ingress meter.
// Plain C++: no EAL, Google Benchmark's own main.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>

#include "qos/config.hh"
#include "qos/ingress_meter.hh"
#include "qos/rate_control.hh"
#include "qos/scheduler.hh"

namespace jakiro::qos {
namespace {

constexpr uint64_t gbit = 1'000'000'000;
constexpr uint32_t tcp_frame = charged_bytes(14 + 1450);
constexpr uint32_t rdma_frame = charged_bytes(14 + 20 + 8 + 12 + 1024 + 4);

// Reported as ns per packet and ns per decision (one grant and its commits).
void set_per_packet(benchmark::State& state, uint64_t packets) {
    state.SetItemsProcessed(static_cast<int64_t>(packets));
    state.counters["pkts/burst"] = static_cast<double>(packets) /
                                   static_cast<double>(std::max<int64_t>(state.iterations(), 1));
    state.counters["per_packet"] = benchmark::Counter(
        static_cast<double>(packets), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    state.counters["per_decision"] =
        benchmark::Counter(static_cast<double>(state.iterations()),
                           benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// range(0): vNICs; range(1): packets per burst.
void BM_SchedulerDecision(benchmark::State& state) {
    const auto vnics = static_cast<uint32_t>(state.range(0));
    const auto per_burst = static_cast<uint64_t>(state.range(1));
    scheduler s(vnics, {max_rate_bps, max_burst_bytes}, 0);  // the uplink never binds
    vnic_qos q;
    q.rate_bps = 5 * gbit;
    q.burst_bytes = default_burst_bytes(q.rate_bps);
    q.classes[index_of(traffic_class::rdma)].weight = 3;
    q.classes[index_of(traffic_class::tcp)].weight = 1;
    for (uint32_t v = 0; v < vnics; ++v) {
        s.configure(0, v, q);
        s.enqueue(v, traffic_class::rdma, uint64_t{1} << 40);
        s.enqueue(v, traffic_class::tcp, uint64_t{1} << 40);
    }
    // Time for `per_burst` average frames at 5 Gbit/s, spread over the vNICs visited.
    const uint64_t burst_ns = per_burst * (tcp_frame + rdma_frame) / 2 * 8 / 5;
    const uint64_t step_ns = std::max<uint64_t>(burst_ns / vnics, 1);
    uint64_t now = 1'000'000'000;  // past the initial bursts' worth of time
    uint32_t v = 0;
    uint64_t packets = 0;
    for (auto _ : state) {
        now += step_ns;
        const burst_grant g = s.grant(now, v);
        benchmark::DoNotOptimize(g);
        const uint64_t nr = (g[traffic_class::rdma] + rdma_frame - 1) / rdma_frame;
        const uint64_t nt = (g[traffic_class::tcp] + tcp_frame - 1) / tcp_frame;
        if (nr != 0) {
            s.commit(v, traffic_class::rdma, nr * rdma_frame, static_cast<uint32_t>(nr));
        }
        if (nt != 0) {
            s.commit(v, traffic_class::tcp, nt * tcp_frame, static_cast<uint32_t>(nt));
        }
        packets += nr + nt;
        v = v + 1 == vnics ? 0 : v + 1;
    }
    set_per_packet(state, packets);
}
BENCHMARK(BM_SchedulerDecision)
    ->ArgNames({"vnics", "pkts_per_burst"})
    ->Args({1, 32})
    ->Args({16, 32})
    ->Args({256, 32})
    ->Args({1, 1})
    ->Args({16, 1})
    ->Args({256, 1});

// A QP's DCQCN pacer: grant + on_sent per packet, timers running.
void BM_DcqcnPacePacket(benchmark::State& state) {
    dcqcn_rate r(dcqcn_params{.line_rate_bps = 10 * gbit}, 0);
    r.on_cnp(0);
    uint64_t now = 0;
    uint64_t packets = 0;
    for (auto _ : state) {
        now += 800;  // about the 4 KiB packet time at 5 Gbit/s: grants alternate
        if (r.grant(now) > 0) {
            r.on_sent(4204);
            ++packets;
        }
        if ((now & 0xFFFFF) < 800) {
            r.on_cnp(now);  // a CNP every ~1 ms keeps it out of steady state
        }
    }
    benchmark::DoNotOptimize(packets);
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_DcqcnPacePacket);

// The receiver's per-packet decision, with the vNIC above its rate (marking and CNP pacing).
void BM_IngressMeterPacket(benchmark::State& state) {
    vnic_qos q;
    q.rate_bps = 5 * gbit;
    q.burst_bytes = default_burst_bytes(q.rate_bps);
    q.classes[0].weight = 3;
    q.classes[1].weight = 1;
    ingress_meter m(q, 0);
    cnp_pacer qp;
    uint64_t now = 0;
    uint64_t i = 0;
    for (auto _ : state) {
        now += 1000;  // 8 Gbit/s of 1132-byte frames offered to a 5 Gbit/s vNIC
        const traffic_class c = (++i & 3) == 0 ? traffic_class::tcp : traffic_class::rdma;
        const ingress_verdict v =
            m.on_packet(now, c, rdma_frame, ecn::ect0, c == traffic_class::rdma ? &qp : nullptr);
        benchmark::DoNotOptimize(v);
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_IngressMeterPacket);

}  // namespace
}  // namespace jakiro::qos

BENCHMARK_MAIN();
