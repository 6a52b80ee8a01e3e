// The requester (rnic/requester.cc): WQEs taken out of the ring once, packets within the send
// window and the QP's read depth, a full port, and when a request asks for an ACK.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

TEST_F(QueuePairTest, SendOfEverySizeLandsInTheReceiveBufferWithItsLength) {
    connect_both();
    const uint32_t sizes[] = {0, 1, 2, 3, 4, 1023, 1024, 1025, 4096, 65536};
    uint64_t id = 0;
    for (uint32_t size : sizes) {
        fill(a, 0, size, size);
        std::memset(b.region + 0x80000, 0, 65536 + 16);
        b.post_recv(1000 + id, 0x80000, 65536 + 16);
        a.post_send(wqe(id, IBV_WR_SEND, a.iova(0), size, a.mr));
        run(200);
        proto::cqe c{};
        for (int d = 0; d < static_cast<int>(engine_drop::count); ++d) {
            EXPECT_EQ(eng.counters().drops[d].read(), 0u)
                << engine_drop_name(static_cast<engine_drop>(d));
        }
        ASSERT_TRUE(a.poll_send(c)) << size << " sent " << wire.sent;
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.opcode, IBV_WC_SEND);
        ASSERT_TRUE(b.poll_recv(c)) << size;
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.wr_id, 1000 + id);
        EXPECT_EQ(c.opcode, IBV_WC_RECV);
        EXPECT_EQ(c.byte_len, size);
        EXPECT_EQ(c.qp_num, b.qp);
        EXPECT_EQ(c.src_qp, a.qp);
        EXPECT_TRUE(same(a, 0, b, 0x80000, size)) << size;
        EXPECT_EQ(static_cast<uint8_t>(b.region[0x80000 + size]), 0) << "nothing past the message";
        ++id;
    }
}

TEST_F(QueuePairTest, WriteAndReadMoveScatteredBuffersAndWriteWithImmCompletesARecv) {
    connect_both();
    fill(a, 0, 70000, 7);
    auto w = wqe(1, IBV_WR_RDMA_WRITE_WITH_IMM, a.iova(0), 30000, a.mr, b.iova(0x10000), b.mr);
    w.num_sge = 3;
    w.sg[1] = {a.iova(40000), 20000, a.mr};
    w.sg[2] = {a.iova(0), 5000, a.mr};
    w.imm_data = htonl(0xCAFE);
    b.post_recv(77, 0x90000, 16);
    a.post_send(w);
    run(300);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_TRUE(same(a, 0, b, 0x10000, 30000));
    EXPECT_TRUE(same(a, 40000, b, 0x10000 + 30000, 20000));
    EXPECT_TRUE(same(a, 0, b, 0x10000 + 50000, 5000));
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(c.wr_id, 77u);
    EXPECT_EQ(c.imm_data, htonl(0xCAFE));
    EXPECT_NE(c.wc_flags & IBV_WC_WITH_IMM, 0u);

    fill(b, 0x40000, 65536, 9);
    a.post_send(wqe(2, IBV_WR_RDMA_READ, a.iova(0xA0000), 65536, a.mr, b.iova(0x40000), b.mr));
    run(300);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(c.byte_len, 65536u);
    EXPECT_TRUE(same(a, 0xA0000, b, 0x40000, 65536));
}

// The initiator depth: with max_rd_atomic 16, a 17th READ waits until one of the 16 has its
// responses, though the send window has room for all 24 (8 KiB, 8 packets each). A requester
// that sent them all would exceed the responder's max_dest_rd_atomic, which refuses the rest.
TEST_F(QueuePairTest, ARequesterKeepsNoMoreReadsOutstandingThanMaxRdAtomic) {
    connect_both();
    constexpr uint32_t reads = 24, bytes = 8192;
    fill(b, 0, reads * bytes, 5);
    for (uint32_t i = 0; i < reads; ++i) {
        a.post_send(wqe(100 + i, IBV_WR_RDMA_READ, a.iova(0x80000 + i * bytes), bytes, a.mr,
                        b.iova(i * bytes), b.mr));
    }
    unsigned requests = 0;
    run(1, 10'000, [&](const test_wire::frame& f) {  // b has answered none of them yet
        requests += f.bytes[42] == opcode::rc_read_request ? 1 : 0;
        return true;
    });
    EXPECT_EQ(requests, 16u) << "max_rd_atomic is 16";
    run(3000);
    for (uint32_t i = 0; i < reads; ++i) {
        proto::cqe c{};
        ASSERT_TRUE(a.poll_send(c)) << i;
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << i;
        EXPECT_EQ(c.wr_id, 100u + i);
    }
    EXPECT_TRUE(same(a, 0x80000, b, 0, reads * bytes));
}

// The shim may post into slots jakirod has retired, no further: a send producer more than a
// ring ahead of the oldest unretired WR (here: the first WR never completes, every other one
// was taken) is a broken client, even though it is only one ahead of what was taken.
TEST_F(QueuePairTest, ASendProducerBeyondRetiredPlusCapacityMovesTheQpToErr) {
    connect_both();
    const uint32_t capacity = a.ring->sq_capacity;
    for (uint32_t i = 0; i < capacity; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    }
    auto nothing = [](const test_wire::frame&) { return false; };
    run(50, 1'000, nothing);  // every WR taken and sent, none acknowledged
    ASSERT_EQ(eng.report()[0].state, IBV_QPS_RTS);
    ASSERT_EQ(proto::load_posted_acquire(a.ring->sq_consumer), 0u) << "nothing retired";
    // One more: the slot of WR 0, which jakirod still holds.
    a.post_send(wqe(capacity, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    run(1, 1'000, nothing);
    EXPECT_EQ(eng.report()[0].state, IBV_QPS_ERR);
    EXPECT_EQ(std::count(events.begin(), events.end(),
                         static_cast<uint32_t>(proto::event_type::qp_fatal)),
              1);
}

TEST_F(QueuePairTest, AFullPortDelaysPacketsWithoutLosingThem) {
    connect_both();
    fill(a, 0, 8192, 3);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 8192, a.mr, b.iova(0), b.mr));
    wire.refuse_buffers = true;
    run(20);
    wire.refuse_buffers = false;
    run(100);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 8192));
}

TEST_F(QueuePairTest, ADeepSendQueueOfLargeWritesAllCompletes) {
    connect_both();
    // perftest's ib_write_bw: 128 WRs of 64 KiB posted at once, reposted as they complete;
    // only every 16th is signaled, and a completion means its slot and those before are free.
    int completed = 0, posted = 0;
    for (; posted < 128; ++posted) {
        auto w = wqe(posted, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr);
        w.send_flags = posted % 16 == 15 ? IBV_SEND_SIGNALED : 0;
        a.post_send(w);
    }
    for (int round = 0; round < 5000 && completed < 1008; ++round) {
        run(1);
        proto::cqe c{};
        while (a.poll_send(c)) {
            ASSERT_EQ(c.status, IBV_WC_SUCCESS);
            ASSERT_GE(proto::load_retired_acquire(a.ring->sq_consumer), c.wr_id + 1)
                << "a completed WR's slot is free before its completion is visible";
            completed = static_cast<int>(c.wr_id) + 1;
            while (posted < 1008 && posted - completed < 128) {
                auto w = wqe(posted, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr);
                w.send_flags = posted % 16 == 15 ? IBV_SEND_SIGNALED : 0;
                a.post_send(w);
                ++posted;
            }
        }
    }
    EXPECT_EQ(completed, 1008);
}

// Whether a request asks for an ACK is the AckReq bit, the top bit of the BTH's byte 8.
TEST_F(QueuePairTest, BackToBackWritesAskForAnAckEvery256PacketsAndAtTheEnd) {
    connect_both();
    // ib_write_bw's pattern: sixteen 64 KiB WRITEs queued at once, 64 packets each at MTU 1024.
    constexpr int writes = 16;
    fill(a, 0, 65536, 7);
    for (int i = 0; i < writes; ++i) {
        auto w = wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr);
        w.send_flags = i == writes - 1 ? IBV_SEND_SIGNALED : 0;
        a.post_send(w);
    }
    std::vector<bool> asks;
    for (int step = 0; step < 2000; ++step) {
        // 100 ns of virtual time per visit: the 100 us gap rule stays out of the way.
        run(1, 100, [&](const test_wire::frame& f) {
            const uint8_t op = f.bytes[42];
            if (f.from == 0 && op >= 0x06 && op <= 0x08) {
                asks.push_back((f.bytes[42 + 8] & 0x80) != 0);
            }
            return true;
        });
        proto::cqe c{};
        if (a.poll_send(c)) {
            ASSERT_EQ(c.status, IBV_WC_SUCCESS);
            ASSERT_EQ(c.wr_id, writes - 1u);
            break;
        }
    }
    ASSERT_EQ(asks.size(), writes * 64u);
    EXPECT_TRUE(same(a, 0, b, 0, 65536));
    EXPECT_TRUE(asks.back()) << "the last packet of a burst asks, or its completion never comes";
    std::size_t asked = 0, since = 0, longest = 0;
    for (const bool ask : asks) {
        asked += ask;
        since = ask ? 0 : since + 1;
        longest = std::max(longest, since);
    }
    EXPECT_LT(longest, 256u) << "the window must open long before 2048 packets are out";
    EXPECT_LE(asked, asks.size() / 256 + 1) << "one ACK per WRITE is one message per 64 packets";
}

TEST_F(QueuePairTest, ALoneWriteAndEverySendAskForAnAckOnTheirLastPacket) {
    connect_both();
    b.post_recv(1, 0, 4096);
    b.post_recv(2, 4096, 4096);
    std::vector<std::pair<uint8_t, bool>> requests;  // (opcode, asks)
    const auto watch = [&](const test_wire::frame& f) {
        if (f.from == 0 && f.bytes[42] != 0x11) {
            requests.emplace_back(f.bytes[42], (f.bytes[42 + 8] & 0x80) != 0);
        }
        return true;
    };
    // A WRITE with nothing behind it, then two SENDs back to back: a responder's program may
    // destroy its QP on a SEND's completion, so each SEND is acknowledged on its own.
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 3000, a.mr, b.iova(8192), b.mr));
    run(20, 100, watch);
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(0), 2000, a.mr));
    a.post_send(wqe(3, IBV_WR_SEND, a.iova(0), 2000, a.mr));
    run(50, 100, watch);
    int completed = 0;
    for (proto::cqe c{}; a.poll_send(c); ++completed) {
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    }
    EXPECT_EQ(completed, 3);
    // WRITE first, middle, last (0x06 0x07 0x08), then each SEND's first and last (0x00 0x02).
    const std::vector<std::pair<uint8_t, bool>> expected = {
        {0x06, false}, {0x07, false}, {0x08, true}, {0x00, false},
        {0x02, true},  {0x00, false}, {0x02, true}};
    EXPECT_EQ(requests, expected);
}

// The tail of a coalesced run: a WRITE's last packet leaves without AckReq because another
// WRITE follows, then that one does not go (the port is full) and the program moves the QP to
// SQD, which starts nothing new. The responder ACKs only when asked; without a probe the first
// WRITE would never complete and the drain never end.
TEST_F(QueuePairTest, AWriteWhoseFollowerNeverLeavesIsStillAcknowledged) {
    connect_both();
    fill(a, 0, 3000, 11);
    auto first = wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 3000, a.mr, b.iova(0), b.mr);
    first.send_flags = IBV_SEND_SIGNALED;
    a.post_send(first);
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 3000, a.mr, b.iova(8192), b.mr));
    std::vector<std::pair<uint32_t, bool>> requests;  // (PSN, asks) of a's requests
    const auto watch = [&](const test_wire::frame& f) {
        if (f.from == 0) {
            const uint8_t* bth = f.bytes.data() + 42;
            requests.emplace_back((bth[9] << 16) | (bth[10] << 8) | bth[11], (bth[8] & 0x80) != 0);
        }
        return true;
    };
    wire.accept_until = 3;  // the first WRITE's three packets, not the second's first
    run(1, 1'000, watch);
    ASSERT_EQ(requests.size(), 3u);
    EXPECT_FALSE(requests.back().second) << "the second WRITE was to follow: no AckReq";
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_SQD;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    wire.accept_until = UINT64_MAX;
    run(50, 10'000, watch);  // 500 us: well past the 100 us gap
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c)) << "the first WRITE never completed";
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 3000));
    // One probe: the last packet again, asking; nothing of the second WRITE (SQD).
    ASSERT_EQ(requests.size(), 4u);
    EXPECT_EQ(requests[3], std::make_pair(requests[2].first, true));
}

}  // namespace
}  // namespace jakiro::rnic::test
