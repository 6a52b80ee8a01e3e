// The completer (rnic/completer.cc): ACKs and NAKs move `una`; go-back-N over a wire that
// loses, duplicates and reorders, the retry and RNR timers, completions in order.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

TEST_F(QueuePairTest, LossDuplicationAndReorderingLoseDuplicateAndCorruptNothing) {
    connect_both();
    reorder = true;
    std::mt19937 rng(GetParamSeed());
    uint64_t frames = 0;
    auto lossy = [&](const test_wire::frame& f) {
        (void)f;
        ++frames;
        return rng() % 100 >= 5;  // 5 % loss, both directions, ACKs included
    };
    constexpr int ops = 120;
    std::uniform_int_distribution<uint32_t> size(1, 20000);
    std::vector<uint32_t> sizes;
    for (int i = 0; i < ops; ++i) {
        sizes.push_back(size(rng));
    }
    // Each op has its own 24 KiB window on both sides, so every byte can be checked at the end.
    for (int i = 0; i < ops; ++i) {
        const std::size_t off = static_cast<std::size_t>(i % 40) * 24576;
        fill(a, off, sizes[i], 100 + i);
        switch (i % 3) {
            case 0:
                b.post_recv(i, off, 24576);
                a.post_send(wqe(i, IBV_WR_SEND, a.iova(off), sizes[i], a.mr));
                break;
            case 1:
                a.post_send(
                    wqe(i, IBV_WR_RDMA_WRITE, a.iova(off), sizes[i], a.mr, b.iova(off), b.mr));
                break;
            default:
                fill(b, off, sizes[i], 500 + i);
                a.post_send(
                    wqe(i, IBV_WR_RDMA_READ, a.iova(off), sizes[i], a.mr, b.iova(off), b.mr));
                break;
        }
        if (i % 40 == 39 || i == ops - 1) {
            // Drain before the windows are reused.
            int expected = i % 40 + 1;
            int got = 0;
            for (int round = 0; round < 2000 && got < expected; ++round) {
                run(10, 100'000, lossy);
                proto::cqe c{};
                while (a.poll_send(c)) {
                    ASSERT_EQ(c.status, IBV_WC_SUCCESS) << "wr " << c.wr_id;
                    ASSERT_EQ(c.wr_id, static_cast<uint64_t>(i - expected + 1 + got)) << "in order";
                    ++got;
                }
            }
            if (got != expected) {
                for (const auto& r : eng.report()) {
                    std::printf(
                        "qp %x state %u next %x una %x epsn %x sent %lu rx %lu rtx %lu to %lu nak "
                        "%lu/%lu dup %lu oos %lu rnr %lu/%lu\n",
                        r.qpn, r.state, r.next_psn, r.una_psn, r.expected_psn, r.packets_sent,
                        r.packets_received, r.retransmitted, r.timeouts, r.naks_sent,
                        r.naks_received, r.duplicates, r.out_of_sequence, r.rnr_naks_sent,
                        r.rnr_naks_received);
                }
            }
            ASSERT_EQ(got, expected);
            for (int j = i - expected + 1; j <= i; ++j) {
                const std::size_t off = static_cast<std::size_t>(j % 40) * 24576;
                EXPECT_TRUE(same(a, off, b, off, sizes[j])) << "op " << j;
            }
        }
    }
    run(200, 100'000, lossy);
    proto::cqe c{};
    int recvs = 0;
    while (b.poll_recv(c)) {
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.byte_len, sizes[c.wr_id]) << "each SEND delivered exactly once";
        ++recvs;
    }
    EXPECT_EQ(recvs, ops / 3);
    const auto reports = eng.report();
    uint64_t retransmitted = 0;
    for (const auto& r : reports) {
        retransmitted += r.retransmitted;
    }
    EXPECT_GT(retransmitted, 0u);
}

TEST_F(QueuePairTest, RnrNaksWaitForAReceiveAndGiveUpAfterRnrRetry) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    run(50);
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "no receive posted: RNR NAK, retry";
    b.post_recv(5, 0, 4096);
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.byte_len, 100u);

    TearDownSides();
    make_side(a, 0, ip_a, 101);
    make_side(b, 1, ip_b, 202);
    connect(a, b, ip_b, 7, /*rnr_retry=*/2);
    connect(b, a, ip_a);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    run(100);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(QueuePairTest, ASilentPeerExhaustsRetryCntAfterTheLocalAckTimeout) {
    connect(a, b, ip_b, /*retry_cnt=*/3, 7, /*timeout=*/8);  // 4.096 µs << 8 ≈ 1 ms
    connect(b, a, ip_a);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 10, a.mr, b.iova(0), b.mr));
    run(100, 10'000, [](const test_wire::frame&) { return false; });
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "1 ms: still retrying";
    run(1000, 10'000, [](const test_wire::frame&) { return false; });
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_RETRY_EXC_ERR);
    const auto r = eng.report();
    EXPECT_GE(r[0].timeouts + r[1].timeouts, 4u);
}

// One cumulative ACK that finishes a whole ring of WRs completes them over several polls,
// at most the vNIC's units at a time, in order, each once and successfully.
TEST_F(QueuePairTest, AnAckThatFinishesAFullRingCompletesItWithinItsVnicsUnitsPerPoll) {
    connect_both();
    const uint32_t sq = a.ring->sq_capacity;
    for (uint32_t i = 0; i < sq; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    }
    std::vector<test_wire::frame> acks;
    run(50, 1'000, [&](const test_wire::frame& f) {
        if (f.from == 1) {
            acks.push_back(f);  // b's ACKs are held back
            return false;
        }
        return true;
    });
    ASSERT_FALSE(acks.empty());
    proto::cqe c{};
    ASSERT_FALSE(a.poll_send(c)) << "nothing acknowledged yet";
    // The last ACK acknowledges everything at once.
    auto& last = acks.back();
    eng.receive(0, last.bytes.data() + 14, static_cast<uint32_t>(last.bytes.size() - 14), wire,
                now);
    std::vector<uint64_t> done;
    unsigned visits = 0;
    for (;;) {
        std::size_t this_visit = 0;
        while (a.poll_send(c)) {
            EXPECT_EQ(c.status, IBV_WC_SUCCESS);
            done.push_back(c.wr_id);
            ++this_visit;
        }
        EXPECT_LE(this_visit, engine::vnic_units_per_poll) << "poll " << visits;
        if (done.size() >= sq || visits > 100) {
            break;
        }
        ++visits;
        now += 1'000;
        eng.poll(wire, now);
        wire.frames.clear();
    }
    ASSERT_EQ(done.size(), sq);
    EXPECT_GE(visits, sq / engine::vnic_units_per_poll - 1);
    for (uint32_t i = 0; i < sq; ++i) {
        EXPECT_EQ(done[i], i) << "in order";
    }
}

// An ACK that comes before the READ responses ahead of it (they were lost, or the wire
// reordered them) acknowledges the SEND behind the READ all the same: once the READ's
// responses are in, both complete, without waiting for the local ACK timeout (67 ms here) to
// send the SEND a second time. Here the first response is lost, so the requester has already
// gone back once when the ACK overtakes the response asked for again.
TEST_F(QueuePairTest, AnAckThatOvertakesReadResponsesStillCompletesWhatItAcknowledges) {
    connect_both();
    fill(b, 0, 1000, 3);
    b.post_recv(1, 8192, 4096);
    a.post_send(wqe(1, IBV_WR_RDMA_READ, a.iova(0), 1000, a.mr, b.iova(0), b.mr));
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(8192), 100, a.mr));
    int responses = 0;
    hold_back = [](const test_wire::frame& f) { return is_read_response(f); };
    run(100, 10'000, [&](const test_wire::frame& f) {
        return !(is_read_response(f) && responses++ == 0);
    });  // 1 ms
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c)) << "the READ";
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(a.poll_send(c)) << "the SEND, acknowledged before the READ completed";
    EXPECT_EQ(c.wr_id, 2u);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 1000));
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_FALSE(b.poll_recv(c)) << "delivered once";
    const std::optional<qp_report> r = report_of(eng.report(), a);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->timeouts, 0u);
}

// A READ response answers every request before its READ (responses come in order): a WRITE
// whose ACK was lost completes with the READ behind it, nothing sent twice.
TEST_F(QueuePairTest, AReadResponseAcknowledgesTheWriteBeforeItWhoseAckWasLost) {
    connect_both();
    fill(a, 0, 2000, 4);
    fill(b, 8192, 1000, 5);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 2000, a.mr, b.iova(0), b.mr));
    a.post_send(wqe(2, IBV_WR_RDMA_READ, a.iova(8192), 1000, a.mr, b.iova(8192), b.mr));
    run(50, 10'000,
        [](const test_wire::frame& f) { return opcode_of(f) != opcode::rc_acknowledge; });
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.wr_id, 2u);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 2000));
    EXPECT_TRUE(same(a, 8192, b, 8192, 1000));
    expect_nothing_sent_twice(a);
}

// What rdma_integrity runs across hosts, on a wire that loses and reorders nothing: batches of
// WRITEs, READs and SENDs (with and without immediate) of random sizes. Nothing is ever sent
// twice and every batch completes in order within a few polls of its last answer.
TEST_F(QueuePairTest, ALosslessWireCarriesAMixOfReadsWritesAndSendsWithoutRetransmitting) {
    connect_both();
    std::mt19937 rng(GetParamSeed());
    constexpr std::size_t slot = 65536;  // each op of a batch has its own, on both sides
    uint64_t posted = 0;
    for (int batch = 0; batch < 100; ++batch) {
        const uint32_t n = 1 + rng() % 15;
        for (uint32_t i = 0; i < n; ++i) {
            const std::size_t off = i * slot;
            const uint32_t size = 1 + rng() % (rng() % 4 == 0 ? 60000 : 3000);
            const uint32_t pick = rng() % 100;
            const ibv_wr_opcode op = pick < 30   ? IBV_WR_RDMA_WRITE
                                     : pick < 55 ? IBV_WR_RDMA_READ
                                     : pick < 80 ? IBV_WR_SEND
                                     : pick < 90 ? IBV_WR_RDMA_WRITE_WITH_IMM
                                                 : IBV_WR_SEND_WITH_IMM;
            if (op != IBV_WR_RDMA_WRITE && op != IBV_WR_RDMA_READ) {
                b.post_recv(posted + i, off, slot);
            }
            a.post_send(wqe(posted + i, op, a.iova(off), size, a.mr, b.iova(off), b.mr));
        }
        uint32_t got = 0;
        proto::cqe c{};
        for (int step = 0; step < 2000 && got < n; ++step) {  // 10 ms; the timeout is 67 ms
            run(1, 5'000);
            while (a.poll_send(c)) {
                ASSERT_EQ(c.status, IBV_WC_SUCCESS);
                ASSERT_EQ(c.wr_id, posted + got) << "in order";
                ++got;
            }
        }
        ASSERT_EQ(got, n) << "batch " << batch;
        while (b.poll_recv(c)) {
            ASSERT_EQ(c.status, IBV_WC_SUCCESS);
        }
        posted += n;
    }
    expect_nothing_sent_twice(a);
    const std::optional<qp_report> r = report_of(eng.report(), a);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->out_of_sequence, 0u);
    const std::optional<qp_report> rb = report_of(eng.report(), b);
    ASSERT_TRUE(rb.has_value());
    EXPECT_EQ(rb->duplicates, 0u);
}

}  // namespace
}  // namespace jakiro::rnic::test
