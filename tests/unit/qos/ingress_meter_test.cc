#include "qos/ingress_meter.hh"

#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <vector>

#include "qos/rate_control.hh"

namespace jakiro::qos {
namespace {

constexpr uint64_t us = 1'000;
constexpr uint64_t ms = 1'000'000;
constexpr uint64_t gbit = 1'000'000'000;
constexpr auto rdma = traffic_class::rdma;
constexpr auto tcp = traffic_class::tcp;
constexpr uint32_t rdma_4096 = charged_bytes(14 + 20 + 8 + 12 + 4096 + 4);
constexpr uint32_t tcp_1450 = charged_bytes(14 + 1450);

// The meter's rules on the configured burst alone (no allowance for a worker off its core).
constexpr ingress_params exact{.processing_jitter_ns = 0};

vnic_qos ingress(uint64_t rate, uint32_t w_rdma, uint32_t w_tcp) {
    vnic_qos q;
    q.rate_bps = rate;
    q.burst_bytes = 256 * 1024;
    q.classes[index_of(rdma)].weight = w_rdma;
    q.classes[index_of(tcp)].weight = w_tcp;
    return q;
}

// An open-loop sender: packets of one class, evenly spaced at `rate_bps`.
struct stream {
    traffic_class c;
    uint64_t rate_bps;
    uint32_t bytes;
    ecn codepoint;
    uint64_t next_ns = 0;
    cnp_pacer qp;
    // Outcome.
    uint64_t delivered = 0;
    uint64_t marked = 0;
    uint64_t dropped = 0;
    uint64_t cnps = 0;
    double delivered_bps(uint64_t ns) const {
        return static_cast<double>(delivered) * 8e9 / static_cast<double>(ns);
    }
};

void run(ingress_meter& m, std::vector<stream>& streams, uint64_t from_ns, uint64_t to_ns) {
    for (stream& s : streams) {
        s.next_ns = std::max(s.next_ns, from_ns);
    }
    for (;;) {
        stream* first = nullptr;
        for (stream& s : streams) {
            if (s.rate_bps != 0 && (first == nullptr || s.next_ns < first->next_ns)) {
                first = &s;
            }
        }
        if (first == nullptr || first->next_ns >= to_ns) {
            return;
        }
        stream& s = *first;
        const ingress_verdict v =
            m.on_packet(s.next_ns, s.c, s.bytes, s.codepoint, s.c == rdma ? &s.qp : nullptr);
        s.delivered += v.action == ingress_action::drop ? 0 : s.bytes;
        s.marked += v.action == ingress_action::mark_ce ? 1 : 0;
        s.dropped += v.action == ingress_action::drop ? 1 : 0;
        s.cnps += v.send_cnp ? 1 : 0;
        s.next_ns += s.bytes * 8'000'000'000 / s.rate_bps;
    }
}

TEST(IngressMeter, WithinTheRateEverythingPasses) {
    ingress_meter m(ingress(5 * gbit, 3, 1), 0, exact);
    std::vector<stream> st = {{rdma, 3 * gbit, rdma_4096, ecn::ect0},
                              {tcp, 1500'000'000, tcp_1450, ecn::not_ect}};
    run(m, st, 0, 50 * ms);
    for (const stream& s : st) {
        EXPECT_EQ(s.marked + s.dropped + s.cnps, 0u);
    }
    EXPECT_EQ(m.counters(tcp).dropped, 0u);
    EXPECT_GT(m.counters(rdma).packets, 0u);
}

// Work conservation: a class alone may use the whole vNIC, far beyond its weighted share.
TEST(IngressMeter, IdleClassShareIsNotSignalled) {
    ingress_meter m(ingress(5 * gbit, 3, 1), 0, exact);
    std::vector<stream> st = {{tcp, 4800'000'000, tcp_1450, ecn::not_ect}};
    run(m, st, 0, 50 * ms);
    EXPECT_EQ(st[0].marked + st[0].dropped, 0u);
}

TEST(IngressMeter, MarksOnlyTheClassAboveItsShare) {
    ingress_meter m(ingress(5 * gbit, 3, 1), 0, exact);  // shares 3.75 / 1.25
    std::vector<stream> st = {{rdma, 3500'000'000, rdma_4096, ecn::ect0},
                              {tcp, 3 * gbit, tcp_1450, ecn::ect0}};
    run(m, st, 0, 50 * ms);
    EXPECT_EQ(st[0].marked + st[0].dropped + st[0].cnps, 0u) << "RDMA is within its share";
    EXPECT_GT(st[1].marked, 1000u);
    EXPECT_EQ(m.counters(tcp).ce_marked, st[1].marked);
}

// Not-ECT traffic above its share passes while the excess is within one burst, then is
// dropped: it is policed to what the vNIC leaves it.
TEST(IngressMeter, DropsNotEctBeyondABurst) {
    ingress_meter m(ingress(5 * gbit, 3, 1), 0, exact);
    std::vector<stream> st = {{rdma, 3750'000'000, rdma_4096, ecn::ect0},
                              {tcp, 3 * gbit, tcp_1450, ecn::not_ect}};
    run(m, st, 0, 10 * ms);  // spend the initial burst
    st[0].delivered = st[1].delivered = 0;
    run(m, st, 10 * ms, 110 * ms);
    EXPECT_EQ(st[0].dropped + st[0].marked, 0u);
    EXPECT_GT(st[1].dropped, 0u);
    EXPECT_EQ(st[1].marked, 0u) << "not-ECT is never marked";
    EXPECT_NEAR(st[1].delivered_bps(100 * ms) / 1.25e9, 1.0, 0.03);
    EXPECT_NEAR((st[0].delivered_bps(100 * ms) + st[1].delivered_bps(100 * ms)) / 5e9, 1.0, 0.02);
}

// A TCP super-frame is judged whole, and at 100 Mbit/s one (up to 77 KB charged) outweighs the
// default 64 KiB burst: a tenant sending them two at a time within its rate loses none, one far
// above its rate is still held to it.
TEST(IngressMeter, SuperFramesLargerThanTheBurstPassWithinTheRate) {
    constexpr uint64_t rate = 100'000'000;
    vnic_qos q = ingress(rate, 3, 1);
    q.burst_bytes = default_burst_bytes(rate);
    ASSERT_GT(largest_charged_frame_bytes, q.burst_bytes);
    for (const double load : {0.9, 1.5}) {
        SCOPED_TRACE(load);
        ingress_meter m(q, 0, exact);
        const auto pair_ns = static_cast<uint64_t>(2.0 * largest_charged_frame_bytes * 8e9 /
                                                   (load * static_cast<double>(rate)));
        uint64_t delivered = 0, dropped = 0;
        const uint64_t end = 2'000 * ms;
        for (uint64_t t = 0; t < end; t += pair_ns) {
            for (int i = 0; i < 2; ++i) {  // back to back
                const ingress_verdict v =
                    m.on_packet(t, tcp, largest_charged_frame_bytes, ecn::not_ect, nullptr);
                (v.action == ingress_action::drop ? dropped : delivered) +=
                    largest_charged_frame_bytes;
            }
        }
        const double bps = static_cast<double>(delivered) * 8e9 / static_cast<double>(end);
        if (load < 1) {
            EXPECT_EQ(dropped, 0u);
        } else {
            EXPECT_GT(dropped, 0u);
            EXPECT_LT(bps, 1.05 * static_cast<double>(rate));
        }
    }
}

// A sender that ignores CE cannot take the vNIC: beyond `hard_limit_bursts` of excess even ECT
// packets are dropped.
TEST(IngressMeter, HardLimitDropsEvenEct) {
    ingress_meter m(ingress(5 * gbit, 3, 1), 0, exact);
    std::vector<stream> st = {{tcp, 10 * gbit, tcp_1450, ecn::ect1}};
    run(m, st, 0, 10 * ms);
    st[0].delivered = 0;
    run(m, st, 10 * ms, 110 * ms);
    EXPECT_GT(st[0].marked, 0u);
    EXPECT_GT(st[0].dropped, 0u);
    EXPECT_NEAR(st[0].delivered_bps(100 * ms) / 5e9, 1.0, 0.02);
}

TEST(IngressMeter, RdmaAboveShareAsksForCnpsAtMostOncePer50Microseconds) {
    ingress_meter m(ingress(5 * gbit, 3, 1), 0, exact);
    std::vector<stream> st = {{rdma, 8 * gbit, rdma_4096, ecn::ect0}};
    run(m, st, 0, 10 * ms);
    EXPECT_GT(st[0].cnps, 150u);
    EXPECT_LE(st[0].cnps, 10 * ms / (50 * us) + 1);
    EXPECT_EQ(m.counters(rdma).cnps, st[0].cnps);
    EXPECT_GT(st[0].qp.suppressed(), 0u);
}

TEST(IngressMeter, CeMarkedRdmaArrivalAsksForCnp) {
    ingress_meter m(ingress(5 * gbit, 3, 1), 0, exact);
    cnp_pacer qp;
    ingress_verdict v = m.on_packet(1 * us, rdma, rdma_4096, ecn::ce, &qp);
    EXPECT_EQ(v.action, ingress_action::pass) << "within the rate: delivered as it came";
    EXPECT_TRUE(v.send_cnp) << "CE set upstream is congestion too";
    v = m.on_packet(2 * us, rdma, rdma_4096, ecn::ce, &qp);
    EXPECT_FALSE(v.send_cnp) << "paced";
    v = m.on_packet(2 * us, tcp, tcp_1450, ecn::ce, nullptr);
    EXPECT_FALSE(v.send_cnp) << "TCP echoes CE itself (ECE)";
}

TEST(IngressMeter, MaxCapsAClassEvenWhenTheVnicHasRoom) {
    vnic_qos q = ingress(5 * gbit, 3, 1);
    q.classes[index_of(tcp)].max_bps = 1 * gbit;
    ingress_meter m(q, 0, exact);
    std::vector<stream> st = {{tcp, 2 * gbit, tcp_1450, ecn::not_ect}};
    run(m, st, 0, 10 * ms);
    st[0].delivered = 0;
    run(m, st, 10 * ms, 110 * ms);
    EXPECT_NEAR(st[0].delivered_bps(100 * ms) / 1e9, 1.0, 0.03);
}

TEST(IngressMeter, LiveReconfigurationChangesTheShares) {
    ingress_meter m(ingress(5 * gbit, 3, 1), 0, exact);
    EXPECT_EQ(m.share_bps(rdma), 3750'000'000u);
    m.on_packet(1 * us, tcp, tcp_1450, ecn::not_ect, nullptr);
    m.configure(ingress(5 * gbit, 1, 1), 2 * us);
    EXPECT_EQ(m.share_bps(rdma), 2500'000'000u);
    EXPECT_EQ(m.share_bps(tcp), 2500'000'000u);
    EXPECT_EQ(m.counters(tcp).packets, 1u) << "counters survive";
}

// The distributed loop of docs/architecture.md §6: two DCQCN senders (say t2 and t3, each with a 10
// Gbit/s vNIC) write to one receiver whose ingress is limited to 5 Gbit/s. The receiver's meter
// marks and asks for CNPs, the CNPs reach the senders 10 µs later, their rates come down, and the
// receiver's ingress settles at its limit (within 10 %).
TEST(IngressMeter, AWorkerOffItsCoreForFiveMillisecondsDoesNotSignalSendersWithinTheRate) {
    // Senders at 90 % of the rate, but the worker meters what arrived only every 5 ms, all at
    // once (time as the meter sees it): nothing is over the rate, so nothing is signalled.
    const auto clumped = [](const ingress_params& p) {
        ingress_meter m(ingress(1 * gbit, 3, 1), 0, p);
        cnp_pacer qp;
        uint64_t signalled = 0;
        const uint32_t per_clump = 900'000'000 / 8 / 200 / rdma_4096;  // 5 ms at 900 Mbit/s
        for (uint64_t now = 5 * ms; now <= 500 * ms; now += 5 * ms) {
            for (uint32_t i = 0; i < per_clump; ++i) {
                const ingress_verdict v = m.on_packet(now, rdma, rdma_4096, ecn::ect0, &qp);
                signalled += v.action != ingress_action::pass || v.send_cnp ? 1 : 0;
            }
        }
        return signalled;
    };
    EXPECT_EQ(clumped(ingress_params{}), 0u);
    EXPECT_GT(clumped(exact), 0u)
        << "the configured 256 KiB burst alone reads the clumps as excess";
}

TEST(Incast, TwoDcqcnSendersConvergeToTheReceiversLimit) {
    const uint64_t limit = 5 * gbit;
    ingress_meter m(ingress(limit, 3, 1), 0);
    struct sender {
        dcqcn_rate rate;
        cnp_pacer np;  // the receiver's CNP state for this QP
        std::deque<uint64_t> cnps_in_flight;
        uint64_t delivered = 0;
    };
    std::vector<sender> senders(2);
    for (sender& s : senders) {
        s.rate = dcqcn_rate(dcqcn_params{.line_rate_bps = 10 * gbit}, 0);
    }
    constexpr uint64_t one_way = 10 * us;
    uint64_t delivered_late = 0;
    uint64_t cnps = 0;
    std::deque<std::pair<uint64_t, std::size_t>> wire;  // (arrival, sender)
    for (uint64_t now = 0; now < 200 * ms; now += 1 * us) {
        for (std::size_t i = 0; i < senders.size(); ++i) {
            sender& s = senders[i];
            while (!s.cnps_in_flight.empty() && s.cnps_in_flight.front() <= now) {
                s.rate.on_cnp(s.cnps_in_flight.front());
                s.cnps_in_flight.pop_front();
            }
            while (s.rate.grant(now) > 0) {
                s.rate.on_sent(rdma_4096);
                wire.emplace_back(now + one_way, i);
            }
        }
        while (!wire.empty() && wire.front().first <= now) {
            const auto [t, i] = wire.front();
            wire.pop_front();
            sender& s = senders[i];
            const ingress_verdict v = m.on_packet(t, rdma, rdma_4096, ecn::ect0, &s.np);
            if (v.action != ingress_action::drop && t >= 100 * ms) {
                delivered_late += rdma_4096;
            }
            if (v.send_cnp) {
                ++cnps;
                s.cnps_in_flight.push_back(t + one_way);
            }
        }
    }
    const double ingress_bps = static_cast<double>(delivered_late) * 8e9 / (100.0 * ms);
    EXPECT_NEAR(ingress_bps / static_cast<double>(limit), 1.0, 0.10) << ingress_bps;
    std::printf("incast into a 5 Gbit/s ingress: %.3f Gbit/s delivered, %lu CNPs, %lu CE marks\n",
                ingress_bps / 1e9, static_cast<unsigned long>(cnps),
                static_cast<unsigned long>(m.counters(rdma).ce_marked));
    EXPECT_EQ(m.counters(rdma).dropped, 0u) << "DCQCN backs off before the hard limit";
    EXPECT_GT(cnps, 0u);
    EXPECT_GT(m.counters(rdma).ce_marked, 0u);
    for (const sender& s : senders) {
        EXPECT_LT(s.rate.rate_bps(), 10 * gbit) << "both senders were slowed";
    }
}

}  // namespace
}  // namespace jakiro::qos
