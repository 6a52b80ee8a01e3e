// UC and UD (rnic/unreliable.cc): messages without acknowledgements, the UD responder's Q_Key
// and GRH area, and QP1 out of a tenant's reach.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

class UcQpTest : public QueuePairTest {
  protected:
    void SetUp() override {
        qp_type = proto::qpt_uc;
        QueuePairTest::SetUp();
    }
    // The wire's frames of RoCE opcode `op` (BTH byte 0) so far: sent counts all of them.
    static uint8_t opcode_of(const test_wire::frame& f) { return f.bytes[42]; }
};

TEST_F(UcQpTest, MessagesCompleteWhenSentAndLandWithoutASingleAck) {
    connect_both();
    fill(a, 0, 12288, 1);
    const uint32_t sizes[] = {1, 1024, 3000, 12288};
    for (uint64_t id = 0; id < 4; ++id) {
        b.post_recv(100 + id, 65536 * id, 12288);
        a.post_send(wqe(id, IBV_WR_SEND, a.iova(0), sizes[id], a.mr));
    }
    a.post_send(wqe(9, IBV_WR_RDMA_WRITE, a.iova(0), 5000, a.mr, b.iova(300000), b.mr));
    bool saw_ack = false;
    run(200, 10'000, [&](const test_wire::frame& f) {
        saw_ack |= opcode_of(f) == 0x11 || opcode_of(f) == 0x12;
        return true;
    });
    EXPECT_FALSE(saw_ack) << "UC is never acknowledged";
    proto::cqe c{};
    for (uint64_t id : {0, 1, 2, 3, 9}) {
        ASSERT_TRUE(a.poll_send(c)) << id;
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    }
    for (uint64_t id = 0; id < 4; ++id) {
        ASSERT_TRUE(b.poll_recv(c));
        EXPECT_EQ(c.wr_id, 100 + id);
        EXPECT_EQ(c.byte_len, sizes[id]);
        EXPECT_TRUE(same(a, 0, b, 65536 * id, sizes[id])) << id;
    }
    EXPECT_TRUE(same(a, 0, b, 300000, 5000));
}

TEST_F(UcQpTest, ALostPacketDropsItsMessageAndTheReceiveWaitsForTheNextOne) {
    connect_both();
    fill(a, 0, 4096, 2);
    fill(a, 8192, 4096, 3);
    b.post_recv(100, 0, 4096);
    b.post_recv(101, 16384, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 3000, a.mr));     // 3 packets: the 2nd is lost
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(8192), 2500, a.mr));  // arrives whole
    a.post_send(wqe(3, IBV_WR_SEND, a.iova(0), 4096, a.mr));     // its last packet is lost
    a.post_send(wqe(4, IBV_WR_SEND, a.iova(0), 100, a.mr));      // arrives whole
    int data_packets = 0;
    run(200, 10'000, [&](const test_wire::frame&) {
        ++data_packets;
        return data_packets != 2 && data_packets != 9;  // 3 + 3 + 4 packets, then 1
    });
    proto::cqe c{};
    int sent = 0;
    while (a.poll_send(c)) {
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "a UC sender never learns of a loss";
        ++sent;
    }
    EXPECT_EQ(sent, 4);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 100u) << "the first WQE, kept through the dropped message";
    EXPECT_EQ(c.byte_len, 2500u);
    EXPECT_TRUE(same(a, 8192, b, 0, 2500));
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 101u);
    EXPECT_EQ(c.byte_len, 100u);
    EXPECT_TRUE(same(a, 0, b, 16384, 100));
    EXPECT_FALSE(b.poll_recv(c)) << "no partial message ever completes";
    const auto reports = eng.report();
    uint64_t dropped = 0;
    for (const auto& r : reports) {
        dropped += r.messages_dropped;
    }
    EXPECT_EQ(dropped, 2u);
}

TEST_F(UcQpTest, AWriteWithImmAfterADroppedSendCompletesTheOldestReceive) {
    connect_both();
    b.post_recv(100, 0, 4096);
    b.post_recv(101, 8192, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 3000, a.mr));  // its 2nd packet is lost
    proto::send_wqe w =
        wqe(2, IBV_WR_RDMA_WRITE_WITH_IMM, a.iova(0), 64, a.mr, b.iova(65536), b.mr);
    w.imm_data = htonl(7);
    a.post_send(w);
    int packets = 0;
    run(100, 10'000, [&](const test_wire::frame&) { return ++packets != 2; });
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 100u) << "receives complete in the order they were posted";
    EXPECT_EQ(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(c.imm_data, htonl(7));
    EXPECT_FALSE(b.poll_recv(c));
}

TEST_F(UcQpTest, ReadsAndAtomicsAreNotUcOperations) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_RDMA_READ, a.iova(0), 64, a.mr, b.iova(0), b.mr));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_LOC_QP_OP_ERR);
}

TEST_F(UcQpTest, ASendWithoutAPostedReceiveIsDroppedNotRnrNakked) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 2048, a.mr));
    run(50);
    b.post_recv(100, 0, 4096);
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(0), 10, a.mr));
    run(50);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.byte_len, 10u) << "the first message was lost, the second landed";
    EXPECT_FALSE(b.poll_recv(c));
}

class UdQpTest : public QueuePairTest {
  protected:
    static constexpr uint32_t qkey = 0x11111111;

    void SetUp() override {
        qp_type = proto::qpt_ud;
        QueuePairTest::SetUp();
        ready(a);
        ready(b);
    }
    void ready(side& s) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qkey = qkey;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
        attr = {};
        attr.qp_state = IBV_QPS_RTR;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE), 0);
        attr = {};
        attr.qp_state = IBV_QPS_RTS;
        attr.sq_psn = 77;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    }
    proto::send_wqe datagram(uint64_t id, uint32_t length, uint32_t to_qp, uint32_t key = qkey) {
        proto::send_wqe w = wqe(id, IBV_WR_SEND, a.iova(0), length, a.mr);
        w.ud_remote_ip = htonl(ip_b);
        w.ud_remote_qpn = to_qp;
        w.ud_remote_qkey = key;
        return w;
    }
};

TEST_F(UdQpTest, ADatagramArrivesBehindAGrhAreaHoldingTheSendersIpv4Header) {
    fill(a, 0, 4096, 5);
    b.post_recv(100, 0, 4096 + 40);
    a.post_send(datagram(1, 4096, b.qp));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.byte_len, 4096u + 40);
    EXPECT_EQ(c.src_qp, a.qp);
    EXPECT_EQ(c.qp_num, b.qp);
    EXPECT_NE(c.wc_flags & IBV_WC_GRH, 0u);
    const auto* grh = reinterpret_cast<const uint8_t*>(b.region);
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(grh[i], 0) << "byte " << i << " of the GRH area";
    }
    EXPECT_EQ(grh[20], 0x45) << "IPv4, 20-byte header";
    uint32_t src = 0, dst = 0;
    std::memcpy(&src, grh + 20 + 12, 4);
    std::memcpy(&dst, grh + 20 + 16, 4);
    EXPECT_EQ(src, htonl(ip_a));
    EXPECT_EQ(dst, htonl(ip_b));
    EXPECT_TRUE(same(a, 0, b, 40, 4096));
}

// UCX (uct_ud_iface_check_grh) drops a UD datagram unless wc.sl says "RoCE v2 over IPv4" (2,
// as mlx5 reports it) and the destination at bytes 36-39 of the GRH area is its own address.
TEST_F(UdQpTest, ADatagramReportsRoceV2Ipv4InSlWithItsDestinationAtBytes36To39) {
    b.post_recv(100, 0, 64 + 40);
    a.post_send(datagram(1, 64, b.qp));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.sl & 7, 2) << "the network header type of RoCE v2 over IPv4";
    uint32_t dst = 0;
    std::memcpy(&dst, reinterpret_cast<const uint8_t*>(b.region) + 36, 4);
    EXPECT_EQ(dst, htonl(ip_b));
}

TEST_F(UdQpTest, WrongQkeysMissingReceivesAndShortBuffersLoseOnlyThatDatagram) {
    b.post_recv(100, 0, 100);  // too short for 40 + 100
    b.post_recv(101, 4096, 200);
    a.post_send(datagram(1, 100, b.qp, 0x2222));  // wrong Q_Key: dropped, WQE 100 untouched
    a.post_send(datagram(2, 100, b.qp));          // into 100: too short
    a.post_send(datagram(3, 100, b.qp));          // into 101
    a.post_send(datagram(4, 100, b.qp));          // nothing posted any more: dropped
    a.post_send(datagram(5, 4097, b.qp));         // more than the MTU: refused by the sender
    run(50);
    proto::cqe c{};
    for (uint64_t id = 1; id <= 5; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.status, id == 5 ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS) << id;
        if (id == 5) {
            break;
        }
    }
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 100u);
    EXPECT_EQ(c.status, IBV_WC_LOC_LEN_ERR);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 101u);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.byte_len, 140u);
    EXPECT_FALSE(b.poll_recv(c));
}

// docs/threat-model.md: a tenant's UD QP aiming forged CM MADs at a peer's QP1. It cannot
// hold the GSI Q_Key (modify refuses controlled Q_Keys: qp_state_test), a WR naming it sends
// the QP's own instead (IBTA 10.2.5), and its source QPN is never 1; the receiving engine
// hands QP1 only what carries both, so nothing a tenant sends reaches the CM agent.
TEST_F(UdQpTest, ATenantDatagramToQp1NeverReachesTheCmAgentEvenNamingTheGsiQkey) {
    eng.gsi().open(0);  // both vNICs have agents
    eng.gsi().open(1);
    fill(a, 0, gsi_mad_bytes, 13);
    a.post_send(datagram(1, gsi_mad_bytes, gsi_qpn, gsi_qkey));  // replaced by 0x11111111
    a.post_send(datagram(2, gsi_mad_bytes, gsi_qpn));            // its own Q_Key
    run(20);
    proto::cqe c{};
    for (uint64_t id = 1; id <= 2; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "sent, as a UD send always is";
    }
    EXPECT_TRUE(eng.gsi().take_rx(1).empty());
    EXPECT_EQ(eng.counters().drops[static_cast<std::size_t>(engine_drop::gsi_forged)].read(), 2u);

    // The control: the same bytes queued by an agent of vNIC a leave QP1 with the GSI Q_Key
    // and reach QP1 of b. Then the same frame with another source QPN, ICRC sealed again (a
    // sender that could set the Q_Key but is not a QP1), is refused.
    gsi_datagram d;
    d.vnic = 0;
    d.remote_ip_be = htonl(ip_b);
    d.local_ip_be = htonl(ip_a);
    std::memcpy(d.mad.data(), a.region, gsi_mad_bytes);
    ASSERT_TRUE(eng.gsi().push_tx(d));
    std::vector<uint8_t> agent_frame;
    run(2, 10'000, [&](const test_wire::frame& f) {
        agent_frame = f.bytes;
        return true;
    });
    const auto rx = eng.gsi().take_rx(1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].vnic, 1);
    EXPECT_EQ(rx[0].remote_ip_be, htonl(ip_a));
    EXPECT_EQ(std::memcmp(rx[0].mad.data(), a.region, gsi_mad_bytes), 0);
    ASSERT_EQ(agent_frame.size(), frame_l2_l4_bytes + 12 + 8 + gsi_mad_bytes + 4);
    uint8_t* deth = agent_frame.data() + frame_l2_l4_bytes + 12;
    EXPECT_EQ((deth[0] << 24 | deth[1] << 16 | deth[2] << 8 | deth[3]), 0x80010000);
    EXPECT_EQ((deth[5] << 16 | deth[6] << 8 | deth[7]), 1);
    deth[7] = static_cast<uint8_t>(a.qp);
    deth[6] = static_cast<uint8_t>(a.qp >> 8);
    seal_icrc(agent_frame.data(), static_cast<uint32_t>(agent_frame.size() - frame_l2_l4_bytes));
    eng.receive(1, agent_frame.data() + 14, static_cast<uint32_t>(agent_frame.size() - 14), wire,
                now);
    EXPECT_TRUE(eng.gsi().take_rx(1).empty());
    EXPECT_EQ(eng.counters().drops[static_cast<std::size_t>(engine_drop::gsi_forged)].read(), 3u);
    EXPECT_EQ(eng.counters().drops[static_cast<std::size_t>(engine_drop::bad_icrc)].read(), 0u);
}

TEST_F(UdQpTest, ADatagramForAQpOfAnotherTransportIsDroppedAndCounted) {
    // A second vNIC slot's QP is UD; aim an RC-typed QP number that does not exist.
    b.post_recv(100, 0, 4096);
    a.post_send(datagram(1, 64, b.qp + 256));  // no such QP on b
    run(20);
    proto::cqe c{};
    EXPECT_FALSE(b.poll_recv(c));
    EXPECT_EQ(eng.counters().drops[static_cast<std::size_t>(engine_drop::unknown_qp)].read(), 1u);
}

}  // namespace
}  // namespace jakiro::rnic::test
