// Memory windows (rnic/queues/memory_window.cc) as QPs meet them: binds and invalidations
// a QP executes, and a peer's requests through a window, on the wire and on one host.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

TEST_F(QueuePairMwTest, ABoundType2WindowTakesWritesAndReadsInsideItsRange) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    auto c = complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0x20000), 8192, window_rights));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_BIND_MW);
    EXPECT_EQ(c.wr_id, 1u);

    fill(a, 0, 8192, 11);
    c = complete(a, wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 8192, a.mr, b.iova(0x20000), rkey));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0x20000, 8192));
    fill(b, 0x21000, 100, 12);
    c = complete(a, wqe(3, IBV_WR_RDMA_READ, a.iova(0x40000), 100, a.mr, b.iova(0x21000), rkey));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0x40000, b, 0x21000, 100));
    // The old consumer key (the handle's) names nothing.
    c = complete(a, wqe(4, IBV_WR_RDMA_READ, a.iova(0x40000), 8, a.mr, b.iova(0x20000), mw));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(QueuePairMwTest, AWriteOneBytePastTheWindowIsNakkedAndPlacesNothing) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(
        complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0x20000), 4096, window_rights)).status,
        IBV_WC_SUCCESS);
    std::memset(b.region + 0x20000, 0, 8192);
    fill(a, 0, 4097, 3);
    const auto c =
        complete(a, wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 4097, a.mr, b.iova(0x20000), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    for (std::size_t i = 0; i < 8192; ++i) {
        ASSERT_EQ(static_cast<uint8_t>(b.region[0x20000 + i]), 0) << i;
    }
}

TEST_F(QueuePairMwTest, AReadOnlyWindowRefusesAWriteThoughTheMrWouldAllowIt) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(
        complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), 4096, proto::access_remote_read))
            .status,
        IBV_WC_SUCCESS);
    std::memset(b.region, 0, 64);
    fill(a, 0, 64, 5);
    const auto c = complete(a, wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0);
}

TEST_F(QueuePairMwTest, LocalInvFreesTheWindowAndALaterWriteIsNakkedWithNoData) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    auto c = complete(b, local_inv_wqe(2, rkey));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_LOCAL_INV);
    std::memset(b.region, 0, 64);
    fill(a, 0, 64, 9);
    c = complete(a, wqe(3, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0);
}

TEST_F(QueuePairMwTest, AFreedType2WindowBindsAgainUnderANewKeyAndTheOldKeyIsDead) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t first = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, first, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    ASSERT_EQ(complete(b, local_inv_wqe(2, first)).status, IBV_WC_SUCCESS);
    const uint32_t second = next_key(first);
    ASSERT_EQ(
        complete(b, bind_wqe(3, mw, second, bind_mr, b.iova(4096), 4096, window_rights)).status,
        IBV_WC_SUCCESS);
    fill(b, 4096, 16, 21);
    auto c = complete(a, wqe(4, IBV_WR_RDMA_READ, a.iova(0), 16, a.mr, b.iova(4096), second));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 4096, 16));
    c = complete(a, wqe(5, IBV_WR_RDMA_READ, a.iova(0), 16, a.mr, b.iova(4096), first));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(QueuePairMwTest, SendWithInvFreesTheWindowAndTheReceiveReportsTheRkey) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    b.post_recv(50, 0x80000, 4096);
    fill(a, 0, 2000, 4);
    auto w = wqe(2, IBV_WR_SEND_WITH_INV, a.iova(0), 2000, a.mr);
    w.imm_data = rkey;
    auto c = complete(a, w);
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_SEND);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.wr_id, 50u);
    EXPECT_EQ(c.byte_len, 2000u);
    EXPECT_EQ(c.wc_flags & IBV_WC_WITH_INV, unsigned{IBV_WC_WITH_INV});
    EXPECT_EQ(c.imm_data, rkey);  // ibv_wc.invalidated_rkey
    EXPECT_TRUE(same(a, 0, b, 0x80000, 2000));
    c = complete(a, wqe(3, IBV_WR_RDMA_READ, a.iova(0x40000), 8, a.mr, b.iova(0), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(QueuePairMwTest, ADuplicatedSendWithInvIsAckedAgainAndNeverFreesALaterBinding) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t first = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, first, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    b.post_recv(50, 0x80000, 4096);
    b.post_recv(51, 0x81000, 4096);
    auto w = wqe(2, IBV_WR_SEND_WITH_INV, a.iova(0), 100, a.mr);
    w.imm_data = first;
    std::vector<test_wire::frame> copies;
    a.post_send(w);
    run(100, 10'000, [&](const test_wire::frame& f) {
        if (f.bytes[42] == opcode::rc_send_only_inv) {
            copies.push_back(f);
        }
        return true;
    });
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    ASSERT_EQ(copies.size(), 1u);
    // The window is bound again before the stale copy arrives.
    const uint32_t second = next_key(first);
    ASSERT_EQ(complete(b, bind_wqe(3, mw, second, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    const auto& dup = copies.front();
    eng.receive(1, dup.bytes.data() + 14, static_cast<uint32_t>(dup.bytes.size() - 14), wire, now);
    run(20);
    EXPECT_FALSE(b.poll_recv(c)) << "a duplicate consumes no second receive";
    fill(b, 0, 8, 33);
    c = complete(a, wqe(4, IBV_WR_RDMA_READ, a.iova(0x40000), 8, a.mr, b.iova(0), second));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "the new binding survived the stale invalidation";
    EXPECT_TRUE(same(a, 0x40000, b, 0, 8));
}

TEST_F(QueuePairMwTest, ABindOntoAnMrWithoutMwBindFailsWithMwBindErr) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const auto c = complete(b, bind_wqe(1, mw, next_key(mw), b.mr, b.iova(0), 4096, window_rights));
    EXPECT_EQ(c.status, IBV_WC_MW_BIND_ERR);
    EXPECT_EQ(c.opcode, IBV_WC_BIND_MW);
}

// The bind mlx5 and rxe accept: a window asking for LOCAL_WRITE (and MW_BIND, as a program
// passing on its MR's flags does) besides REMOTE_WRITE, over an MR registered with LOCAL_WRITE
// and MW_BIND only (C10-74 asks local write of the MR, nothing of the window). Both types
// bind, a peer's WRITE lands through each, and the window grants what it was asked for
// remotely and no more: a READ is still refused.
TEST_F(QueuePairMwTest, AWindowAskingForLocalWriteBindsAndTakesAPeersWrite) {
    auto req =
        proto::make_message<proto::reg_mr_request>(static_cast<uint16_t>(proto::opcode::reg_mr), 2);
    req.pd_handle = b.pd;
    req.access = proto::access_local_write | proto::access_mw_bind;
    req.addr = region_iova;
    req.iova = region_iova;
    req.length = region_bytes;
    uint32_t local_only_mr = 0;
    ASSERT_EQ(b.res->reg_mr(b.client, req, b.region_fd, local_only_mr), 0);
    constexpr uint32_t rights =
        proto::access_remote_write | proto::access_local_write | proto::access_mw_bind;
    const uint32_t t1 = alloc(IBV_MW_TYPE_1);
    const uint32_t t2 = alloc(IBV_MW_TYPE_2);
    uint64_t id = 1;
    for (const auto& [mw, at] : {std::pair{t1, uint64_t{0}}, std::pair{t2, uint64_t{4096}}}) {
        SCOPED_TRACE(mw == t1 ? "type 1" : "type 2");
        const uint32_t rkey = next_key(mw);
        const auto c =
            complete(b, bind_wqe(id++, mw, rkey, local_only_mr, b.iova(at), 4096, rights));
        ASSERT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.opcode, IBV_WC_BIND_MW);
        fill(a, 0, 64, static_cast<uint8_t>(at / 4096 + 3));
        const auto w =
            complete(a, wqe(id++, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(at), rkey));
        ASSERT_EQ(w.status, IBV_WC_SUCCESS);
        EXPECT_TRUE(same(a, 0, b, at, 64));
        EXPECT_EQ(b.res->mrs()
                      .find_remote(b.pd, b.qp, rkey, b.iova(at), 8, proto::access_remote_read)
                      .status,
                  verbs::mr_status::no_access);
    }
}

TEST_F(QueuePairMwTest, BindRulesRefuseWhatRxeRefuses) {
    const uint32_t t2 = alloc(IBV_MW_TYPE_2);
    const uint32_t t1 = alloc(IBV_MW_TYPE_1);
    const verbs::mr_table& table = b.res->mrs();
    auto bind = [&](const proto::send_wqe& w) { return verbs::bind_window(table, w, b.pd, b.qp); };
    // Outside the MR.
    EXPECT_FALSE(bind(
        bind_wqe(1, t2, next_key(t2), bind_mr, b.iova(region_bytes - 100), 200, window_rights)));
    EXPECT_FALSE(bind(bind_wqe(1, t2, next_key(t2), bind_mr, b.iova(0), 0, window_rights)))
        << "a type-2 window is never bound with length 0";
    EXPECT_FALSE(bind(bind_wqe(1, t2, next_key(t2) + 0x100, bind_mr, b.iova(0), 64, window_rights)))
        << "a bind changes the consumer key only";
    EXPECT_FALSE(bind(bind_wqe(1, t1, next_key(t1), bind_mr, b.iova(0), 64,
                               window_rights | proto::access_zero_based)))
        << "a type-1 window is never zero-based";
    EXPECT_FALSE(verbs::bind_window(
        table, bind_wqe(1, t2, next_key(t2), bind_mr, b.iova(0), 64, window_rights),
        a.pd == b.pd ? b.pd + 1 : a.pd, b.qp))
        << "a QP of another PD";
    ASSERT_TRUE(bind(bind_wqe(1, t2, next_key(t2), bind_mr, b.iova(0), 64, window_rights)));
    EXPECT_FALSE(
        bind(bind_wqe(1, t2, next_key(next_key(t2)), bind_mr, b.iova(0), 64, window_rights)))
        << "a bound type-2 window is not bound again before it is freed";
    // Type 2 belongs to the QP that bound it; type 1 to its PD.
    EXPECT_FALSE(
        table.find_remote(b.pd, b.qp + 1, next_key(t2), b.iova(0), 8, proto::access_remote_read));
    EXPECT_TRUE(
        table.find_remote(b.pd, b.qp, next_key(t2), b.iova(0), 8, proto::access_remote_read));
    ASSERT_TRUE(bind(bind_wqe(2, t1, next_key(t1), bind_mr, b.iova(0), 64, window_rights)));
    EXPECT_TRUE(
        table.find_remote(b.pd, b.qp + 1, next_key(t1), b.iova(0), 8, proto::access_remote_read));
    EXPECT_EQ(
        table.find_remote(b.pd + 1, b.qp, next_key(t1), b.iova(0), 8, proto::access_remote_read)
            .status,
        verbs::mr_status::pd_mismatch);
    // A type-1 window cannot be invalidated (o10-37.2.26), only rebound; length 0 unbinds it.
    EXPECT_FALSE(verbs::invalidate_window(table, next_key(t1), b.pd));
    ASSERT_TRUE(bind(bind_wqe(3, t1, next_key(next_key(t1)), 0, 0, 0, 0)));
    EXPECT_FALSE(table.find_remote(b.pd, b.qp, next_key(next_key(t1)), b.iova(0), 8,
                                   proto::access_remote_read));
    // An MR's rkey is never invalidated (no fast-register MRs, as for rxe's user MRs).
    EXPECT_FALSE(verbs::invalidate_window(table, bind_mr, b.pd));
}

TEST_F(QueuePairMwTest, SendWithInvOfAnMrRkeyFailsTheSendAndTheReceive) {
    b.post_recv(50, 0x80000, 4096);
    auto w = wqe(1, IBV_WR_SEND_WITH_INV, a.iova(0), 100, a.mr);
    w.imm_data = bind_mr;  // b's MR, not a window: rxe refuses to invalidate a user MR
    const auto c = complete(a, w);
    EXPECT_EQ(c.status, IBV_WC_REM_INV_REQ_ERR);
    proto::cqe r{};
    ASSERT_TRUE(b.poll_recv(r));
    EXPECT_NE(r.status, IBV_WC_SUCCESS);
    EXPECT_EQ(b.res->mrs().get(bind_mr) != nullptr, true) << "the MR is untouched";
}

TEST_F(QueuePairMwTest, LocalInvOfAType1WindowFailsWithLocQpOpErr) {
    const uint32_t t1 = alloc(IBV_MW_TYPE_1);
    ASSERT_EQ(
        complete(b, bind_wqe(1, t1, next_key(t1), bind_mr, b.iova(0), 64, window_rights)).status,
        IBV_WC_SUCCESS);
    EXPECT_EQ(complete(b, local_inv_wqe(2, next_key(t1))).status, IBV_WC_LOC_QP_OP_ERR);
}

TEST_F(QueuePairMwTest, AnMrWithABoundWindowStaysRegisteredUntilTheWindowGoes) {
    const uint32_t mw = alloc(IBV_MW_TYPE_1);
    ASSERT_EQ(
        complete(b, bind_wqe(1, mw, next_key(mw), bind_mr, b.iova(0), 64, window_rights)).status,
        IBV_WC_SUCCESS);
    EXPECT_EQ(b.res->dereg_mr(b.client, bind_mr), EBUSY);
    EXPECT_EQ(b.res->dealloc_pd(b.client, b.pd), EBUSY);
    EXPECT_EQ(a.res->dealloc_mw(a.client, mw), EINVAL) << "another client's window";
    EXPECT_EQ(b.res->count(b.client).mws, 1u);
    ASSERT_EQ(b.res->dealloc_mw(b.client, mw), 0);
    EXPECT_EQ(b.res->dealloc_mw(b.client, mw), EINVAL);
    EXPECT_EQ(b.res->dereg_mr(b.client, bind_mr), 0);
    auto c = complete(a, wqe(2, IBV_WR_RDMA_READ, a.iova(0), 8, a.mr, b.iova(0), next_key(mw)));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(QueuePairMwTest, AllocMwChecksThePdTheTypeAndTheQuota) {
    uint32_t h = 0;
    EXPECT_EQ(b.res->alloc_mw(b.client, a.pd + b.pd, IBV_MW_TYPE_1, h), EINVAL);
    EXPECT_EQ(b.res->alloc_mw(a.client, b.pd, IBV_MW_TYPE_1, h), EINVAL) << "another client's PD";
    EXPECT_EQ(b.res->alloc_mw(b.client, b.pd, 3, h), EINVAL);
    verbs::vnic_quota q = b.res->quota();
    q.max_mws = 2;
    b.res->set_quota(q);
    EXPECT_EQ(b.res->alloc_mw(b.client, b.pd, IBV_MW_TYPE_1, h), 0);
    EXPECT_EQ(b.res->alloc_mw(b.client, b.pd, IBV_MW_TYPE_2, h), 0);
    EXPECT_EQ(b.res->alloc_mw(b.client, b.pd, IBV_MW_TYPE_2, h), EDQUOT);
    EXPECT_EQ(b.res->count().mws, 2u);
    b.res->release_client(b.client);
    EXPECT_EQ(b.res->count().mws, 0u);
}

TEST_F(QueuePairMwTest, OnOneHostWritesThroughAWindowAndSendWithInvBehaveAsOnTheWire) {
    wire.same_host = true;
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(
        complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0x30000), 4096, window_rights)).status,
        IBV_WC_SUCCESS);
    fill(a, 0, 4096, 17);
    const uint64_t sent_before = wire.sent;
    auto c = complete(a, wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 4096, a.mr, b.iova(0x30000), rkey));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0x30000, 4096));
    EXPECT_EQ(wire.sent, sent_before) << "memory to memory";
    b.post_recv(50, 0x80000, 4096);
    auto w = wqe(3, IBV_WR_SEND_WITH_INV, a.iova(0), 10, a.mr);
    w.imm_data = rkey;
    ASSERT_EQ(complete(a, w).status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wc_flags & IBV_WC_WITH_INV, unsigned{IBV_WC_WITH_INV});
    EXPECT_EQ(c.imm_data, rkey);
    std::memset(b.region + 0x30000, 0, 16);
    c = complete(a, wqe(4, IBV_WR_RDMA_WRITE, a.iova(0), 16, a.mr, b.iova(0x30000), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0x30000]), 0);
}

// A message between two QPs of one host moves in slices, visits apart. A window its owner
// invalidates between two slices takes no byte after the invalidation (the wire's responder
// refuses an rkey it no longer grants), and the WRITE fails with a remote access error.
TEST_F(QueuePairMwTest, OnOneHostAWindowInvalidatedMidWriteTakesNoMoreBytes) {
    wire.same_host = true;
    constexpr uint32_t length = 512 * 1024;  // more than one visit moves (256 packets of 1 KiB)
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), length, window_rights)).status,
              IBV_WC_SUCCESS);
    std::memset(a.region, 0xAB, length);
    auto landed = [&] { return std::count(b.region, b.region + length, std::byte{0xAB}); };
    // Control: the same WRITE, left alone, spans visits and lands whole.
    std::memset(b.region, 0, length);
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), length, a.mr, b.iova(0), rkey));
    run(1);
    proto::cqe c{};
    ASSERT_FALSE(a.poll_send(c)) << "one visit moves part of it";
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_EQ(landed(), length);

    std::memset(b.region, 0, length);
    a.post_send(wqe(3, IBV_WR_RDMA_WRITE, a.iova(0), length, a.mr, b.iova(0), rkey));
    run(1);
    ASSERT_FALSE(a.poll_send(c));
    const auto before = landed();
    ASSERT_GT(before, 0);
    ASSERT_LT(before, length);
    // b's LOCAL_INV of its window executes between the two visits.
    ASSERT_TRUE(verbs::invalidate_window(b.res->mrs(), rkey, b.pd));
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(landed(), before) << "not one byte through the window once it was invalidated";
    EXPECT_NE(std::find(events.begin(), events.end(),
                        static_cast<uint32_t>(proto::event_type::qp_access_err)),
              events.end())
        << "the window's owner hears of the refused access, as from the wire";
}

// The same across hosts: the packets of a WRITE through a window that arrive after its owner
// invalidated it are refused (remote access error), never placed.
TEST_F(QueuePairMwTest, AWindowInvalidatedMidWriteTakesNoMorePackets) {
    constexpr uint32_t length = 512 * 1024;
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), length, window_rights)).status,
              IBV_WC_SUCCESS);
    std::memset(a.region, 0xAB, length);
    std::memset(b.region, 0, length);
    auto landed = [&] { return std::count(b.region, b.region + length, std::byte{0xAB}); };
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), length, a.mr, b.iova(0), rkey));
    run(1);
    proto::cqe c{};
    ASSERT_FALSE(a.poll_send(c));
    const auto before = landed();
    ASSERT_GT(before, 0);
    ASSERT_LT(before, length);
    ASSERT_TRUE(verbs::invalidate_window(b.res->mrs(), rkey, b.pd));  // b's LOCAL_INV
    run(100);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(landed(), before) << "not one byte through the window once it was invalidated";
}

}  // namespace
}  // namespace jakiro::rnic::test
