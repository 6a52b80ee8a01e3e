// The intra-host path (rnic/local_path.cc): two QPs of one engine, memory to memory in
// budget-sized slices, with the wire's checks, completions and QoS charges.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

TEST_F(QueuePairTest, OnOneHostDataMovesMemoryToMemoryWithoutPackets) {
    wire.same_host = true;
    connect_both();
    fill(a, 0, 200000, 11);
    fill(b, 0x60000, 100000, 12);
    b.post_recv(1, 0x40000, 0x10000);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 50000, a.mr));
    auto w = wqe(2, IBV_WR_RDMA_WRITE_WITH_IMM, a.iova(50000), 150000, a.mr, b.iova(0x80000), b.mr);
    w.imm_data = htonl(7);
    b.post_recv(2, 0, 0);
    a.post_send(w);
    a.post_send(wqe(3, IBV_WR_RDMA_READ, a.iova(0xC0000), 100000, a.mr, b.iova(0x60000), b.mr));
    run(5);
    EXPECT_EQ(wire.sent, 0u) << "no frame at all";
    EXPECT_EQ(wire.local_bytes, 300000u);
    proto::cqe c{};
    for (uint64_t id = 1; id <= 3; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    }
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.byte_len, 50000u);
    EXPECT_EQ(c.src_qp, a.qp);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(c.imm_data, htonl(7));
    EXPECT_TRUE(same(a, 0, b, 0x40000, 50000));
    EXPECT_TRUE(same(a, 50000, b, 0x80000, 150000));
    EXPECT_TRUE(same(b, 0x60000, a, 0xC0000, 100000));

    // The PSNs moved as if packets had: the packet path can take over at any point.
    wire.same_host = false;
    fill(a, 0, 5000, 13);
    a.post_send(wqe(4, IBV_WR_RDMA_WRITE, a.iova(0), 5000, a.mr, b.iova(0), b.mr));
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 5000));
    EXPECT_GT(wire.sent, 0u);
}

// The longest prefix of `len` bytes at which x and y agree.
std::size_t agreeing_prefix(const std::byte* x, const std::byte* y, std::size_t len) {
    std::size_t n = 0;
    while (n < len && x[n] == y[n]) {
        ++n;
    }
    return n;
}

TEST_F(QueuePairTest, OnOneHostALargeMessageMovesInSlicesOfOneVisitsBudget) {
    // A tenant's 1 MiB WR must not hold the worker for the whole copy: each visit moves what
    // the packets of its budget would carry, and the message completes whole at the end.
    wire.same_host = true;
    connect_both();
    fill(a, 0, region_bytes, 21);
    b.post_recv(1, 0, region_bytes);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), region_bytes, a.mr));
    const std::size_t per_visit = 8 * 32 * 1024;  // the engine's passes x packets x path MTU
    unsigned visits = 0;
    std::size_t landed = 0;
    proto::cqe c{};
    while (!b.poll_recv(c)) {
        ASSERT_LT(visits, 64u) << "the message never completed";
        now += 1'000;
        eng.poll(wire, now);
        ++visits;
        const std::size_t now_landed = agreeing_prefix(a.region, b.region, region_bytes);
        EXPECT_LE(now_landed - landed, per_visit) << "visit " << visits;
        landed = now_landed;
    }
    EXPECT_GE(visits, region_bytes / per_visit);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.byte_len, region_bytes);
    EXPECT_TRUE(same(a, 0, b, 0, region_bytes));
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wire.sent, 0u);
    EXPECT_EQ(wire.local_bytes, region_bytes);

    // WRITE and READ of the same size move the same way.
    fill(b, 0, region_bytes, 22);
    a.post_send(wqe(2, IBV_WR_RDMA_READ, a.iova(0), region_bytes, a.mr, b.iova(0), b.mr));
    run(2);
    EXPECT_FALSE(a.poll_send(c)) << "two visits cannot have moved 1 MiB";
    run(8);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, region_bytes));
}

TEST_F(QueuePairTest, OnOneHostAReceiverOverItsRdmaShareSlowsTheSenderAsACnpWould) {
    // Memory to memory, the receiver's ingress meter still sees every message (as the packets
    // it would have been), and above its share the sender is cut back as a CNP would cut it.
    wire.same_host = true;
    connect_both();
    fill(a, 0, region_bytes, 41);
    constexpr uint32_t write_bytes = 128 * 1024;
    auto write_eight = [&](uint64_t first_id) {
        for (uint64_t i = 0; i < 8; ++i) {
            a.post_send(wqe(first_id + i, IBV_WR_RDMA_WRITE, a.iova(i * write_bytes), write_bytes,
                            a.mr, b.iova(i * write_bytes), b.mr));
        }
        unsigned completed = 0;
        proto::cqe c{};
        for (int step = 0; step < 200'000 && completed < 8; ++step) {
            now += 10'000;
            eng.poll(wire, now);
            while (a.poll_send(c)) {
                EXPECT_EQ(c.status, IBV_WC_SUCCESS);
                ++completed;
            }
        }
        EXPECT_EQ(completed, 8u);
        EXPECT_TRUE(same(a, 0, b, 0, 8 * write_bytes));
        EXPECT_EQ(wire.sent, 0u) << "memory to memory, no frame";
    };
    const uint64_t line_rate = eng.report()[0].rate_bps;

    // The control: a receiver well within its share is charged and sends no CNP.
    qos::vnic_qos roomy{};
    roomy.rate_bps = 400'000'000'000;
    qos::ingress_meter roomy_meter(roomy, now);
    wire.meters[1] = &roomy_meter;
    for (uint64_t round = 0; round < 4; ++round) {
        write_eight(1 + 8 * round);
    }
    EXPECT_GT(roomy_meter.counters(qos::traffic_class::rdma).bytes, 4u * 8 * write_bytes)
        << "charged the data and the headers of the packets it replaces";
    EXPECT_EQ(eng.report()[0].cnps_received, 0u);
    EXPECT_EQ(eng.report()[0].rate_bps, line_rate);

    // A 200 Mbit/s receiver: far above its share, its CNP pacer lets CNPs through and the
    // sender's DCQCN rate falls; every byte still lands.
    qos::vnic_qos tight{};
    tight.rate_bps = 200'000'000;
    qos::ingress_meter tight_meter(tight, now);
    wire.meters[1] = &tight_meter;
    fill(a, 0, region_bytes, 42);
    // DCQCN's alpha decayed while the sender was quiet: the first CNPs cut little, the
    // following ones more. Each round is one MiB.
    unsigned rounds = 0;
    while (eng.report()[0].rate_bps >= line_rate / 2 && rounds < 64) {
        write_eight(100 + 8 * rounds);
        ++rounds;
    }
    const auto report = eng.report();
    EXPECT_GT(report[0].cnps_received, 1u);
    EXPECT_EQ(report[1].cnps_sent, report[0].cnps_received);
    EXPECT_EQ(tight_meter.counters(qos::traffic_class::rdma).cnps, report[0].cnps_received);
    EXPECT_LT(report[0].rate_bps, line_rate / 2) << "DCQCN cut the sender, " << rounds << " MiB";
}

TEST_F(QueuePairTest, OnOneHostAPeerFailingMidMessageFlushesItsReceiveAndLosesNothing) {
    wire.same_host = true;
    connect_both();
    fill(a, 0, region_bytes, 23);
    b.post_recv(1, 0, region_bytes);
    b.post_recv(2, 0, 64);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), region_bytes, a.mr));
    now += 1'000;
    eng.poll(wire, now);  // one visit: a slice is in b's receive buffer
    proto::cqe c{};
    ASSERT_FALSE(b.poll_recv(c));
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    run(5);
    // The receive the message had taken is flushed, in order, then the one behind it.
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 2u);
    EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
    // The sender does not complete it as delivered: it is retried as packets into nothing
    // until its retry count ends it, as on the wire.
    run(400, 100'000'000);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(QueuePairTest, OnOneHostAMissingReceiveWaitsAndABadRkeyFailsAsOnTheWire) {
    wire.same_host = true;
    connect_both();
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 10, a.mr));
    run(5);
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "no receive posted: waits (RNR)";
    b.post_recv(9, 0, 64);
    run(2);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    std::memset(b.region, 0x77, 4096);
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), b.mr + 0x300));
    run(2);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0x77);
    EXPECT_EQ(wire.sent, 0u);
}

TEST_F(QueuePairTest, OnOneHostAtomicsRunMemoryToMemory) {
    wire.same_host = true;
    connect_both();
    uint64_t start = 41;
    std::memcpy(b.region, &start, 8);
    a.post_send(atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(0), a.mr, b.iova(0), b.mr, 1, 0));
    run(2);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(word_at(a, 0), 41u);
    EXPECT_EQ(word_at(b, 0), 42u);
    EXPECT_EQ(wire.sent, 0u);
}

TEST_F(QueuePairTest, OnOneHostAPeerTheRespondersGroupsRefuseGetsNoMoreMemory) {
    wire.same_host = true;
    eng.use_policy(1);
    connect_both();
    fill(a, 0, 4096, 4);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 4096, a.mr, b.iova(0), b.mr));
    run(2);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "control: allowed, memory to memory";
    EXPECT_TRUE(same(a, 0, b, 0, 4096));

    // b (the responder) no longer allows a.
    wire.refused = {{1, htonl(ip_a)}};
    eng.use_policy(2);
    fill(a, 0, 4096, 5);
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 4096, a.mr, b.iova(0), b.mr));
    run(5);
    EXPECT_FALSE(same(a, 0, b, 0, 4096)) << "nothing reached b's memory";
    EXPECT_EQ(report_of(eng.report(), b)->state, IBV_QPS_ERR);
    EXPECT_EQ(eng.counters().qps_revoked.read(), 1u);
    EXPECT_GE(drops_of(eng, engine_drop::revoked), 1u) << "a's packets meet a revoked QP";
}

}  // namespace
}  // namespace jakiro::rnic::test
