// QPs on a shared receive queue (rnic/queues/srq_ring.cc, queue_pair::take_recv): receives taken
// from the SRQ in order, its limit event, RNR when it is empty, the flush of a QP in ERR.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

// Side b's QP replaced by one on a shared receive queue, posted as ibv_post_srq_recv does.
class QueuePairSrqTest : public QueuePairTest {
  protected:
    void SetUp() override {
        QueuePairTest::SetUp();
        auto req = proto::make_message<proto::create_srq_request>(
            static_cast<uint16_t>(proto::opcode::create_srq), 1);
        req.pd_handle = b.pd;
        req.max_wr = 8;
        req.max_sge = 1;
        verbs::srq_created created;
        ASSERT_EQ(b.res->create_srq(b.client, req, created), 0);
        srq = created.handle;
        srq_bytes = created.ring_bytes;
        srq_ring = static_cast<proto::srq_ring_header*>(
            mmap(nullptr, srq_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, created.ring_fd, 0));
        close(created.ring_fd);
        ASSERT_EQ(b.res->destroy_qp(b.client, b.qp), 0);
        munmap(b.ring, b.ring_bytes);
        auto r = qp_request(b);
        r.srq = srq;
        r.max_recv_wr = 0;
        verbs::qp_created q;
        ASSERT_EQ(b.res->create_qp(b.client, r, q), 0);
        EXPECT_EQ(q.rq_capacity, 1u) << "its own RQ is one unused slot";
        b.qp = q.handle;
        b.ring_bytes = q.ring_bytes;
        b.ring = static_cast<proto::qp_ring_header*>(
            mmap(nullptr, q.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, q.ring_fd, 0));
        close(q.ring_fd);
        close(q.doorbell_fd);
    }
    void TearDown() override { munmap(srq_ring, srq_bytes); }

    void post_srq(uint64_t wr_id, std::size_t offset, uint32_t length) {
        proto::recv_wqe w{};
        w.wr_id = wr_id;
        w.num_sge = 1;
        w.sg[0] = {b.iova(offset), length, b.mr};
        proto::srq_slots(srq_ring)[srq_posted & (srq_ring->capacity - 1)] = w;
        proto::publish_wqes(srq_ring->producer, ++srq_posted);
    }
    std::size_t count(proto::event_type type) const {
        return static_cast<std::size_t>(
            std::count(events.begin(), events.end(), static_cast<uint32_t>(type)));
    }
    uint32_t srq_taken() const { return proto::load_retired_acquire(srq_ring->consumer); }

    uint32_t srq = 0;
    proto::srq_ring_header* srq_ring = nullptr;
    std::size_t srq_bytes = 0;
    uint32_t srq_posted = 0;
};

TEST_F(QueuePairSrqTest, SendsLandInTheSrqsWqesInOrderAndAnArmedLimitFiresOnce) {
    connect_both();
    for (uint64_t id = 0; id < 4; ++id) {
        post_srq(100 + id, 0x10000 * id, 0x10000);
    }
    auto arm = proto::make_message<proto::modify_srq_request>(
        static_cast<uint16_t>(proto::opcode::modify_srq), 1);
    arm.srq_handle = srq;
    arm.attr_mask = proto::srq_attr_limit;
    arm.srq_limit = 2;
    ASSERT_EQ(b.res->modify_srq(b.client, arm), 0);
    const uint32_t sizes[] = {1, 5000, 65536};
    for (uint64_t id = 0; id < 3; ++id) {
        fill(a, 0x10000 * id, sizes[id], static_cast<uint32_t>(id));
        a.post_send(wqe(id, IBV_WR_SEND, a.iova(0x10000 * id), sizes[id], a.mr));
    }
    run(300);
    proto::cqe c{};
    for (uint64_t id = 0; id < 3; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        ASSERT_TRUE(b.poll_recv(c));
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.wr_id, 100 + id) << "the SRQ's WQEs, in order";
        EXPECT_EQ(c.byte_len, sizes[id]);
        EXPECT_EQ(c.qp_num, b.qp) << "the QP that took it";
        EXPECT_TRUE(same(a, 0x10000 * id, b, 0x10000 * id, sizes[id]));
    }
    EXPECT_EQ(srq_taken(), 3u);
    EXPECT_EQ(count(proto::event_type::srq_limit_reached), 1u) << "1 left < 2: once";
    proto::query_srq_reply q{};
    ASSERT_EQ(b.res->query_srq(b.client, srq, q), 0);
    EXPECT_EQ(q.srq_limit, 0u) << "disarmed";
}

TEST_F(QueuePairSrqTest, QueryQpReportsNoReceiveQueueOfItsOwn) {
    proto::query_qp_reply q{};
    ASSERT_EQ(b.res->query_qp(b.client, b.qp, q), 0);
    EXPECT_EQ(q.attr.max_recv_wr, 0u) << "receives come from the SRQ (the shim says 0 too)";
    EXPECT_EQ(q.attr.max_recv_sge, 0u);
    EXPECT_GT(q.attr.max_send_wr, 0u);
}

TEST_F(QueuePairSrqTest, AnEmptySrqRnrNaksUntilAWqeIsPostedThere) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    // Something in the QP's own RQ changes nothing: a QP on an SRQ never reads it.
    b.post_recv(55, 0, 4096);
    run(50);
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "empty SRQ: RNR NAK, retry";
    EXPECT_GT(b.res->count().qps, 0u);
    post_srq(7, 0, 4096);
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 7u);
    EXPECT_FALSE(b.poll_recv(c));
}

TEST_F(QueuePairSrqTest, OnOneHostSendsAndWriteWithImmTakeSrqWqes) {
    wire.same_host = true;
    connect_both();
    post_srq(1, 0x40000, 0x10000);
    post_srq(2, 0, 0);
    fill(a, 0, 60000, 3);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 50000, a.mr));
    auto w = wqe(2, IBV_WR_RDMA_WRITE_WITH_IMM, a.iova(0), 60000, a.mr, b.iova(0x80000), b.mr);
    w.imm_data = htonl(9);
    a.post_send(w);
    run(5);
    EXPECT_EQ(wire.sent, 0u);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.byte_len, 50000u);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 2u);
    EXPECT_EQ(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_TRUE(same(a, 0, b, 0x40000, 50000));
    EXPECT_TRUE(same(a, 0, b, 0x80000, 60000));
    EXPECT_EQ(srq_taken(), 2u);
}

TEST_F(QueuePairSrqTest, AQpInErrFlushesItsOwnWrsNotTheSrqsAndReportsLastWqeOnce) {
    connect_both();
    post_srq(1, 0, 4096);
    post_srq(2, 4096, 4096);
    b.post_send(wqe(9, IBV_WR_RDMA_WRITE, b.iova(0), 10, b.mr, a.iova(0), a.mr));
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    run(10);
    proto::cqe c{};
    std::size_t flushed_recvs = 0;
    while (b.poll_recv(c)) {
        ++flushed_recvs;
    }
    EXPECT_EQ(flushed_recvs, 0u) << "the SRQ's WQEs belong to every QP on it";
    EXPECT_EQ(srq_taken(), 0u);
    ASSERT_TRUE(b.poll_send(c));
    EXPECT_EQ(c.wr_id, 9u);
    EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR) << "its own send queue is flushed";
    EXPECT_EQ(count(proto::event_type::qp_last_wqe_reached), 1u) << "once, however many polls";
    // Back through RESET and into ERR again: a new QP life, a new event.
    attr.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    run(3);
    EXPECT_EQ(count(proto::event_type::qp_last_wqe_reached), 2u);
    // A QP on its own RQ hears nothing of the kind.
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    run(3);
    EXPECT_EQ(count(proto::event_type::qp_last_wqe_reached), 2u);
}

TEST_F(QueuePairSrqTest, AnSrqIsBusyWhileAQpTakesFromItAndBelongsToItsClient) {
    EXPECT_EQ(b.res->destroy_srq(b.client, srq), EBUSY);
    EXPECT_EQ(b.res->destroy_srq(b.client + 1, srq), EINVAL) << "not the client's";
    EXPECT_EQ(b.res->dealloc_pd(b.client, b.pd), EBUSY);
    // Another client of the vNIC cannot put a QP on it.
    auto r = qp_request(b);
    r.srq = srq;
    verbs::qp_created q;
    EXPECT_EQ(b.res->create_qp(b.client + 1, r, q), EINVAL);
    r.srq = srq ^ 0xff;  // no such SRQ (its tag is wrong; ^ 0x100 made 0 when the tag was 0)
    EXPECT_EQ(b.res->create_qp(b.client, r, q), EINVAL);
    ASSERT_EQ(b.res->destroy_qp(b.client, b.qp), 0);
    EXPECT_EQ(b.res->destroy_srq(b.client, srq), 0);
    EXPECT_EQ(b.res->count().srqs, 0u);
    munmap(b.ring, b.ring_bytes);
    b.ring = nullptr;
    b.ring_bytes = 0;
}

TEST_F(QueuePairSrqTest, CreateModifyAndQueryRefuseBadArguments) {
    auto req = proto::make_message<proto::create_srq_request>(
        static_cast<uint16_t>(proto::opcode::create_srq), 1);
    req.pd_handle = b.pd;
    req.max_wr = 16;
    req.max_sge = 1;
    verbs::srq_created out;
    auto refused = [&](proto::create_srq_request r, uint64_t client = 0) {
        return b.res->create_srq(client == 0 ? b.client : client, r, out);
    };
    auto r = req;
    r.max_wr = 0;
    EXPECT_EQ(refused(r), EINVAL);
    r.max_wr = verbs::engine_limits().max_srq_wr + 1;
    EXPECT_EQ(refused(r), EINVAL);
    r = req;
    r.max_sge = verbs::engine_limits().max_srq_sge + 1;
    EXPECT_EQ(refused(r), EINVAL);
    r = req;
    r.srq_limit = 17;
    EXPECT_EQ(refused(r), EINVAL);
    r = req;
    r.flags = 1;
    EXPECT_EQ(refused(r), EINVAL);
    r = req;
    r.reserved = 1;
    EXPECT_EQ(refused(r), EINVAL);
    EXPECT_EQ(refused(req, b.client + 1), EINVAL) << "someone else's PD";
    EXPECT_EQ(b.res->count().srqs, 1u) << "only the fixture's";

    auto m = proto::make_message<proto::modify_srq_request>(
        static_cast<uint16_t>(proto::opcode::modify_srq), 1);
    m.srq_handle = srq;
    m.attr_mask = proto::srq_attr_max_wr;
    m.max_wr = 64;
    EXPECT_EQ(b.res->modify_srq(b.client, m), EOPNOTSUPP) << "no resizing";
    m.attr_mask = proto::srq_attr_limit;
    m.srq_limit = 9;
    EXPECT_EQ(b.res->modify_srq(b.client, m), EINVAL) << "above the capacity (8)";
    m.attr_mask = 4;
    EXPECT_EQ(b.res->modify_srq(b.client, m), EINVAL);
    m.attr_mask = proto::srq_attr_limit;
    m.srq_limit = 8;
    EXPECT_EQ(b.res->modify_srq(b.client + 1, m), EINVAL);
    proto::query_srq_reply q{};
    EXPECT_EQ(b.res->query_srq(b.client + 1, srq, q), EINVAL);
    ASSERT_EQ(b.res->modify_srq(b.client, m), 0);
    ASSERT_EQ(b.res->query_srq(b.client, srq, q), 0);
    EXPECT_EQ(q.srq_limit, 8u);
    EXPECT_EQ(q.max_wr, 8u);
    EXPECT_EQ(q.max_sge, proto::wqe_max_sge);
}

TEST_F(QueuePairSrqTest, WithoutAnEngineThereAreNoSrqsAndMaxSrqIsEnforced) {
    verbs::vnic_resources bare(verbs::engine_limits());
    uint32_t pd = 0;
    ASSERT_EQ(bare.alloc_pd(1, pd), 0);
    auto req = proto::make_message<proto::create_srq_request>(
        static_cast<uint16_t>(proto::opcode::create_srq), 1);
    req.pd_handle = pd;
    req.max_wr = 1;
    verbs::srq_created out;
    EXPECT_EQ(bare.create_srq(1, req, out), EOPNOTSUPP);

    auto lim = verbs::engine_limits();
    lim.max_srq = 2;
    verbs::vnic_resources small(lim);
    verbs::qp_support support;
    support.engine = &eng;
    small.enable_qps(support);
    ASSERT_EQ(small.alloc_pd(1, pd), 0);
    req.pd_handle = pd;
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(small.create_srq(1, req, out), 0);
        close(out.ring_fd);
    }
    EXPECT_EQ(small.create_srq(1, req, out), ENOMEM);
    small.release_client(1);
    EXPECT_EQ(small.count().srqs, 0u);
    EXPECT_EQ(small.count().pds, 0u);
}

}  // namespace
}  // namespace jakiro::rnic::test
