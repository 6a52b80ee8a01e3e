#pragma once
// A shim context on a fake jakirod with a PD, a CQ and (made by the test) RC QPs: the shared
// starting point of the QP and post tests.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "tests/unit/verbs_shim/fake_jakirod.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/cq.hh"
#include "verbs_shim/pd.hh"
#include "verbs_shim/qp.hh"

namespace jakiro::verbs_shim::testing {

class QpFixture : public ::testing::Test {
  protected:
    void SetUp() override {
        fake = std::make_unique<fake_jakirod>();
        ctx = fake->open();
        ASSERT_NE(ctx, nullptr) << std::strerror(errno);
        pd = alloc_pd(ctx);
        ASSERT_NE(pd, nullptr);
        cq = create_cq(ctx, 64, nullptr, nullptr, 0);
        ASSERT_NE(cq, nullptr);
    }
    void TearDown() override {
        if (ctx != nullptr) {
            if (cq != nullptr) {
                EXPECT_EQ(destroy_cq(cq), 0);
            }
            if (pd != nullptr) {
                EXPECT_EQ(dealloc_pd(pd), 0);
            }
            EXPECT_EQ(close_device(ctx), 0);
        }
        fake.reset();
    }

    ibv_qp_init_attr rc_attr(uint32_t send_wr = 16, uint32_t recv_wr = 16, uint32_t sge = 4,
                             uint32_t inline_data = 64) {
        ibv_qp_init_attr a{};
        a.qp_context = this;
        a.send_cq = cq;
        a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = send_wr;
        a.cap.max_recv_wr = recv_wr;
        a.cap.max_send_sge = sge;
        a.cap.max_recv_sge = sge;
        a.cap.max_inline_data = inline_data;
        return a;
    }

    ibv_qp* make_qp(uint32_t send_wr = 16, uint32_t recv_wr = 16, uint32_t sge = 4,
                    uint32_t inline_data = 64) {
        ibv_qp_init_attr a = rc_attr(send_wr, recv_wr, sge, inline_data);
        ibv_qp* qp = create_qp(pd, &a);
        EXPECT_NE(qp, nullptr) << std::strerror(errno);
        return qp;
    }

    // Moves `qp` through the states the post verbs care about (the fake accepts any).
    int move_to(ibv_qp* qp, ibv_qp_state state) {
        ibv_qp_attr a{};
        a.qp_state = state;
        return modify_qp(qp, &a, IBV_QP_STATE);
    }

    std::unique_ptr<fake_jakirod> fake;
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
};

}  // namespace jakiro::verbs_shim::testing
