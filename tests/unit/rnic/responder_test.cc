// The responder (rnic/responder.cc): protection of its memory (MR rights, the QP's access
// flags), atomics executed once, and the verdicts of its named steps as both ends see them.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

TEST_F(QueuePairTest, ProtectionViolationsCompleteWithTheMatchingStatusAndTouchNothing) {
    struct violation {
        const char* what;
        std::function<proto::send_wqe(side&, side&)> make;
        ibv_wc_status expected;
    };
    const violation cases[] = {
        {"bad rkey",
         [](side& x, side& y) {
             return wqe(1, IBV_WR_RDMA_WRITE, x.iova(0), 64, x.mr, y.iova(0), y.mr ^ 0x55);
         },
         IBV_WC_REM_ACCESS_ERR},
        {"out of bounds",
         [](side& x, side& y) {
             return wqe(1, IBV_WR_RDMA_WRITE, x.iova(0), 64, x.mr, y.iova(region_bytes - 32), y.mr);
         },
         IBV_WC_REM_ACCESS_ERR},
        {"bad lkey",
         [](side& x, side& y) {
             return wqe(1, IBV_WR_RDMA_WRITE, x.iova(0), 64, x.mr + 0x100, y.iova(0), y.mr);
         },
         IBV_WC_LOC_PROT_ERR},
    };
    for (const auto& v : cases) {
        SCOPED_TRACE(v.what);
        TearDownSides();
        make_side(a, 0, ip_a, 101);
        make_side(b, 1, ip_b, 202);
        connect_both();
        fill(a, 0, 64, 1);
        std::memset(b.region, 0x5A, region_bytes);
        a.post_send(v.make(a, b));
        a.post_send(wqe(2, IBV_WR_SEND, a.iova(0), 8, a.mr));
        run(100);
        proto::cqe c{};
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, 1u);
        EXPECT_EQ(c.status, v.expected);
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, 2u);
        EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR) << "the QP is in error: the rest is flushed";
        for (std::size_t i = 0; i < region_bytes; i += 97) {
            ASSERT_EQ(static_cast<uint8_t>(b.region[i]), 0x5A) << "responder memory untouched";
        }
    }
}

TEST_F(QueuePairTest, AWriteToARegionWithoutRemoteWriteAccessIsRefused) {
    // b registers a second, read-only region (remote read only) and a targets it.
    auto mr =
        proto::make_message<proto::reg_mr_request>(static_cast<uint16_t>(proto::opcode::reg_mr), 1);
    mr.pd_handle = b.pd;
    mr.access = proto::access_remote_read;
    mr.addr = mr.iova = region_iova;
    mr.length = 4096;
    uint32_t ro = 0;
    ASSERT_EQ(b.res->reg_mr(b.client, mr, b.region_fd, ro), 0);
    connect_both();
    std::memset(b.region, 0x33, 4096);
    a.post_send(wqe(9, IBV_WR_RDMA_WRITE, a.iova(0), 16, a.mr, b.iova(0), ro));
    run(100);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0x33);
    EXPECT_NE(std::find(events.begin(), events.end(),
                        static_cast<uint32_t>(proto::event_type::qp_access_err)),
              events.end())
        << "the responder's owner hears IBV_EVENT_QP_ACCESS_ERR";
}

// IB spec C9-88: a zero-length RDMA WRITE or READ is not checked against any MR, whatever its
// R_Key and VA. UCX's rc_verbs flushes an endpoint with a zero-length WRITE, rkey 0, VA 0.
TEST_F(QueuePairTest, ZeroLengthWritesAndReadsNeedNoValidRkeyOverTheWireOrOnOneHost) {
    for (const bool same_host : {false, true}) {
        SCOPED_TRACE(same_host ? "on one host" : "over the wire");
        TearDownSides();
        make_side(a, 0, ip_a, 101);
        make_side(b, 1, ip_b, 202);
        wire.same_host = same_host;
        connect_both();
        auto write = wqe(1, IBV_WR_RDMA_WRITE, 0, 0, 0, 0, 0);
        write.num_sge = 0;
        auto read = wqe(2, IBV_WR_RDMA_READ, 0, 0, 0, 0, 0);
        read.num_sge = 0;
        a.post_send(write);
        a.post_send(read);
        a.post_send(wqe(3, IBV_WR_RDMA_WRITE, a.iova(0), 16, a.mr, b.iova(0), b.mr));
        run(100);
        proto::cqe c{};
        for (uint64_t id = 1; id <= 3; ++id) {
            ASSERT_TRUE(a.poll_send(c));
            EXPECT_EQ(c.wr_id, id);
            EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "WR " << id;
        }
        EXPECT_TRUE(events.empty()) << "no access error event at the responder";
    }
}

// The same for the receive queue: a producer more than a ring ahead of what was retired is
// met at the next receive, and the QP goes to ERR instead of RNR-NAKing forever.
TEST_F(QueuePairTest, ARecvProducerBeyondRetiredPlusCapacityMovesTheQpToErr) {
    connect_both();
    const uint32_t capacity = b.ring->rq_capacity;
    b.rq_posted = capacity + 1;
    proto::publish_wqes(b.ring->rq_producer, b.rq_posted);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 8, a.mr));
    run(20);
    EXPECT_EQ(eng.report()[1].state, IBV_QPS_ERR);
    EXPECT_EQ(std::count(events.begin(), events.end(),
                         static_cast<uint32_t>(proto::event_type::qp_fatal)),
              1);
}

TEST_F(QueuePairTest, FetchAddAndCompareSwapReturnTheOldValueAndChangeMemoryOnce) {
    connect_both();
    uint64_t start = 1000;
    std::memcpy(b.region + 64, &start, 8);
    a.post_send(
        atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(0), a.mr, b.iova(64), b.mr, 5, 0));
    a.post_send(
        atomic_wqe(2, IBV_WR_ATOMIC_CMP_AND_SWP, a.iova(8), a.mr, b.iova(64), b.mr, 1005, 7));
    a.post_send(atomic_wqe(3, IBV_WR_ATOMIC_CMP_AND_SWP, a.iova(16), a.mr, b.iova(64), b.mr, 1, 9));
    run(20);
    proto::cqe c{};
    for (uint64_t id = 1; id <= 3; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.opcode, id == 1 ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP);
        EXPECT_EQ(c.byte_len, 8u);
    }
    EXPECT_EQ(word_at(a, 0), 1000u) << "fetch-add returns the value before";
    EXPECT_EQ(word_at(a, 8), 1005u) << "compare matched: swapped";
    EXPECT_EQ(word_at(a, 16), 7u) << "compare did not match: returned, not swapped";
    EXPECT_EQ(word_at(b, 64), 7u);
}

TEST_F(QueuePairTest, ALostAtomicAckIsAnsweredFromTheCacheNotExecutedTwice) {
    connect(a, b, ip_b, 7, 7, /*timeout=*/8);
    connect(b, a, ip_a);
    uint64_t zero = 0;
    std::memcpy(b.region, &zero, 8);
    for (int i = 0; i < 20; ++i) {
        a.post_send(
            atomic_wqe(i, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(8 * i), a.mr, b.iova(0), b.mr, 1, 0));
    }
    // Every other atomic ACK is lost at first: the requester asks again after its timeout.
    int acks = 0;
    run(2000, 10'000, [&](const test_wire::frame& f) {
        return !(f.bytes[42] == opcode::rc_atomic_acknowledge && acks++ % 2 == 0 && acks < 20);
    });
    proto::cqe c{};
    int done = 0;
    while (a.poll_send(c)) {
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        ++done;
    }
    EXPECT_EQ(done, 20);
    EXPECT_EQ(word_at(b, 0), 20u) << "each FETCH_ADD executed exactly once";
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(word_at(a, 8 * i), static_cast<uint64_t>(i)) << "old values in order";
    }
}

TEST_F(QueuePairTest, AtomicsCheckAlignmentAndRights) {
    connect_both();
    a.post_send(atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(0), a.mr, b.iova(4), b.mr, 1, 0));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_INV_REQ_ERR) << "not 8-byte aligned";
}

// As the shim writes one: the 8 bytes travel in the WQE.
proto::send_wqe atomic_write_wqe(uint64_t wr_id, uint64_t remote, uint32_t rkey, uint64_t value) {
    auto w = wqe(wr_id, IBV_WR_ATOMIC_WRITE, 0, 0, 0, remote, rkey);
    w.num_sge = 0;
    w.send_flags |= IBV_SEND_INLINE;
    w.inline_len = 8;
    std::memcpy(w.inline_data, &value, 8);
    return w;
}

TEST_F(QueuePairTest, AtomicWritePlacesItsEightBytesAndCompletesOnTheAck) {
    for (const bool one_host : {false, true}) {
        SCOPED_TRACE(one_host ? "on one host" : "across hosts");
        TearDownSides();
        make_side(a, 0, ip_a, 101);
        make_side(b, 1, ip_b, 202);
        wire.same_host = one_host;
        connect_both();
        fill(b, 0, 64, 3);
        std::vector<std::byte> before(b.region, b.region + 64);
        const uint64_t frames_before = wire.sent;
        a.post_send(atomic_write_wqe(1, b.iova(16), b.mr, 0x1122334455667788));
        run(20);
        proto::cqe c{};
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.opcode, IBV_WC_ATOMIC_WRITE);
        EXPECT_EQ(word_at(b, 16), 0x1122334455667788u);
        EXPECT_EQ(std::memcmp(before.data(), b.region, 16), 0) << "the bytes before untouched";
        EXPECT_EQ(std::memcmp(before.data() + 24, b.region + 24, 40), 0) << "and after";
        EXPECT_EQ(wire.sent == frames_before, one_host) << "memory to memory on one host";
    }
}

TEST_F(QueuePairTest, AnAtomicWriteToAnUnalignedAddressIsAnInvalidRequest) {
    connect_both();
    fill(b, 0, 64, 3);
    std::vector<std::byte> before(b.region, b.region + 64);
    a.post_send(atomic_write_wqe(1, b.iova(4), b.mr, 7));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(std::memcmp(before.data(), b.region, 64), 0);
}

TEST_F(QueuePairTest, ARepeatedAtomicWriteIsAckedAgainNotPlacedOverANewerValue) {
    connect(a, b, ip_b, 7, 7, /*timeout=*/8);
    connect(b, a, ip_a);
    a.post_send(atomic_write_wqe(1, b.iova(0), b.mr, 5));
    // The first ACK is lost; meanwhile b's program stores its own value in the word. The
    // requester's retry is a duplicate: ACKed, never placed again.
    bool lost = false;
    run(2000, 10'000, [&](const test_wire::frame& f) {
        if (!lost && f.bytes[42] == opcode::rc_acknowledge) {
            lost = true;
            const uint64_t newer = 9;
            std::memcpy(b.region, &newer, 8);
            return false;
        }
        return true;
    });
    ASSERT_TRUE(lost);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(word_at(b, 0), 9u);
    uint64_t retransmitted = 0;
    for (const qp_report& r : eng.report()) {
        retransmitted += r.vnic == a.vnic && r.qpn == a.qp ? r.retransmitted : 0;
    }
    EXPECT_GE(retransmitted, 1u) << "the completion came from the duplicate's ACK";
}

TEST_F(QueuePairTest, TheResponderRefusesWhatItsQpAccessFlagsDoNotGrant) {
    struct probe {
        ibv_wr_opcode op;
        unsigned right;
    };
    const probe probes[] = {{IBV_WR_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE},
                            {IBV_WR_RDMA_WRITE_WITH_IMM, IBV_ACCESS_REMOTE_WRITE},
                            {IBV_WR_RDMA_READ, IBV_ACCESS_REMOTE_READ},
                            {IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_ACCESS_REMOTE_ATOMIC},
                            {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_ACCESS_REMOTE_ATOMIC},
                            {IBV_WR_ATOMIC_WRITE, IBV_ACCESS_REMOTE_WRITE}};
    const unsigned all = qp_access;
    for (const bool one_host : {false, true}) {
        for (const probe& p : probes) {
            for (const bool granted : {true, false}) {
                SCOPED_TRACE(testing::Message() << "opcode " << p.op << (granted ? " granted" : "")
                                                << (one_host ? " on one host" : ""));
                TearDownSides();
                make_side(a, 0, ip_a, 101);
                make_side(b, 1, ip_b, 202);
                wire.same_host = one_host;
                connect(a, b, ip_b);
                qp_access = granted ? all : all & ~p.right;  // b's QP, whose MR allows all
                connect(b, a, ip_a);
                qp_access = all;
                fill(a, 0, 64, 1);
                fill(b, 0, 64, 2);
                std::vector<std::byte> before(b.region, b.region + 64);
                b.post_recv(7, 4096, 64);
                proto::send_wqe w =
                    p.op == IBV_WR_ATOMIC_FETCH_AND_ADD || p.op == IBV_WR_ATOMIC_CMP_AND_SWP
                        ? atomic_wqe(1, p.op, a.iova(0), a.mr, b.iova(0), b.mr, word_at(b, 0), 5)
                    : p.op == IBV_WR_ATOMIC_WRITE
                        ? atomic_write_wqe(1, b.iova(0), b.mr, 5)
                        : wqe(1, p.op, a.iova(0), 64, a.mr, b.iova(0), b.mr);
                a.post_send(w);
                run(20);
                proto::cqe c{};
                ASSERT_TRUE(a.poll_send(c));
                if (granted) {
                    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
                    continue;
                }
                EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
                EXPECT_EQ(std::memcmp(before.data(), b.region, 64), 0) << "b's memory untouched";
                EXPECT_EQ(report_of(eng.report(), b)->state, IBV_QPS_ERR);
            }
        }
    }
}

// The responder's verdicts (responder.cc's steps) that the tests above do not reach, each as the
// requester and the responder's owner see it. Where a test needs a request no requester would
// send, it takes a's frames off the wire, rewrites them (opcode, PSN) and seals them again.
class ResponderVerdictTest : public QueuePairTest {
  protected:
    static constexpr std::size_t bth_at = 14 + 20 + 8;  // Ethernet, IPv4, UDP
    static constexpr std::size_t aeth_at = bth_at + 12;

    static uint8_t opcode_of(const test_wire::frame& f) { return f.bytes[bth_at]; }
    static uint32_t psn_of(const test_wire::frame& f) {
        const uint8_t* b = f.bytes.data() + bth_at + 9;
        return (uint32_t{b[0]} << 16) | (uint32_t{b[1]} << 8) | b[2];
    }
    static void set_psn(test_wire::frame& f, uint32_t psn) {
        uint8_t* b = f.bytes.data() + bth_at + 9;
        b[0] = static_cast<uint8_t>(psn >> 16);
        b[1] = static_cast<uint8_t>(psn >> 8);
        b[2] = static_cast<uint8_t>(psn);
    }
    // The AETH syndrome of an ACK or NAK b sent; -1 for any other frame.
    static int syndrome_from_b(const test_wire::frame& f) {
        return f.from == 1 && opcode_of(f) == opcode::rc_acknowledge ? f.bytes[aeth_at] : -1;
    }
    // Hands `f` (rewritten or not) to the engine as the wire would, with a fresh ICRC.
    void deliver(test_wire::frame f) {
        uint8_t* ip = f.bytes.data() + 14;
        const auto ip_len = static_cast<uint32_t>(f.bytes.size() - 14);
        store_icrc(ip + ip_len - 4, *compute_icrc(ip, ip_len - 4));
        eng.receive(f.dst_ip_be == htonl(ip_a) ? 0 : 1, ip, ip_len, wire, now);
    }
    // a's frames of what it posted, taken off the wire before anyone receives them.
    std::deque<test_wire::frame> frames_of_a() {
        eng.poll(wire, now);
        std::deque<test_wire::frame> out;
        out.swap(wire.frames);
        return out;
    }
    bool heard(proto::event_type e) const {
        return std::find(events.begin(), events.end(), static_cast<uint32_t>(e)) != events.end();
    }
    proto::cqe completion(side& s, bool send) {
        proto::cqe c{};
        EXPECT_TRUE(send ? s.poll_send(c) : s.poll_recv(c));
        return c;
    }
};

TEST_F(ResponderVerdictTest, APsnGapIsNakkedOnceAsASequenceErrorAndGoBackNHealsIt) {
    connect_both();
    b.post_recv(1, 0, 8192);
    fill(a, 0, 4096, 7);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 4096, a.mr));  // 4 packets at MTU 1024
    bool lost_first = false;
    int sequence_naks = 0;
    run(200, 10'000, [&](const test_wire::frame& f) {
        if (f.from == 0 && !lost_first) {
            lost_first = true;  // packets 2-4 arrive ahead of the expected PSN
            return false;
        }
        sequence_naks += syndrome_from_b(f) == syndrome_nak(nak_code::psn_sequence_error);
        return true;
    });
    EXPECT_EQ(sequence_naks, 1) << "three packets ahead, one NAK until the expected PSN comes";
    EXPECT_EQ(completion(a, true).status, IBV_WC_SUCCESS);
    const proto::cqe r = completion(b, false);
    EXPECT_EQ(r.status, IBV_WC_SUCCESS);
    EXPECT_EQ(r.byte_len, 4096u);
    EXPECT_TRUE(same(a, 0, b, 0, 4096));
    for (const auto& q : eng.report()) {
        if (q.vnic == 1) {
            EXPECT_EQ(q.out_of_sequence, 3u);
            EXPECT_EQ(q.naks_sent, 1u);
        }
    }
}

TEST_F(ResponderVerdictTest, AMiddlePacketWithNoMessageUnderWayIsAnInvalidRequest) {
    connect_both();
    b.post_recv(1, 0, 8192);
    std::memset(b.region, 0x5A, 8192);
    fill(a, 0, 3000, 8);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 3000, a.mr));
    auto frames = frames_of_a();
    ASSERT_EQ(frames.size(), 3u);
    ASSERT_EQ(opcode_of(frames[1]), opcode::rc_send_middle);
    // The middle packet at the expected PSN, its first packet never seen: out of sequence.
    set_psn(frames[1], psn_of(frames[0]));
    deliver(frames[1]);
    ASSERT_FALSE(wire.frames.empty());
    EXPECT_EQ(syndrome_from_b(wire.frames.back()), syndrome_nak(nak_code::invalid_request));
    EXPECT_TRUE(heard(proto::event_type::qp_req_err));
    run(50);
    EXPECT_EQ(completion(a, true).status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(completion(b, false).status, IBV_WC_WR_FLUSH_ERR) << "the WQE was never taken";
    for (std::size_t i = 0; i < 8192; ++i) {
        ASSERT_EQ(static_cast<uint8_t>(b.region[i]), 0x5A) << "nothing placed, byte " << i;
    }
}

TEST_F(ResponderVerdictTest, AFirstPacketShorterThanTheMtuIsAnInvalidRequest) {
    connect_both();
    b.post_recv(1, 0, 8192);
    std::memset(b.region, 0x5A, 8192);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    auto frames = frames_of_a();
    ASSERT_EQ(frames.size(), 1u);
    ASSERT_EQ(opcode_of(frames[0]), opcode::rc_send_only);
    frames[0].bytes[bth_at] = opcode::rc_send_first;  // 100 bytes, yet more would follow
    deliver(frames[0]);
    ASSERT_FALSE(wire.frames.empty());
    EXPECT_EQ(syndrome_from_b(wire.frames.back()), syndrome_nak(nak_code::invalid_request));
    run(50);
    EXPECT_EQ(completion(a, true).status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(completion(b, false).status, IBV_WC_WR_FLUSH_ERR)
        << "refused for its length before it took a receive WQE";
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0x5A);
}

TEST_F(ResponderVerdictTest, ASendLongerThanItsReceiveFailsLocLenThereAndRemInvReqHere) {
    connect_both();
    b.post_recv(1, 0, 100);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 200, a.mr));
    run(50);
    EXPECT_EQ(completion(a, true).status, IBV_WC_REM_INV_REQ_ERR);
    const proto::cqe r = completion(b, false);
    EXPECT_EQ(r.wr_id, 1u);
    EXPECT_EQ(r.status, IBV_WC_LOC_LEN_ERR);
    EXPECT_TRUE(heard(proto::event_type::qp_req_err));
}

TEST_F(ResponderVerdictTest, AReceiveWqeWithABadLkeyFailsThereAndRemOpErrHere) {
    connect_both();
    proto::recv_wqe w{};
    w.wr_id = 9;
    w.num_sge = 1;
    w.sg[0] = {b.iova(0), 4096, b.mr ^ 0x55};  // no such local key
    proto::rq_slots(b.ring, b.ring->sq_capacity)[b.rq_posted & (b.ring->rq_capacity - 1)] = w;
    proto::publish_wqes(b.ring->rq_producer, ++b.rq_posted);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 64, a.mr));
    run(50);
    EXPECT_EQ(completion(a, true).status, IBV_WC_REM_OP_ERR);
    const proto::cqe r = completion(b, false);
    EXPECT_EQ(r.wr_id, 9u);
    EXPECT_EQ(r.status, IBV_WC_LOC_PROT_ERR);
    EXPECT_TRUE(heard(proto::event_type::qp_fatal));
}

TEST_F(ResponderVerdictTest, ReadsBeyondTheRespondersResourcesAreAnInvalidRequest) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_RDMA_READ, a.iova(0), 1, a.mr, b.iova(0), b.mr));
    auto frames = frames_of_a();
    ASSERT_EQ(frames.size(), 1u);
    // A requester ignoring max_dest_rd_atomic (16): one-packet READs, each at the next PSN,
    // before b has sent a single response.
    const uint32_t psn = psn_of(frames[0]);
    int refused_at = -1;
    for (int k = 0; k < 32 && refused_at < 0; ++k) {
        set_psn(frames[0], (psn + k) & 0xFFFFFF);
        deliver(frames[0]);
        for (const auto& f : wire.frames) {
            if (syndrome_from_b(f) == syndrome_nak(nak_code::invalid_request)) {
                refused_at = k;
            }
        }
    }
    EXPECT_GE(refused_at, 16) << "the READs a QP may have outstanding are taken";
    EXPECT_LT(refused_at, 32) << "a queue without bound is refused";
    EXPECT_TRUE(heard(proto::event_type::qp_req_err));
}

// Answers leave in PSN order (IB spec 9.7.5.1.1): the ACK of a SEND that came behind a READ
// follows that READ's responses. Ahead of them, it tells the requester they were lost, and the
// requester asks for the READ again and resends everything after it, on a wire that loses
// nothing (a long run across hosts spent most of its time retransmitting so).
TEST_F(QueuePairTest, AnAckLeavesBehindTheReadResponsesBeforeIt) {
    connect_both();
    fill(b, 0, 3000, 7);
    b.post_recv(1, 8192, 4096);
    a.post_send(wqe(1, IBV_WR_RDMA_READ, a.iova(0), 3000, a.mr, b.iova(0), b.mr));
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(8192), 100, a.mr));
    const std::vector<uint32_t> answers = answers_of_b(20);
    expect_sends_complete(a, {1, 2});
    EXPECT_TRUE(same(a, 0, b, 0, 3000));
    ASSERT_EQ(answers.size(), 4u) << "three READ responses and one ACK, each once";
    expect_in_psn_order(answers, answers.size());
    expect_nothing_sent_twice(a);
}

// A sequence-error NAK leaves behind the READ responses before it, as an ACK does: ahead of
// them, the requester cannot act on it (it waits at the READ) and what the NAK asks for again
// waits for the ACK timeout.
TEST_F(QueuePairTest, ASequenceErrorNakLeavesBehindTheReadResponsesBeforeIt) {
    connect_both();
    fill(b, 0, 3000, 7);
    fill(a, 8192, 3000, 9);
    b.post_recv(1, 8192, 4096);
    a.post_send(wqe(1, IBV_WR_RDMA_READ, a.iova(0), 3000, a.mr, b.iova(0), b.mr));
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(8192), 3000, a.mr));  // 3 packets after the READ's 3
    bool lost = false;
    const std::vector<uint32_t> answers = answers_of_b(50, [&](const test_wire::frame& f) {
        // The SEND's next packets arrive ahead of the expected PSN.
        const bool lose = !lost && opcode_of(f) == opcode::rc_send_first;
        lost = lost || lose;
        return lose;
    });
    ASSERT_TRUE(lost);
    expect_sends_complete(a, {1, 2});  // the SEND sent again at once after the READ's responses
    EXPECT_TRUE(same(a, 0, b, 0, 3000));
    EXPECT_TRUE(same(a, 8192, b, 8192, 3000));
    expect_in_psn_order(answers, 4);
    const std::optional<qp_report> r = report_of(eng.report(), a);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->timeouts, 0u);
}

// An atomic executed behind a READ still answering is ACKed after that READ's responses: ahead
// of them, the requester dropped the ACK as out of order, went back for the READ and asked for
// the atomic again (answered from the cache, yet sent twice).
TEST_F(QueuePairTest, AnAtomicAckLeavesBehindTheReadResponsesBeforeIt) {
    connect_both();
    fill(b, 0, 3000, 8);
    uint64_t five = 5;
    std::memcpy(b.region + 8192, &five, 8);
    a.post_send(wqe(1, IBV_WR_RDMA_READ, a.iova(0), 3000, a.mr, b.iova(0), b.mr));
    a.post_send(
        atomic_wqe(2, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(8192), a.mr, b.iova(8192), b.mr, 1, 0));
    const std::vector<uint32_t> answers = answers_of_b(20);
    expect_sends_complete(a, {1, 2});
    EXPECT_TRUE(same(a, 0, b, 0, 3000));
    EXPECT_EQ(word_at(a, 8192), 5u) << "the original value";
    EXPECT_EQ(word_at(b, 8192), 6u) << "added once";
    ASSERT_EQ(answers.size(), 4u) << "three READ responses and the atomic ACK, each once";
    expect_in_psn_order(answers, answers.size());
    expect_nothing_sent_twice(a);
}

}  // namespace
}  // namespace jakiro::rnic::test
