// DCQCN (rnic/dcqcn.cc): the CNPs a receiver sends for congestion the fabric marked, and the
// sender's rate relative to its vNIC's.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

TEST_F(QueuePairTest, ACeMarkFromTheFabricMakesTheReceiverSendACnpAndTheSenderSlow) {
    // No ingress meter on the vNIC (no QoS): the receiver is still DCQCN's notification point.
    connect_both();
    fill(a, 0, 65536, 31);
    const uint64_t rate_before = eng.report()[0].rate_bps;
    // Delivers what the engine sent, with CE on a -> b as the RFC 6040 step leaves a packet
    // the fabric marked (ECT(0) inside).
    auto step = [&](bool mark) {
        now += 10'000;
        eng.poll(wire, now);
        std::deque<test_wire::frame> batch;
        batch.swap(wire.frames);
        for (auto& f : batch) {
            uint8_t* ip = f.bytes.data() + 14;
            const uint16_t to = f.dst_ip_be == htonl(ip_a) ? 0 : 1;
            if (to == 1 && mark) {
                ASSERT_EQ(ip[1] & 0x03, 0x02) << "RoCE leaves ECN-capable";
                ip[1] |= 0x03;
            }
            eng.receive(to, ip, static_cast<uint32_t>(f.bytes.size() - 14), wire, now);
        }
    };
    // A stream long enough for several CNPs (one per 50 µs at most): after a quiet start
    // DCQCN's alpha is near zero, so it is the repeated marks that cut the rate.
    int completed = 0;
    for (int i = 0; i < 32; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr));
    }
    uint64_t lowest_rate = rate_before;
    proto::cqe c{};
    for (int i = 0; i < 2000 && completed < 32; ++i) {
        step(true);
        lowest_rate = std::min(lowest_rate, eng.report()[0].rate_bps);
        while (a.poll_send(c)) {
            EXPECT_EQ(c.status, IBV_WC_SUCCESS);
            ++completed;
        }
    }
    EXPECT_EQ(completed, 32);
    EXPECT_TRUE(same(a, 0, b, 0, 65536));
    const auto report = eng.report();
    EXPECT_GT(report[1].cnps_sent, 1u);
    EXPECT_EQ(report[0].cnps_received, report[1].cnps_sent);
    EXPECT_LT(lowest_rate, rate_before) << "DCQCN cut the sender's rate";
}

TEST_F(QueuePairTest, DcqcnStartsCutsAndRecoversRelativeToTheVnicRateNot25Gbit) {
    constexpr uint64_t vnic_rate = 1'000'000'000;  // a vNIC shaped to 1 Gbit/s
    eng.set_vnic_rate(0, vnic_rate, now);
    connect_both();
    queue_pair* qp = eng.find(0, a.qp);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(qp->line_rate_bps(), vnic_rate) << "learnt when the QP was created";
    EXPECT_EQ(qp->rate_bps(), vnic_rate) << "DCQCN starts at the vNIC's rate";
    EXPECT_EQ(eng.find(1, b.qp)->line_rate_bps(), 25'000'000'000u)
        << "a vNIC that is not shaped keeps the nominal line rate";

    qp->on_cnp(now);
    EXPECT_NEAR(static_cast<double>(qp->rate_bps()), vnic_rate / 2.0, vnic_rate * 0.01)
        << "the first CNP halves the vNIC's rate (alpha 1)";

    // Traffic with no more CNPs: recovery climbs back to the vNIC's rate and no further
    // (with a 25 Gbit/s ceiling additive increase would pass 1 Gbit/s within 2 ms).
    for (int i = 0; i < 16; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr));
    }
    uint64_t highest = 0;
    for (int i = 0; i < 200; ++i) {
        run(1, 50'000);
        highest = std::max(highest, qp->rate_bps());
    }
    EXPECT_LE(highest, vnic_rate);
    EXPECT_GE(qp->rate_bps(), vnic_rate * 95 / 100) << "recovered to the vNIC's rate";

    // A live QoS change (jakiroctl apply) moves the ceiling of the QPs that exist.
    eng.set_vnic_rate(0, vnic_rate / 4, now);
    EXPECT_EQ(qp->line_rate_bps(), vnic_rate / 4);
    EXPECT_LE(qp->rate_bps(), vnic_rate / 4);
}

TEST_F(QueuePairTest, WithoutACeMarkNoCnpIsSent) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr));
    run(200);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(eng.report()[1].cnps_sent, 0u);
}

}  // namespace
}  // namespace jakiro::rnic::test
