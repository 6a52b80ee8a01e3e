// The ibv_wr_* API of ibv_qp_ex against a fake jakirod's real QP ring: QPs created with send
// ops (and those refused), every builder and setter writing byte for byte the WQE that
// ibv_post_send writes for the same request, nothing visible before ibv_wr_complete,
// ibv_wr_abort discarding, and every error reported by ibv_wr_complete with nothing posted.

#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "tests/unit/verbs_shim/qp_fixture.hh"
#include "verbs_shim/qp_ex.hh"

namespace jakiro::verbs_shim::testing {
namespace {

namespace proto = verbs_proto;

class ShimQpEx : public QpFixture {
  protected:
    void SetUp() override {
        QpFixture::SetUp();
        if (HasFatalFailure()) {
            return;
        }
        plain = make_qp(16, 16, 4, 64);
        ASSERT_NE(plain, nullptr);
        ex = make_qp_ex(rc_ops);
        ASSERT_NE(ex, nullptr) << std::strerror(errno);
        qpx = qp_to_qp_ex(ex);
        ASSERT_NE(qpx, nullptr);
        for (ibv_qp* qp : {plain, ex}) {
            for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
                ASSERT_EQ(move_to(qp, s), 0);
            }
        }
    }
    void TearDown() override {
        for (ibv_qp* qp : {plain, ex}) {
            if (qp != nullptr) {
                EXPECT_EQ(destroy_qp(qp), 0);
            }
        }
        QpFixture::TearDown();
    }

    static constexpr uint64_t rc_ops =
        IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
        IBV_QP_EX_WITH_ATOMIC_WRITE;

    ibv_qp_init_attr_ex ex_attr(uint64_t ops, ibv_qp_type type = IBV_QPT_RC) {
        ibv_qp_init_attr a = rc_attr(16, 16, 4, 64);
        ibv_qp_init_attr_ex x{};
        x.qp_context = a.qp_context;
        x.send_cq = a.send_cq;
        x.recv_cq = a.recv_cq;
        x.cap = a.cap;
        x.qp_type = type;
        x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        x.pd = pd;
        x.send_ops_flags = ops;
        return x;
    }
    ibv_qp* make_qp_ex(uint64_t ops) {
        ibv_qp_init_attr_ex x = ex_attr(ops);
        return ibv_create_qp_ex(ctx, &x);  // the inline verb, through our op
    }

    proto::qp_ring_header& ring(ibv_qp* qp) { return *fake->qp(qp->handle).ring; }
    const proto::send_wqe& slot(ibv_qp* qp, uint32_t index) {
        return proto::sq_slots(&ring(qp))[index & (ring(qp).sq_capacity - 1)];
    }
    uint32_t producer(ibv_qp* qp) { return proto::load_posted_acquire(ring(qp).sq_producer); }
    void scribble(ibv_qp* qp) {
        std::memset(proto::sq_slots(&ring(qp)), 0xee, std::size_t{16} * proto::wqe_size);
    }

    // The same request through the ibv_wr_* API: builder, then the data setter.
    void build(const ibv_send_wr& w, bool single_sge_setter) {
        qpx->wr_id = w.wr_id;
        qpx->wr_flags = w.send_flags & ~unsigned{IBV_SEND_INLINE};
        switch (w.opcode) {
            case IBV_WR_SEND:
                ibv_wr_send(qpx);
                break;
            case IBV_WR_SEND_WITH_IMM:
                ibv_wr_send_imm(qpx, w.imm_data);
                break;
            case IBV_WR_RDMA_WRITE:
                ibv_wr_rdma_write(qpx, w.wr.rdma.rkey, w.wr.rdma.remote_addr);
                break;
            case IBV_WR_RDMA_WRITE_WITH_IMM:
                ibv_wr_rdma_write_imm(qpx, w.wr.rdma.rkey, w.wr.rdma.remote_addr, w.imm_data);
                break;
            case IBV_WR_RDMA_READ:
                ibv_wr_rdma_read(qpx, w.wr.rdma.rkey, w.wr.rdma.remote_addr);
                break;
            case IBV_WR_ATOMIC_CMP_AND_SWP:
                ibv_wr_atomic_cmp_swp(qpx, w.wr.atomic.rkey, w.wr.atomic.remote_addr,
                                      w.wr.atomic.compare_add, w.wr.atomic.swap);
                break;
            case IBV_WR_ATOMIC_FETCH_AND_ADD:
                ibv_wr_atomic_fetch_add(qpx, w.wr.atomic.rkey, w.wr.atomic.remote_addr,
                                        w.wr.atomic.compare_add);
                break;
            case IBV_WR_ATOMIC_WRITE:
                // The builder takes the value itself: no data setter follows.
                ibv_wr_atomic_write(qpx, w.wr.rdma.rkey, w.wr.rdma.remote_addr,
                                    reinterpret_cast<const void*>(w.sg_list[0].addr));
                return;
            default:
                FAIL() << "no builder for opcode " << w.opcode;
        }
        if ((w.send_flags & IBV_SEND_INLINE) != 0) {
            std::vector<ibv_data_buf> bufs;
            for (int i = 0; i < w.num_sge; ++i) {
                bufs.push_back({reinterpret_cast<void*>(w.sg_list[i].addr), w.sg_list[i].length});
            }
            if (bufs.size() == 1) {
                ibv_wr_set_inline_data(qpx, bufs[0].addr, bufs[0].length);
            } else {
                ibv_wr_set_inline_data_list(qpx, bufs.size(), bufs.data());
            }
        } else if (w.num_sge == 1 && single_sge_setter) {
            ibv_wr_set_sge(qpx, w.sg_list[0].lkey, w.sg_list[0].addr, w.sg_list[0].length);
        } else if (w.num_sge > 0) {
            ibv_wr_set_sge_list(qpx, static_cast<size_t>(w.num_sge), w.sg_list);
        }
    }

    ibv_qp* plain = nullptr;
    ibv_qp* ex = nullptr;
    ibv_qp_ex* qpx = nullptr;
};

ibv_sge sge(uint64_t addr, uint32_t length, uint32_t lkey) {
    return ibv_sge{addr, length, lkey};
}

TEST_F(ShimQpEx, OnlyAQpCreatedWithSendOpsIsAQpEx) {
    EXPECT_EQ(&qpx->qp_base, ex) << "ibv_qp is the prefix of ibv_qp_ex";
    EXPECT_EQ(qp_to_qp_ex(plain), nullptr) << "as libibverbs: no send ops, no ibv_qp_ex";
    EXPECT_EQ(qp_to_qp_ex(nullptr), nullptr);
    // PD only (the inline verb would call ibv_create_qp itself): a plain QP.
    ibv_qp_init_attr_ex x = ex_attr(0);
    x.comp_mask = IBV_QP_INIT_ATTR_PD;
    ibv_qp* qp = create_qp_ex(ctx, &x);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(qp_to_qp_ex(qp), nullptr);
    EXPECT_EQ(destroy_qp(qp), 0);
    // Send ops a QP could also do with ibv_post_send: just SEND is fine.
    qp = make_qp_ex(IBV_QP_EX_WITH_SEND);
    ASSERT_NE(qp, nullptr);
    EXPECT_NE(qp_to_qp_ex(qp), nullptr);
    EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(ShimQpEx, CreateRefusesSendOpsTheEngineLacksWithoutAskingJakirod) {
    const std::size_t before = fake->count(proto::opcode::create_qp);
    for (uint64_t ops :
         {uint64_t{IBV_QP_EX_WITH_TSO}, uint64_t{1} << 40, rc_ops | IBV_QP_EX_WITH_TSO}) {
        SCOPED_TRACE(ops);
        errno = 0;
        EXPECT_EQ(make_qp_ex(ops), nullptr);
        EXPECT_EQ(errno, EOPNOTSUPP);
    }
    // What a transport does not carry: READ and atomics on UC, anything but SEND on UD.
    for (auto [type, ops] : {std::pair{IBV_QPT_UC, uint64_t{IBV_QP_EX_WITH_RDMA_READ}},
                             std::pair{IBV_QPT_UC, uint64_t{IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP}},
                             std::pair{IBV_QPT_UC, uint64_t{IBV_QP_EX_WITH_ATOMIC_WRITE}},
                             std::pair{IBV_QPT_UD, uint64_t{IBV_QP_EX_WITH_RDMA_WRITE}}}) {
        ibv_qp_init_attr_ex x = ex_attr(ops, type);
        errno = 0;
        EXPECT_EQ(ibv_create_qp_ex(ctx, &x), nullptr);
        EXPECT_EQ(errno, EOPNOTSUPP);
    }
    // No creation flag and none of the rest of comp_mask is built; a PD is needed.
    ibv_qp_init_attr_ex x = ex_attr(IBV_QP_EX_WITH_SEND);
    x.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
    x.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
    EXPECT_EQ(ibv_create_qp_ex(ctx, &x), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    x = ex_attr(IBV_QP_EX_WITH_SEND);
    x.comp_mask |= IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
    x.max_tso_header = 64;
    EXPECT_EQ(ibv_create_qp_ex(ctx, &x), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    x = ex_attr(IBV_QP_EX_WITH_SEND);
    x.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    EXPECT_EQ(ibv_create_qp_ex(ctx, &x), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(fake->count(proto::opcode::create_qp), before);
}

TEST_F(ShimQpEx, EveryBuilderWritesTheWqeIbvPostSendWrites) {
    scribble(plain);
    scribble(ex);
    char a[20], c[44];
    std::memset(a, 'a', sizeof(a));
    std::memset(c, 'c', sizeof(c));
    ibv_sge s[4] = {sge(0x1000, 10, 0x11), sge(0x2000, 20, 0x22), sge(0x3000, 30, 0x33),
                    sge(0x4000, 40, 0x44)};
    ibv_sge atomic_sge = sge(0x5000, 8, 0x55);
    ibv_sge in[2] = {sge(reinterpret_cast<uintptr_t>(a), 20, 0),
                     sge(reinterpret_cast<uintptr_t>(c), 44, 0)};
    uint64_t atomic_write_value = 0x0102030405060708;
    ibv_sge atomic_write_sge = sge(reinterpret_cast<uintptr_t>(&atomic_write_value), 8, 0);
    std::vector<ibv_send_wr> w(13);
    w[0] = {.wr_id = 100,
            .sg_list = s,
            .num_sge = 2,
            .opcode = IBV_WR_SEND,
            .send_flags = IBV_SEND_SIGNALED};
    w[1] = {.wr_id = 101,
            .sg_list = s + 3,
            .num_sge = 1,
            .opcode = IBV_WR_SEND_WITH_IMM,
            .send_flags = IBV_SEND_SOLICITED,
            .imm_data = htobe32(0x01020304)};
    w[2] = {.wr_id = 102,
            .sg_list = s,
            .num_sge = 3,
            .opcode = IBV_WR_RDMA_WRITE,
            .send_flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED};
    w[2].wr.rdma = {0xdead0000beef, 0x5501};
    w[3] = {.wr_id = 103,
            .sg_list = s,
            .num_sge = 4,
            .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
            .imm_data = htobe32(0xa0b0c0d0)};
    w[3].wr.rdma = {0x7000, 0x5502};
    w[4] = {.wr_id = 104, .sg_list = s + 1, .num_sge = 1, .opcode = IBV_WR_RDMA_READ};
    w[4].wr.rdma = {0x8000, 0x5503};
    w[5] = {.wr_id = 105,
            .sg_list = &atomic_sge,
            .num_sge = 1,
            .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
            .send_flags = IBV_SEND_SIGNALED};
    w[5].wr.atomic = {0x9008, 0x1111222233334444, 0x5555666677778888, 0x5504};
    w[6] = {
        .wr_id = 106, .sg_list = &atomic_sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD};
    w[6].wr.atomic = {0x9010, 7, 0, 0x5505};
    w[7] = {.wr_id = 107, .opcode = IBV_WR_SEND};  // zero-length: no data setter at all
    w[8] = {.wr_id = 108,
            .sg_list = in,
            .num_sge = 2,
            .opcode = IBV_WR_RDMA_WRITE,
            .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED};
    w[8].wr.rdma = {0x9000, 0x77};
    w[9] = {.wr_id = 109,
            .sg_list = in + 1,
            .num_sge = 1,
            .opcode = IBV_WR_SEND_WITH_IMM,
            .send_flags = IBV_SEND_INLINE,
            .imm_data = htobe32(9)};
    w[10] = {.wr_id = 110, .sg_list = s + 2, .num_sge = 1, .opcode = IBV_WR_SEND};
    w[11] = {.wr_id = 111,
             .sg_list = in,
             .num_sge = 0,
             .opcode = IBV_WR_SEND,
             .send_flags = IBV_SEND_INLINE};
    w[12] = {.wr_id = 112,
             .sg_list = &atomic_write_sge,
             .num_sge = 1,
             .opcode = IBV_WR_ATOMIC_WRITE,
             .send_flags = IBV_SEND_SIGNALED};
    w[12].wr.rdma = {0xA008, 0x5506};
    for (std::size_t i = 0; i + 1 < w.size(); ++i) {
        w[i].next = &w[i + 1];
    }
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(plain, w.data(), &bad), 0);

    ibv_wr_start(qpx);
    for (std::size_t i = 0; i < w.size(); ++i) {
        build(w[i], i == 10);
    }
    EXPECT_EQ(producer(ex), 0u) << "nothing published before ibv_wr_complete";
    std::memset(a, 'x', sizeof(a));  // inline setters copied at once: the buffers are free
    std::memset(c, 'x', sizeof(c));
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    ASSERT_EQ(producer(ex), w.size());
    ASSERT_EQ(producer(plain), w.size());
    for (uint32_t i = 0; i < w.size(); ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(std::memcmp(&slot(ex, i), &slot(plain, i), proto::wqe_size), 0)
            << "opcode " << slot(ex, i).opcode;
    }
    EXPECT_EQ(slot(ex, 8).inline_len, 64u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(slot(ex, 8).inline_data), 64),
              std::string(20, 'a') + std::string(44, 'c'));
    EXPECT_EQ(slot(ex, 5).compare_add, 0x1111222233334444u);
    EXPECT_EQ(slot(ex, 5).swap, 0x5555666677778888u);
    EXPECT_EQ(slot(ex, 12).inline_len, 8u) << "ATOMIC WRITE carries its value in the WQE";
}

TEST_F(ShimQpEx, AbortDiscardsTheRegionAndTheNextRegionReusesItsSlots) {
    ibv_wr_start(qpx);
    for (uint64_t id = 1; id <= 3; ++id) {
        qpx->wr_id = id;
        ibv_wr_send(qpx);
        ibv_wr_set_sge(qpx, 0x10, 0x1000, 4);
    }
    ibv_wr_abort(qpx);
    EXPECT_EQ(producer(ex), 0u);

    ibv_wr_start(qpx);
    qpx->wr_id = 42;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qpx, 0x99, 0xabc000);
    ibv_wr_set_sge(qpx, 0x10, 0x2000, 8);
    ASSERT_EQ(ibv_wr_complete(qpx), 0);
    EXPECT_EQ(producer(ex), 1u);
    EXPECT_EQ(slot(ex, 0).wr_id, 42u);
    EXPECT_EQ(slot(ex, 0).opcode, uint32_t{IBV_WR_RDMA_WRITE});

    // An empty region publishes nothing and succeeds.
    ibv_wr_start(qpx);
    EXPECT_EQ(ibv_wr_complete(qpx), 0);
    EXPECT_EQ(producer(ex), 1u);
    // The lock was given back every time: ibv_post_send goes on.
    ibv_send_wr w{};
    w.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(ex, &w, &bad), 0);
    EXPECT_EQ(producer(ex), 2u);
}

TEST_F(ShimQpEx, ErrorsAreWrCompletesReturnAndNothingOfTheRegionIsPosted) {
    char big[128] = {};
    const ibv_sge many[5] = {};
    ibv_ah* fake_ah = reinterpret_cast<ibv_ah*>(big);
    struct bad_case {
        const char* what;
        void (*build)(ibv_qp_ex*, void*, const ibv_sge*, ibv_ah*);
    };
    const bad_case cases[] = {
        {"more SGEs than the QP has",
         [](ibv_qp_ex* x, void*, const ibv_sge* s, ibv_ah*) {
             ibv_wr_send(x);
             ibv_wr_set_sge_list(x, 5, s);
         }},
        {"more inline data than the QP has",
         [](ibv_qp_ex* x, void* b, const ibv_sge*, ibv_ah*) {
             ibv_wr_send(x);
             ibv_wr_set_inline_data(x, b, 65);
         }},
        {"inline data for a READ",
         [](ibv_qp_ex* x, void* b, const ibv_sge*, ibv_ah*) {
             ibv_wr_rdma_read(x, 1, 0x1000);
             ibv_wr_set_inline_data(x, b, 8);
         }},
        {"an atomic without its 8-byte buffer",
         [](ibv_qp_ex* x, void*, const ibv_sge*, ibv_ah*) {
             ibv_wr_atomic_fetch_add(x, 1, 0x1000, 1);
             ibv_wr_set_sge(x, 0x10, 0x2000, 4);
         }},
        {"a bind of no window",
         [](ibv_qp_ex* x, void*, const ibv_sge*, ibv_ah*) {
             ibv_mw_bind_info info{};
             ibv_wr_bind_mw(x, nullptr, 0x1234, &info);
         }},
        {"a UD address on an RC QP",
         [](ibv_qp_ex* x, void*, const ibv_sge*, ibv_ah* ah) {
             ibv_wr_send(x);
             ibv_wr_set_ud_addr(x, ah, 5, 0x11111111);
         }},
        {"an XRC SRQN",
         [](ibv_qp_ex* x, void*, const ibv_sge*, ibv_ah*) {
             ibv_wr_send(x);
             ibv_wr_set_xrc_srqn(x, 3);
         }},
    };
    for (const bad_case& c : cases) {
        SCOPED_TRACE(c.what);
        ibv_wr_start(qpx);
        ibv_wr_send(qpx);  // a good request first: it must not be posted either
        ibv_wr_set_sge(qpx, 0x10, 0x1000, 4);
        c.build(qpx, big, many, fake_ah);
        ibv_wr_send(qpx);  // and after the bad one: ignored
        EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
        EXPECT_EQ(producer(ex), 0u);
    }
    // A setter before any builder has no request to attach to.
    ibv_wr_start(qpx);
    ibv_wr_set_sge(qpx, 1, 0x1000, 4);
    ibv_wr_send(qpx);
    EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
    EXPECT_EQ(producer(ex), 0u);
    // The QP is fine afterwards.
    ibv_wr_start(qpx);
    ibv_wr_send(qpx);
    EXPECT_EQ(ibv_wr_complete(qpx), 0);
    EXPECT_EQ(producer(ex), 1u);
    EXPECT_EQ(ibv_wr_complete(qpx), EINVAL) << "complete without start";
}

TEST_F(ShimQpEx, AFullSendQueueIsEnomemForTheWholeRegion) {
    ibv_wr_start(qpx);
    for (int i = 0; i < 17; ++i) {  // 16 slots
        ibv_wr_send(qpx);
    }
    EXPECT_EQ(ibv_wr_complete(qpx), ENOMEM);
    EXPECT_EQ(producer(ex), 0u);
    ibv_wr_start(qpx);
    for (int i = 0; i < 16; ++i) {
        qpx->wr_id = static_cast<uint64_t>(i);
        ibv_wr_send(qpx);
    }
    EXPECT_EQ(ibv_wr_complete(qpx), 0);
    EXPECT_EQ(producer(ex), 16u);
    ibv_wr_start(qpx);
    ibv_wr_send(qpx);
    EXPECT_EQ(ibv_wr_complete(qpx), ENOMEM);
    proto::retire_slots(ring(ex).sq_consumer, 1);  // jakirod is done with one
    ibv_wr_start(qpx);
    qpx->wr_id = 99;
    ibv_wr_send(qpx);
    EXPECT_EQ(ibv_wr_complete(qpx), 0);
    EXPECT_EQ(producer(ex), 17u);
    EXPECT_EQ(slot(ex, 16).wr_id, 99u) << "slot 0 again";
}

TEST_F(ShimQpEx, TheSendQueueTakesWorkFromRtsOnOnly) {
    ibv_qp* qp = make_qp_ex(IBV_QP_EX_WITH_SEND);
    ASSERT_NE(qp, nullptr);
    ibv_qp_ex* x = qp_to_qp_ex(qp);
    for (ibv_qp_state s : {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR}) {
        if (s != IBV_QPS_RESET) {
            ASSERT_EQ(move_to(qp, s), 0);
        }
        ibv_wr_start(x);
        ibv_wr_send(x);
        EXPECT_EQ(ibv_wr_complete(x), EINVAL) << "state " << s;
    }
    ASSERT_EQ(move_to(qp, IBV_QPS_RTS), 0);
    ibv_wr_start(x);
    ibv_wr_send(x);
    EXPECT_EQ(ibv_wr_complete(x), 0);
    EXPECT_EQ(producer(qp), 1u);
    EXPECT_EQ(destroy_qp(qp), 0);
}

}  // namespace
}  // namespace jakiro::verbs_shim::testing

// verbs.h's inline ibv_create_qp_ex falls back to ibv_create_qp when a QP asks for nothing but
// a PD, and a program takes that symbol from libibverbs, here the shim. This test links the
// shim's core rather than the exported library, so it gives itself the same entry the shim
// exports. An optimising build drops the call when it proves the fallback unused, a
// sanitized one keeps it and would not link without this.
extern "C" ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    return jakiro::verbs_shim::create_qp(pd, attr);
}
