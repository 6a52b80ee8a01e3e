// Shared receive queues through libjakiro_verbs.so against a real channel server and an
// engine no worker polls (this test takes WQEs as the engine would): what ibv_create_srq,
// ibv_post_srq_recv, ibv_modify_srq, ibv_query_srq and ibv_destroy_srq do and refuse, a QP
// created on an SRQ, and the limit event reaching ibv_get_async_event.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "rnic/engine.hh"
#include "rnic/verbs/channel_server.hh"
#include "tests/unit/rnic/verbs/test_endpoints.hh"

namespace jakiro {
namespace {

class ShimSrq : public testing::Test {
  protected:
    void SetUp() override {
        config = verbs::test::test_host({verbs::test::own_vnic("t1", 0x01, 0)});
        server = std::make_unique<verbs::channel_server>(config);
        engine = std::make_unique<rnic::engine>(1, 16);
        server->enable_qps({engine.get()}, {});
        std::string error;
        ASSERT_TRUE(server->start(error)) << error;
        setenv("JAKIRO_VERBS_SOCKET", server->socket_path(0).c_str(), 1);
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        ASSERT_EQ(n, 1);
        ctx = ibv_open_device(list[0]);
        ibv_free_device_list(list);
        ASSERT_NE(ctx, nullptr);
        pd = ibv_alloc_pd(ctx);
        cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
        ASSERT_TRUE(pd && cq);
    }
    void TearDown() override {
        if (ctx != nullptr) {
            EXPECT_EQ(ibv_destroy_cq(cq), 0);
            EXPECT_EQ(ibv_dealloc_pd(pd), 0);
            EXPECT_EQ(ibv_close_device(ctx), 0);
        }
        unsetenv("JAKIRO_VERBS_SOCKET");
        server.reset();
        engine.reset();
    }

    ibv_srq* create_srq(uint32_t max_wr, uint32_t max_sge = 1) {
        ibv_srq_init_attr attr{};
        attr.srq_context = this;
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = max_sge;
        ibv_srq* srq = ibv_create_srq(pd, &attr);
        created = attr.attr;
        return srq;
    }

    ibv_qp* create_qp(ibv_srq* srq) {
        ibv_qp_init_attr attr{};
        attr.send_cq = cq;
        attr.recv_cq = cq;
        attr.srq = srq;
        attr.qp_type = IBV_QPT_RC;
        attr.cap.max_send_wr = 4;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_wr = 100000;  // ignored on an SRQ
        attr.cap.max_recv_sge = 99;
        ibv_qp* qp = ibv_create_qp(pd, &attr);
        qp_caps = attr.cap;
        return qp;
    }

    static int post(ibv_srq* srq, uint64_t wr_id, int num_sge = 1, ibv_recv_wr** bad = nullptr) {
        static char buffer[64];
        ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), sizeof(buffer), 0x42};
        ibv_recv_wr wr{};
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = num_sge;
        ibv_recv_wr* ignored = nullptr;
        return ibv_post_srq_recv(srq, &wr, bad != nullptr ? bad : &ignored);
    }

    bool readable(int fd, int timeout_ms = 2000) {
        pollfd p{fd, POLLIN, 0};
        return poll(&p, 1, timeout_ms) == 1;
    }

    verbs::channel_config config;
    std::unique_ptr<rnic::engine> engine;
    std::unique_ptr<verbs::channel_server> server;
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_srq_attr created{};
    ibv_qp_cap qp_caps{};
};

TEST_F(ShimSrq, TheDeviceAdvertisesSrqs) {
    ibv_device_attr attr{};
    ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
    EXPECT_GT(attr.max_srq, 0);
    EXPECT_GE(attr.max_srq_wr, 4096);
    EXPECT_GE(attr.max_srq_sge, 1);
}

TEST_F(ShimSrq, CreateGivesAPowerOfTwoRingAndQueryReportsIt) {
    ibv_srq* srq = create_srq(100, 2);
    ASSERT_NE(srq, nullptr) << std::strerror(errno);
    EXPECT_EQ(created.max_wr, 128u) << "the caller learns what it really got";
    EXPECT_GE(created.max_sge, 2u);
    EXPECT_EQ(srq->context, ctx);
    EXPECT_EQ(srq->pd, pd);
    EXPECT_EQ(srq->srq_context, this);
    EXPECT_EQ(server->resources(0).count().srqs, 1u);
    ibv_srq_attr q{};
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.max_wr, 128u);
    EXPECT_EQ(q.max_sge, created.max_sge);
    EXPECT_EQ(q.srq_limit, 0u) << "not armed at creation";
    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "its PD is in use";
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    EXPECT_EQ(server->resources(0).count().srqs, 0u);
}

TEST_F(ShimSrq, BadArgumentsAreRefusedWithoutAnSrq) {
    EXPECT_EQ(create_srq(0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(create_srq(1u << 20), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(create_srq(16, 17), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_create_srq(nullptr, nullptr), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(server->resources(0).count().srqs, 0u);
    // XRC (and tag matching) through the extended verb: unsupported, cleanly.
    ibv_srq_init_attr_ex ex{};
    ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                   IBV_SRQ_INIT_ATTR_CQ;
    ex.srq_type = IBV_SRQT_XRC;
    ex.pd = pd;
    ex.cq = cq;
    ex.attr.max_wr = 16;
    ex.attr.max_sge = 1;
    EXPECT_EQ(ibv_create_srq_ex(ctx, &ex), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    // A basic one through the extended verb works.
    ex = {};
    ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    ex.srq_type = IBV_SRQT_BASIC;
    ex.pd = pd;
    ex.attr.max_wr = 16;
    ex.attr.max_sge = 1;
    ibv_srq* srq = ibv_create_srq_ex(ctx, &ex);
    ASSERT_NE(srq, nullptr);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    // Foreign or NULL objects.
    char foreign[256] = {};
    EXPECT_EQ(ibv_destroy_srq(reinterpret_cast<ibv_srq*>(foreign)), EINVAL);
    ibv_srq_attr a{};
    EXPECT_EQ(ibv_query_srq(reinterpret_cast<ibv_srq*>(foreign), &a), EINVAL);
    EXPECT_EQ(ibv_modify_srq(reinterpret_cast<ibv_srq*>(foreign), &a, IBV_SRQ_LIMIT), EINVAL);
}

TEST_F(ShimSrq, PostedWqesLandInTheRingUntilItIsFullThenEnomemWithBadWr) {
    ibv_srq* srq = create_srq(4, 1);
    ASSERT_NE(srq, nullptr);
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(post(srq, 1, static_cast<int>(created.max_sge) + 1, &bad), EINVAL)
        << "more SGEs than the SRQ has";
    EXPECT_NE(bad, nullptr);
    // A chain of five into four slots: four posted, the fifth is bad_wr.
    static char buffer[64];
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), sizeof(buffer), 0x42};
    ibv_recv_wr wrs[5]{};
    for (int i = 0; i < 5; ++i) {
        wrs[i].wr_id = 100 + i;
        wrs[i].sg_list = &sge;
        wrs[i].num_sge = 1;
        wrs[i].next = i < 4 ? &wrs[i + 1] : nullptr;
    }
    EXPECT_EQ(ibv_post_srq_recv(srq, wrs, &bad), ENOMEM);
    EXPECT_EQ(bad, &wrs[4]);
    // The engine's side sees the four, by copy, and frees their slots.
    auto engine_srq = server->resources(0).find_srq(srq->handle);
    ASSERT_NE(engine_srq, nullptr);
    EXPECT_EQ(engine_srq->posted(), 4u);
    verbs_proto::recv_wqe w;
    ASSERT_TRUE(engine_srq->take(w));
    EXPECT_EQ(w.wr_id, 100u);
    EXPECT_EQ(w.num_sge, 1u);
    EXPECT_EQ(w.sg[0].addr, reinterpret_cast<uintptr_t>(buffer));
    EXPECT_EQ(w.sg[0].length, sizeof(buffer));
    EXPECT_EQ(w.sg[0].lkey, 0x42u);
    EXPECT_EQ(post(srq, 104), 0) << "a taken WQE frees its slot";
    EXPECT_EQ(post(srq, 105), ENOMEM);
    engine_srq.reset();
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

TEST_F(ShimSrq, AQpOnAnSrqRefusesPostRecvAndIsBusyForTheSrq) {
    ibv_srq* srq = create_srq(16);
    ASSERT_NE(srq, nullptr);
    ibv_qp* qp = create_qp(srq);
    ASSERT_NE(qp, nullptr) << std::strerror(errno);
    EXPECT_EQ(qp->srq, srq);
    EXPECT_EQ(qp_caps.max_recv_wr, 0u) << "its receives are the SRQ's";
    EXPECT_EQ(qp_caps.max_recv_sge, 0u);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &attr,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    static char buffer[64];
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), sizeof(buffer), 0x42};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), EINVAL) << "as hardware: no RQ on an SRQ";
    EXPECT_EQ(bad, &wr);
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_CAP, &init), 0);
    EXPECT_EQ(init.srq, srq);
    EXPECT_EQ(attr.cap.max_recv_wr, 0u);
    EXPECT_EQ(ibv_destroy_srq(srq), EBUSY) << "a QP takes from it";
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

TEST_F(ShimSrq, AQpCannotUseAnotherContextsSrq) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_EQ(n, 1);
    ibv_context* other = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    ASSERT_NE(other, nullptr);
    ibv_pd* other_pd = ibv_alloc_pd(other);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 4;
    sa.attr.max_sge = 1;
    ibv_srq* theirs = ibv_create_srq(other_pd, &sa);
    ASSERT_NE(theirs, nullptr);
    EXPECT_EQ(create_qp(theirs), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_destroy_srq(theirs), 0);
    EXPECT_EQ(ibv_dealloc_pd(other_pd), 0);
    EXPECT_EQ(ibv_close_device(other), 0);
}

TEST_F(ShimSrq, ModifyArmsTheLimitAndTheEventNamesTheProgramsSrq) {
    ibv_srq* srq = create_srq(8);
    ASSERT_NE(srq, nullptr);
    ibv_srq_attr a{};
    a.max_wr = 64;
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EOPNOTSUPP) << "no resizing";
    a.srq_limit = 9;
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), EINVAL) << "above the queue";
    EXPECT_EQ(ibv_modify_srq(srq, &a, 1 << 5), EINVAL) << "unknown mask bits";
    for (uint64_t id = 1; id <= 4; ++id) {
        ASSERT_EQ(post(srq, id), 0);
    }
    a.srq_limit = 3;
    ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
    ibv_srq_attr q{};
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.srq_limit, 3u);
    // The engine takes two: 2 left < 3.
    auto engine_srq = server->resources(0).find_srq(srq->handle);
    ASSERT_NE(engine_srq, nullptr);
    verbs_proto::recv_wqe w;
    ASSERT_TRUE(engine_srq->take(w));
    ASSERT_TRUE(engine_srq->take(w));
    engine_srq.reset();
    ASSERT_TRUE(readable(ctx->async_fd));
    ibv_async_event event;
    ASSERT_EQ(ibv_get_async_event(ctx, &event), 0);
    EXPECT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    EXPECT_EQ(event.element.srq, srq);
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.srq_limit, 0u) << "fired: disarmed";
    ibv_ack_async_event(&event);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

}  // namespace
}  // namespace jakiro
