#include "qos/scheduler.hh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/unit/qos/egress_sim.hh"

namespace jakiro::qos {
namespace {

using namespace sim;

constexpr uint64_t us = 1'000;
constexpr uint64_t ms = 1'000'000;
constexpr uint64_t gbit = 1'000'000'000;
constexpr uint64_t mbit = 1'000'000;
constexpr uint32_t v0 = 0;
constexpr auto rdma = traffic_class::rdma;
constexpr auto tcp = traffic_class::tcp;

// Bytes per class sent during the next `ns` of simulation.
struct window {
    uint64_t rdma = 0;
    uint64_t tcp = 0;
    uint64_t ns = 0;
    uint64_t total() const { return rdma + tcp; }
    double rate_bps() const { return static_cast<double>(total()) * 8e9 / static_cast<double>(ns); }
    double rate_bps(traffic_class c) const {
        return static_cast<double>(c == traffic_class::rdma ? rdma : tcp) * 8e9 /
               static_cast<double>(ns);
    }
    double share(traffic_class c) const {
        return static_cast<double>(c == traffic_class::rdma ? rdma : tcp) /
               static_cast<double>(total());
    }
};

window measure(egress_sim& sim, uint32_t vnic, uint64_t ns) {
    const uint64_t r0 = sim.sent(vnic, rdma);
    const uint64_t t0 = sim.sent(vnic, tcp);
    sim.run_for(ns);
    return {sim.sent(vnic, rdma) - r0, sim.sent(vnic, tcp) - t0, ns};
}

// Long enough to spend the initial burst.
uint64_t warmup_ns(const vnic_qos& q) {
    return std::max<uint64_t>(2 * ms, 4 * q.burst_bytes * 8'000'000'000 / q.rate_bps);
}

struct packet_mix {
    const char* name;
    std::vector<uint32_t> rdma;
    std::vector<uint32_t> tcp;
    uint32_t largest() const {
        return std::max(*std::max_element(rdma.begin(), rdma.end()),
                        *std::max_element(tcp.begin(), tcp.end()));
    }
};

const std::vector<packet_mix>& mixes() {
    static const std::vector<packet_mix> m = {
        {"underlay 1500: RDMA MTU 1024, TCP MSS 1450", {rdma_1024}, {tcp_1450}},
        {"underlay 9000: RDMA MTU 4096, TCP 8950", {rdma_4096}, {tcp_8950}},
        {"mixed 64 B .. 9000 B",
         {rdma_1024, rdma_4096, rdma_frame(64), rdma_frame(256), rdma_frame(4000)},
         {min_frame, tcp_1450, tcp_frame(576), tcp_8950, tcp_frame(40), tcp_frame(1200)}},
        // Last: the share test over every weight leaves it out (at 100 Mbit/s a case takes
        // seconds of simulation, too slow under ASan); the 3:1 test runs it at every rate.
        {"tap uplink: RDMA MTU 1024, TCP super-frames", {rdma_1024}, {tcp_superframe}},
    };
    return m;
}

// 1 KB RoCE packets against TCP super-frames at 3:1 and `rate`, polled every `poll_ns`, the
// simulator set up by `tune`: what the classes sent over 500 super-frames' time after warm-up.
template <typename Tune>
window rdma_against_superframes(uint64_t rate, uint64_t poll_ns, Tune&& tune) {
    scheduler s(1, wide_uplink(), 0);
    const vnic_qos q = two_class(rate, 3, 1);
    s.configure(0, v0, q);
    egress_sim sim(s, 0, poll_ns);
    sim.add_vnic(v0, {rdma_1024}, {tcp_superframe});
    tune(sim);
    sim.run_for(warmup_ns(q));
    return measure(sim, v0, 500 * uint64_t{tcp_superframe} * 8'000'000'000 / rate);
}

// Both classes backlogged for long enough that each sends at least 500 of the largest packet;
// returns what they sent after the initial burst is spent.
window run_backlogged(uint64_t rate, uint32_t w_rdma, uint32_t w_tcp, const packet_mix& mix,
                      uint32_t seed = 1) {
    scheduler s(1, wide_uplink(), 0);
    const vnic_qos q = two_class(rate, w_rdma, w_tcp);
    s.configure(0, v0, q);
    egress_sim sim(s, 0, poll_for(rate), seed);
    sim.add_vnic(v0, mix.rdma, mix.tcp);
    sim.run_for(warmup_ns(q));
    const double smallest_share = static_cast<double>(std::min(w_rdma, w_tcp)) / (w_rdma + w_tcp);
    const auto ns = static_cast<uint64_t>(500.0 * mix.largest() * 8e9 /
                                          (static_cast<double>(rate) * smallest_share));
    return measure(sim, v0, std::max(ns, 5 * ms));
}

TEST(Scheduler, SharesFollowWeightsWithinTwoPercent) {
    const std::vector<std::pair<uint32_t, uint32_t>> weights = {{1, 1}, {3, 1}, {1, 3}, {1, 9},
                                                                {9, 1}, {7, 3}, {3, 7}, {5, 2}};
    const std::vector<uint64_t> rates = {100 * mbit, 1 * gbit,  2500 * mbit, 5 * gbit,
                                         10 * gbit,  20 * gbit, 40 * gbit,   100 * gbit};
    int cases = 0;
    double worst = 0;
    for (const packet_mix& mix : mixes()) {
        if (mix.tcp[0] == tcp_superframe) {
            continue;
        }
        for (auto [wr, wt] : weights) {
            for (uint64_t rate : rates) {
                SCOPED_TRACE(std::string(mix.name) + ", " + std::to_string(wr) + ":" +
                             std::to_string(wt) + " at " + std::to_string(rate) + " bit/s");
                const window w = run_backlogged(rate, wr, wt, mix, ++cases);
                const double want_rdma = static_cast<double>(wr) / (wr + wt);
                EXPECT_NEAR(w.share(rdma) / want_rdma, 1.0, 0.02);
                EXPECT_NEAR(w.share(tcp) / (1.0 - want_rdma), 1.0, 0.02);
                worst = std::max({worst, std::abs(w.share(rdma) / want_rdma - 1.0),
                                  std::abs(w.share(tcp) / (1.0 - want_rdma) - 1.0)});
                // Work conserving while backlogged, and never above the vNIC rate.
                EXPECT_GT(w.rate_bps(), 0.98 * static_cast<double>(rate));
                EXPECT_LE(w.total(), rate / 8 * w.ns / 1'000'000'000 + 2 * mix.largest() +
                                         rate / 8 * poll_for(rate) * 2 / 1'000'000'000);
            }
        }
    }
    EXPECT_EQ(cases, 192);
    std::printf("worst relative share error over %d cases: %.3f %%\n", cases, 100 * worst);
}

// Linux HTB with default bursts drifts from 3:1 to about 2.3:1 at 20 Gbit/s (the baseline to beat):
// its quantum and burst are computed in coarse ticks, so at high rates a class borrows in
// chunks larger than the ratio can absorb. Here the ratio is a property of byte-exact virtual
// clocks and integer token units, so it holds at every rate.
TEST(Scheduler, HoldsThreeToOneAtEveryRateWhereLinuxHtbDrifts) {
    const std::vector<uint64_t> rates = {100 * mbit, 200 * mbit, 500 * mbit, 1 * gbit,  2 * gbit,
                                         5 * gbit,   10 * gbit,  15 * gbit,  20 * gbit, 25 * gbit,
                                         40 * gbit,  50 * gbit,  80 * gbit,  100 * gbit};
    for (uint64_t rate : rates) {
        for (const packet_mix& mix : mixes()) {
            SCOPED_TRACE(std::string(mix.name) + " at " + std::to_string(rate) + " bit/s");
            const window w = run_backlogged(rate, 3, 1, mix);
            const double ratio = static_cast<double>(w.rdma) / static_cast<double>(w.tcp);
            EXPECT_NEAR(ratio / 3.0, 1.0, 0.02) << "ratio " << ratio;
            if (rate == 20 * gbit && mix.rdma.size() == 1 && mix.rdma[0] == rdma_1024) {
                std::printf("3:1 at 20 Gbit/s (MTU 1500 mix): %.4f:1\n", ratio);
            }
        }
    }
}

TEST(Scheduler, IdleClassShareGoesToBusyClass) {
    const uint64_t rate = 10 * gbit;
    scheduler s(1, wide_uplink(), 0);
    const vnic_qos q = two_class(rate, 3, 1);
    s.configure(0, v0, q);
    egress_sim sim(s, 0, poll_for(rate));
    sim.add_vnic(v0, {rdma_4096}, {tcp_1450});

    // TCP alone: it gets the whole vNIC, not its quarter.
    sim.set_active(v0, rdma, false);
    sim.run_for(warmup_ns(q));
    window w = measure(sim, v0, 20 * ms);
    EXPECT_EQ(w.rdma, 0u);
    EXPECT_GT(w.rate_bps(tcp), 0.98 * rate);

    // RDMA joins: 3:1 from the start, no catch-up owed for the time it was idle.
    sim.set_active(v0, rdma, true);
    w = measure(sim, v0, 1 * ms);
    EXPECT_NEAR(w.share(rdma), 0.75, 0.02);
    w = measure(sim, v0, 20 * ms);
    EXPECT_NEAR(w.share(rdma) / 0.75, 1.0, 0.02);

    // TCP leaves: once its queue drains, RDMA gets the whole vNIC.
    sim.set_active(v0, tcp, false);
    sim.run_for(1 * ms);
    w = measure(sim, v0, 20 * ms);
    EXPECT_EQ(w.tcp, 0u);
    EXPECT_GT(w.rate_bps(rdma), 0.98 * rate);
    EXPECT_LT(w.rate_bps(rdma), 1.01 * rate);
}

TEST(Scheduler, IdleClassDoesNotBankCredit) {
    const uint64_t rate = 5 * gbit;
    scheduler s(1, wide_uplink(), 0);
    s.configure(0, v0, two_class(rate, 1, 1));
    egress_sim sim(s, 0, poll_for(rate));
    sim.add_vnic(v0, {rdma_1024}, {tcp_1450});
    sim.set_active(v0, tcp, false);
    sim.run_for(100 * ms);  // TCP idle for a long time
    sim.set_active(v0, tcp, true);
    // Had TCP banked its idle share it would now take everything; it takes half.
    const window w = measure(sim, v0, 200 * us);
    EXPECT_NEAR(w.share(tcp), 0.5, 0.05);
}

// A TCP super-frame puts the tcp class far ahead at once (64 KB at weight 1 is worth 192 KB of
// rdma at 3:1). A QP whose send window is full for one grant in fifty while it catches up is
// briefly idle: it must not lose what the weights owe it for that frame, or tcp takes a third
// more than its share (2.3:1 measured with super-frames on the tap uplink at 300 Mbit/s).
TEST(Scheduler, AClassPausingForOneGrantKeepsWhatAnotherClassesSuperFrameOwesIt) {
    for (uint64_t rate : {300 * mbit, 1 * gbit, 5 * gbit}) {
        SCOPED_TRACE(std::to_string(rate) + " bit/s");
        const window w = rdma_against_superframes(
            rate, poll_for(rate), [](egress_sim& sim) { sim.src(v0, rdma).pause_every = 200; });
        EXPECT_NEAR(static_cast<double>(w.rdma) / static_cast<double>(w.tcp) / 3.0, 1.0, 0.03);
        EXPECT_GT(w.rate_bps(), 0.97 * static_cast<double>(rate));
    }
}

// A grant after a TCP super-frame may be more than the rdma class sends before the next one:
// its QPs' window empties, or its sender does not say how much one poll carries. Taking part
// of a grant is not being blocked: the class must keep what the frame owes it (2.0-2.5 instead
// of 3 was measured at 5 Gbit/s with 1 KB RoCE packets on the tap uplink when it was pulled up
// to the tcp class's clock each time).
TEST(Scheduler, AClassThatCannotSendAWholeGrantInOnePollKeepsItsShare) {
    for (uint64_t rate : {1 * gbit, 5 * gbit}) {
        SCOPED_TRACE(std::to_string(rate) + " bit/s");
        // Polls of 50 µs, a loop iteration of a busy worker on a shared core.
        const window w = rdma_against_superframes(rate, 50 * us, [](egress_sim& sim) {
            sim.rdma_room_untold = true;
            sim.max_packets_per_burst = 32;
        });
        EXPECT_NEAR(static_cast<double>(w.rdma) / static_cast<double>(w.tcp) / 3.0, 1.0, 0.03);
        EXPECT_GT(w.rate_bps(), 0.97 * static_cast<double>(rate));
    }
}

TEST(Scheduler, MinIsGuaranteed) {
    const uint64_t rate = 10 * gbit;
    {
        // Weights alone would give TCP 1 Gbit/s; its min of 3 Gbit/s wins.
        scheduler s(1, wide_uplink(), 0);
        vnic_qos q = two_class(rate, 9, 1);
        q.classes[index_of(tcp)].min_bps = 3 * gbit;
        s.configure(0, v0, q);
        egress_sim sim(s, 0, poll_for(rate));
        sim.add_vnic(v0, {rdma_4096}, {tcp_1450});
        sim.run_for(warmup_ns(q));
        const window w = measure(sim, v0, 50 * ms);
        EXPECT_NEAR(w.rate_bps(tcp) / (3.0 * gbit), 1.0, 0.02);
        EXPECT_NEAR(w.rate_bps(rdma) / (7.0 * gbit), 1.0, 0.02);
    }
    {
        // A min below the weighted share changes nothing: 1:3 gives TCP 7.5 Gbit/s.
        scheduler s(1, wide_uplink(), 0);
        vnic_qos q = two_class(rate, 1, 3);
        q.classes[index_of(tcp)].min_bps = 1 * gbit;
        s.configure(0, v0, q);
        egress_sim sim(s, 0, poll_for(rate));
        sim.add_vnic(v0, {rdma_4096}, {tcp_1450});
        sim.run_for(warmup_ns(q));
        const window w = measure(sim, v0, 50 * ms);
        EXPECT_NEAR(w.share(tcp) / 0.75, 1.0, 0.02);
    }
}

TEST(Scheduler, AClassMaxCapsItsRateWhetherOrNotTheOtherClassSends) {
    const uint64_t rate = 10 * gbit;
    scheduler s(1, wide_uplink(), 0);
    vnic_qos q = two_class(rate, 3, 1);
    q.classes[index_of(rdma)].max_bps = 2 * gbit;
    s.configure(0, v0, q);
    egress_sim sim(s, 0, poll_for(rate));
    sim.add_vnic(v0, {rdma_4096}, {tcp_1450});
    sim.run_for(warmup_ns(q));
    // Weights would give RDMA 7.5 Gbit/s; its max holds it at 2, and TCP takes the rest.
    window w = measure(sim, v0, 50 * ms);
    EXPECT_NEAR(w.rate_bps(rdma) / (2.0 * gbit), 1.0, 0.02);
    EXPECT_NEAR(w.rate_bps(tcp) / (8.0 * gbit), 1.0, 0.02);
    // Alone, RDMA still stops at its max: the cap is not work conserving.
    sim.set_active(v0, tcp, false);
    sim.run_for(5 * ms);
    w = measure(sim, v0, 50 * ms);
    EXPECT_EQ(w.tcp, 0u);
    EXPECT_NEAR(w.rate_bps(rdma) / (2.0 * gbit), 1.0, 0.02);
}

TEST(Scheduler, BurstAllowsShortExcessThenConverges) {
    const uint64_t rate = 5 * gbit;
    const uint64_t burst = 512 * 1024;
    scheduler s(1, wide_uplink(), 0);
    s.configure(0, v0, two_class(rate, 3, 1, burst));
    egress_sim sim(s, 0, poll_for(rate));
    // Deep queues and bursts, so that the grants (not what one burst can carry) bind.
    sim.queue_target = 1024;
    sim.max_packets_per_burst = 1024;
    sim.add_vnic(v0, {rdma_1024}, {tcp_1450});
    sim.set_active(v0, rdma, false);
    sim.set_active(v0, tcp, false);
    sim.run_for(10 * ms);  // idle: the bucket fills to its burst
    sim.set_active(v0, rdma, true);
    sim.set_active(v0, tcp, true);

    // The first 200 µs carry the burst on top of the rate, and not more.
    const uint64_t at_rate = rate / 8 * 200 * us / 1'000'000'000;
    window w = measure(sim, v0, 200 * us);
    EXPECT_GT(w.total(), at_rate + burst * 9 / 10);
    EXPECT_LE(w.total(),
              at_rate + burst + 2 * tcp_1450 + rate / 8 * poll_for(rate) * 2 / 1'000'000'000);
    EXPECT_NEAR(w.share(rdma), 0.75, 0.02) << "the burst is shared by weight too";
    // Then it is the rate again.
    sim.run_for(2 * ms);
    w = measure(sim, v0, 100 * ms);
    EXPECT_NEAR(w.rate_bps() / rate, 1.0, 0.01);
}

TEST(Scheduler, LiveWeightChangeTakesEffectWithinOneInterval) {
    const uint64_t rate = 5 * gbit;
    scheduler s(1, wide_uplink(), 0);
    vnic_qos q = two_class(rate, 3, 1);
    s.configure(0, v0, q);
    egress_sim sim(s, 0, poll_for(rate));
    sim.add_vnic(v0, {rdma_1024}, {tcp_1450});
    sim.run_for(warmup_ns(q) + 10 * ms);
    window w = measure(sim, v0, 20 * ms);
    EXPECT_NEAR(w.share(rdma) / 0.75, 1.0, 0.02);

    const uint64_t backlog_r = s.backlog(v0, rdma);
    const uint64_t backlog_t = s.backlog(v0, tcp);
    const class_counters before = s.counters(v0, tcp);
    q.classes[index_of(rdma)].weight = 1;
    q.classes[index_of(tcp)].weight = 1;
    s.configure(sim.now(), v0, q);
    // Nothing queued or counted is lost.
    EXPECT_EQ(s.backlog(v0, rdma), backlog_r);
    EXPECT_EQ(s.backlog(v0, tcp), backlog_t);
    EXPECT_EQ(s.counters(v0, tcp).bytes, before.bytes);

    // The first refill after the change (the bucket may still be repaying the last packet's
    // overshoot for a poll or two) is split by the new weights.
    const uint64_t changed_at = sim.now();
    do {
        sim.tick();
        sim.step();
    } while (sim.last_grant.total() == 0);
    EXPECT_LT(sim.now() - changed_at, 4 * poll_for(rate));
    const double first_split =
        static_cast<double>(sim.last_grant[rdma]) / static_cast<double>(sim.last_grant.total());
    EXPECT_NEAR(first_split, 0.5, 0.01) << sim.last_grant[rdma] << " / " << sim.last_grant[tcp];
    // And the shares over the next millisecond follow 1:1.
    w = measure(sim, v0, 1 * ms);
    EXPECT_NEAR(w.share(rdma), 0.5, 0.02);
    w = measure(sim, v0, 20 * ms);
    EXPECT_NEAR(w.share(rdma) / 0.5, 1.0, 0.02);

    // Weights back to 1:9 between two polls, same story.
    q.classes[index_of(rdma)].weight = 1;
    q.classes[index_of(tcp)].weight = 9;
    s.configure(sim.now(), v0, q);
    w = measure(sim, v0, 1 * ms);
    EXPECT_NEAR(w.share(tcp), 0.9, 0.02);
}

TEST(Scheduler, LiveRateChangeAppliesFromTheNextRefill) {
    scheduler s(1, wide_uplink(), 0);
    vnic_qos q = two_class(10 * gbit, 3, 1, 256 * 1024);
    s.configure(0, v0, q);
    egress_sim sim(s, 0, 2 * us);
    sim.add_vnic(v0, {rdma_1024}, {tcp_1450});
    sim.run_for(5 * ms);
    q.rate_bps = 2 * gbit;
    s.configure(sim.now(), v0, q);
    window w = measure(sim, v0, 50 * ms);
    EXPECT_NEAR(w.rate_bps() / (2.0 * gbit), 1.0, 0.02);
    EXPECT_NEAR(w.share(rdma) / 0.75, 1.0, 0.02);
    q.rate_bps = 8 * gbit;
    s.configure(sim.now(), v0, q);
    w = measure(sim, v0, 50 * ms);
    EXPECT_NEAR(w.rate_bps() / (8.0 * gbit), 1.0, 0.02);
}

// Over every window, long or short, a vNIC sends at most rate × window + burst (plus the last
// packet of each class, which may overshoot the grant).
TEST(Scheduler, SumStaysWithinVnicRate) {
    for (uint64_t rate : {100 * mbit, 3 * gbit, 25 * gbit}) {
        SCOPED_TRACE(rate);
        const uint64_t burst = default_burst_bytes(rate);
        scheduler s(1, wide_uplink(), 0);
        s.configure(0, v0, two_class(rate, 7, 3, burst));
        egress_sim sim(s, 0, poll_for(rate));
        const packet_mix& mix = mixes()[2];
        sim.add_vnic(v0, mix.rdma, mix.tcp);
        std::vector<std::pair<uint64_t, uint64_t>> trace;  // (time, bytes sent so far)
        std::mt19937 rng(7);
        for (int i = 0; i < 4000; ++i) {
            // Sources come and go so that the bucket fills and drains.
            if (i % 200 == 0) {
                sim.set_active(v0, rdma, rng() % 3 != 0);
                sim.set_active(v0, tcp, rng() % 3 != 0);
            }
            sim.step();
            trace.emplace_back(sim.now(), sim.sent(v0, rdma) + sim.sent(v0, tcp));
            sim.tick();
        }
        for (std::size_t a = 0; a < trace.size(); a += 37) {
            for (std::size_t b = a + 1; b < trace.size(); b += 53) {
                const uint64_t dt = trace[b].first - trace[a].first;
                const double allowed = static_cast<double>(rate) / 8e9 * static_cast<double>(dt) +
                                       static_cast<double>(burst + 2 * mix.largest());
                // Bytes committed in polls a+1..b (those of poll a happened at time a).
                EXPECT_LE(static_cast<double>(trace[b].second - trace[a].second), allowed)
                    << a << ".." << b;
            }
        }
    }
}

TEST(Scheduler, BlockedClassDoesNotHoldBackTheOther) {
    const uint64_t rate = 10 * gbit;
    for (bool use_limits : {true, false}) {
        SCOPED_TRACE(use_limits ? "told by limits" : "learnt from unused grants");
        scheduler s(1, wide_uplink(), 0);
        const vnic_qos q = two_class(rate, 3, 1);
        s.configure(0, v0, q);
        egress_sim sim(s, 0, poll_for(rate));
        sim.add_vnic(v0, {rdma_4096}, {tcp_1450});
        // RDMA has bytes queued but its QPs are paced to nothing: it cannot send.
        if (use_limits) {
            sim.limits = {0, no_limits[1]};
        } else {
            sim.decline_rdma = true;
        }
        sim.run_for(warmup_ns(q));
        const window w = measure(sim, v0, 20 * ms);
        EXPECT_EQ(w.rdma, 0u);
        EXPECT_GT(w.rate_bps(tcp), 0.98 * rate);
        EXPECT_GT(s.backlog(v0, rdma), 0u);
    }
}

// A QP that DCQCN cut to a third of the vNIC's rate takes a little of every grant. Were it
// owed what each TCP super-frame owes the rdma class at 3:1 (~200 KB), TCP would wait for the
// paced QP to catch up before every frame; told that the class is held back, the scheduler
// gives TCP the rest of the rate.
TEST(Scheduler, APacedClassDoesNotHoldBackTheOtherClassesSuperFrames) {
    for (uint64_t rate : {300 * mbit, 5 * gbit}) {
        SCOPED_TRACE(std::to_string(rate) + " bit/s");
        const uint64_t poll = poll_for(rate);
        const uint64_t paced_bps = rate / 3;
        const window w = rdma_against_superframes(rate, poll, [&](egress_sim& sim) {
            sim.jitter = false;
            // The rdma class asks for as much as a whole burst (more than the vNIC's burst
            // can hold at 300 Mbit/s: the engine's room for one poll of 1 KB packets).
            sim.rdma_room_untold = true;
            sim.queue_target = 4096;
            sim.rdma_paced_bytes_per_poll = paced_bps / 8 * poll / 1'000'000'000;
        });
        EXPECT_NEAR(w.rate_bps(rdma) / static_cast<double>(paced_bps), 1.0, 0.05);
        EXPECT_GT(w.rate_bps(), 0.97 * static_cast<double>(rate)) << "tcp takes the rest";
    }
}

TEST(Scheduler, UplinkOversubscriptionIsSharedInProportionToVnicRates) {
    const uint64_t uplink = 10 * gbit;
    scheduler s(2, {uplink, default_burst_bytes(uplink)}, 0);
    s.configure(0, 0, two_class(8 * gbit, 3, 1));
    s.configure(0, 1, two_class(4 * gbit, 1, 1));
    EXPECT_NEAR(static_cast<double>(s.effective_rate_bps(0) + s.effective_rate_bps(1)),
                static_cast<double>(uplink), 2.0);
    egress_sim sim(s, 0, 2 * us);
    sim.add_vnic(0, {rdma_1024}, {tcp_1450});
    sim.add_vnic(1, {rdma_4096}, {tcp_8950});
    sim.run_for(10 * ms);
    const uint64_t a0 = sim.sent(0, rdma) + sim.sent(0, tcp);
    const uint64_t b0 = sim.sent(1, rdma) + sim.sent(1, tcp);
    const window w0 = measure(sim, 0, 50 * ms);
    const uint64_t a = sim.sent(0, rdma) + sim.sent(0, tcp) - a0;
    const uint64_t b = sim.sent(1, rdma) + sim.sent(1, tcp) - b0;
    const double total_bps = static_cast<double>(a + b) * 8e9 / (50.0 * ms);
    EXPECT_NEAR(total_bps / uplink, 1.0, 0.02);
    EXPECT_NEAR(static_cast<double>(a) / static_cast<double>(b), 2.0, 0.04);
    EXPECT_NEAR(w0.share(rdma), 0.75, 0.02) << "class weights still hold inside each vNIC";
    // Removing a vNIC gives the other its full rate back.
    s.remove(1);
    EXPECT_EQ(s.effective_rate_bps(0), 8 * gbit);
}

TEST(Scheduler, UplinkRateCapsTheSumOfVnics) {
    scheduler s(1, {1 * gbit, 64 * 1024}, 0);
    s.configure(0, v0, two_class(1 * gbit, 1, 1));
    s.configure_uplink(0, {500 * mbit, 64 * 1024});
    EXPECT_EQ(s.effective_rate_bps(v0), 500 * mbit);
    egress_sim sim(s, 0, 10 * us);
    sim.add_vnic(v0, {rdma_1024}, {tcp_1450});
    sim.run_for(5 * ms);
    const window w = measure(sim, v0, 100 * ms);
    EXPECT_NEAR(w.rate_bps() / (500.0 * mbit), 1.0, 0.02);
}

TEST(Scheduler, RefundReturnsTokensBacklogAndCounters) {
    scheduler s(1, wide_uplink(), 0);
    s.configure(0, v0, two_class(1 * gbit, 1, 1, 100'000));
    s.enqueue(v0, tcp, 30'000);
    const burst_grant g = s.grant(0, v0);
    EXPECT_EQ(g[tcp], 30'000u);
    EXPECT_EQ(g[rdma], 0u);
    s.commit(v0, tcp, 30'000, 20);
    EXPECT_EQ(s.backlog(v0, tcp), 0u);
    s.refund(v0, tcp, 12'000, 8);  // the tx ring took only 12 of 20 packets
    EXPECT_EQ(s.backlog(v0, tcp), 12'000u);
    EXPECT_EQ(s.counters(v0, tcp).bytes, 18'000u);
    EXPECT_EQ(s.counters(v0, tcp).packets, 12u);
    // The refunded bytes are grantable again at once.
    EXPECT_EQ(s.grant(0, v0)[tcp], 12'000u);
}

TEST(Scheduler, DequeueUnsentShrinksTheBacklog) {
    scheduler s(1, wide_uplink(), 0);
    s.configure(0, v0, two_class(1 * gbit, 1, 1));
    s.enqueue(v0, rdma, 5'000);
    s.dequeue_unsent(v0, rdma, 2'000);
    EXPECT_EQ(s.backlog(v0, rdma), 3'000u);
    s.dequeue_unsent(v0, rdma, 9'000);
    EXPECT_EQ(s.backlog(v0, rdma), 0u);
    EXPECT_EQ(s.grant(0, v0).total(), 0u);
}

TEST(Scheduler, UnconfiguredVnicGetsNothing) {
    scheduler s(4, wide_uplink(), 0);
    s.enqueue(2, tcp, 5'000);
    EXPECT_FALSE(s.configured(2));
    EXPECT_EQ(s.grant(1'000, 2).total(), 0u);
}

TEST(Scheduler, ThrottledVnicSaysHowLongToWait) {
    scheduler s(1, wide_uplink(), 0);
    s.configure(0, v0, two_class(8 * gbit, 1, 1, 10'000));  // 1 byte/ns
    s.enqueue(v0, tcp, 20'000);
    const burst_grant g = s.grant(0, v0);
    s.commit(v0, tcp, g[tcp] + 1'000, 1);  // the last packet overshot by 1000 bytes
    EXPECT_EQ(s.ns_until_tokens(v0), 1'001u);
    EXPECT_EQ(s.grant(1'000, v0).total(), 0u);
    EXPECT_GT(s.grant(1'001, v0).total(), 0u);
}

TEST(Config, ValidateNamesTheBadField) {
    vnic_qos q = two_class(5 * gbit, 3, 1);
    EXPECT_EQ(validate(q), "");
    q.classes[index_of(rdma)].weight = 0;
    EXPECT_NE(validate(q).find("classes.rdma.weight"), std::string::npos);
    q = two_class(5 * gbit, 3, 1);
    q.classes[0].min_bps = 3 * gbit;
    q.classes[1].min_bps = 3 * gbit;
    EXPECT_NE(validate(q).find("mins add up"), std::string::npos);
    q = two_class(5 * gbit, 3, 1);
    q.classes[index_of(tcp)].min_bps = 2 * gbit;
    q.classes[index_of(tcp)].max_bps = 1 * gbit;
    EXPECT_NE(validate(q).find("classes.tcp.max"), std::string::npos);
    q = two_class(0, 3, 1, 1000);
    EXPECT_NE(validate(q).find("rate"), std::string::npos);
    EXPECT_EQ(validate(uplink_qos{10 * gbit, 0}).substr(0, 5), "burst");
}

TEST(Config, ChargedBytesIncludeTheVxlanOverhead) {
    EXPECT_EQ(charged_bytes(1464), 1514u);  // a full 1450-byte TCP/IP packet
    EXPECT_EQ(rdma_1024, 14u + 20 + 8 + 12 + 1024 + 4 + 50);
    EXPECT_EQ(charged_bytes(1464, ethernet_l1_overhead_bytes), 1538u);
}

}  // namespace
}  // namespace jakiro::qos
