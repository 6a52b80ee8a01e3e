// One QP (rnic/queue_pair.cc): its quotas, its lifetime around its last completion, and the flush
// of a full QP in ERR within its vNIC's units.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

TEST_F(QueuePairTest, TheRcQpQuotaRefusesOneMoreQpWithEdquot) {
    verbs::qp_created q;
    int made = 1;  // SetUp made one
    while (made < 4) {
        ASSERT_EQ(a.res->create_qp(a.client, qp_request(a), q), 0);
        close(q.ring_fd);
        close(q.doorbell_fd);
        ++made;
    }
    EXPECT_EQ(a.res->create_qp(a.client, qp_request(a), q), EDQUOT);
    EXPECT_EQ(a.res->destroy_qp(a.client, q.handle), 0);
    EXPECT_EQ(a.res->create_qp(a.client, qp_request(a), q), 0) << "room again";
    close(q.ring_fd);
    close(q.doorbell_fd);
}

// A tenant fills its rings, stalls the first WR and moves the QP to ERR: the flush goes over
// several polls, each within its vNIC's units, and every WR completes exactly once, in order,
// with IBV_WC_WR_FLUSH_ERR.
TEST_F(QueuePairTest, AFullQpInErrIsFlushedOverSeveralPollsEachWithinItsVnicsUnits) {
    connect_both();
    const uint32_t sq = a.ring->sq_capacity;
    const uint32_t rq = a.ring->rq_capacity;
    for (uint32_t i = 0; i < sq; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    }
    auto nothing = [](const test_wire::frame&) { return false; };
    run(3, 1'000, nothing);  // some taken (and sent: the first WR stalls), the rest posted
    for (uint32_t i = 0; i < rq; ++i) {
        a.post_recv(10'000 + i, 0, 64);
    }
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    std::vector<uint64_t> sends, recvs;
    unsigned visits = 0;
    while (sends.size() < sq || recvs.size() < rq) {
        ASSERT_LT(visits, 1000u) << "the flush stalled";
        now += 1'000;
        eng.poll(wire, now);
        ++visits;
        std::size_t this_visit = 0;
        proto::cqe c{};
        while (a.poll_send(c)) {
            EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
            sends.push_back(c.wr_id);
            ++this_visit;
        }
        while (a.poll_recv(c)) {
            EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
            recvs.push_back(c.wr_id);
            ++this_visit;
        }
        EXPECT_LE(this_visit, engine::vnic_units_per_poll) << "poll " << visits;
    }
    EXPECT_GE(visits, (sq + rq) / engine::vnic_units_per_poll);
    for (uint32_t i = 0; i < sq; ++i) {
        EXPECT_EQ(sends[i], i) << "in order";
    }
    for (uint32_t i = 0; i < rq; ++i) {
        EXPECT_EQ(recvs[i], 10'000 + i) << "in order";
    }
    run(10);
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "exactly once";
    EXPECT_FALSE(a.poll_recv(c)) << "exactly once";
    EXPECT_EQ(proto::load_posted_acquire(a.ring->sq_consumer), sq) << "every slot handed back";
}

// max_wqes counts every SQ, RQ and SRQ slot as allocated; max_qps and max_srqs count objects;
// lowering them live refuses new ones and keeps the QPs that run.
TEST_F(QueuePairTest, WqeQpAndSrqQuotasRefuseWithEdquotAndChangeLive) {
    verbs::vnic_quota q = a.res->quota();
    ASSERT_EQ(a.res->count().wqes, 1024u) << "SetUp's QP: 512 + 512";
    q.max_wqes = 1024 + 512 + 256;
    q.max_srqs = 1;
    a.res->set_quota(q);
    verbs::qp_created made;
    auto req = qp_request(a);
    EXPECT_EQ(a.res->create_qp(a.client, req, made), EDQUOT) << "512 + 512 more";
    req.max_send_wr = 300;  // a ring of 512
    req.max_recv_wr = 200;  // a ring of 256
    ASSERT_EQ(a.res->create_qp(a.client, req, made), 0) << "exactly the quota";
    close(made.ring_fd);
    close(made.doorbell_fd);
    EXPECT_EQ(a.res->count().wqes, 1024u + 512 + 256);
    auto srq = proto::make_message<proto::create_srq_request>(
        static_cast<uint16_t>(proto::opcode::create_srq), 1);
    srq.pd_handle = a.pd;
    srq.max_wr = 1;
    verbs::srq_created s1, s2;
    EXPECT_EQ(a.res->create_srq(a.client, srq, s1), EDQUOT) << "no slot left for its ring";
    ASSERT_EQ(a.res->destroy_qp(a.client, made.handle), 0);
    EXPECT_EQ(a.res->count().wqes, 1024u) << "given back";
    ASSERT_EQ(a.res->create_srq(a.client, srq, s1), 0);
    close(s1.ring_fd);
    EXPECT_EQ(a.res->create_srq(a.client, srq, s2), EDQUOT) << "max_srqs";
    // Lowered below what is held: nothing new, nothing destroyed, the QP keeps working.
    q.max_qps = 0;
    a.res->set_quota(q);
    req = qp_request(a);
    req.max_send_wr = req.max_recv_wr = 1;
    EXPECT_EQ(a.res->create_qp(a.client, req, made), EDQUOT);
    connect_both();
    b.post_recv(1, 0, 64);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 64, a.mr));
    run(50);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
}

TEST_F(QueuePairTest, AResponderDestroyedRightAfterItsLastCompletionHasAlreadyAcked) {
    connect_both();
    b.post_recv(1, 0, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    eng.poll(wire, now);
    ASSERT_EQ(wire.frames.size(), 1u);
    auto send = wire.frames.front();
    wire.frames.clear();
    eng.receive(1, send.bytes.data() + 14, static_cast<uint32_t>(send.bytes.size() - 14), wire,
                now);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    // The program sees its receive and destroys the QP before the engine polls again.
    ASSERT_EQ(b.res->destroy_qp(b.client, b.qp), 0);
    ASSERT_EQ(wire.frames.size(), 1u) << "the ACK left with the completion";
    run(5);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace jakiro::rnic::test
