// ibv_create_cq_ex against a fake jakirod's real CQ ring: the test plays jakirod's producer
// end, the shim's ibv_cq_ex iterator (start/next/end_poll and the read_* accessors) reads
// the ring, and the same CQ keeps working with ibv_poll_cq, channels and arming.

#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "tests/unit/verbs_shim/fake_jakirod.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/cq.hh"
#include "verbs_shim/cq_ex.hh"

namespace jakiro::verbs_shim::testing {
namespace {

namespace proto = verbs_proto;

class ShimCqEx : public ::testing::Test {
  protected:
    void SetUp() override {
        fake = std::make_unique<fake_jakirod>();
        ctx = fake->open();
        ASSERT_NE(ctx, nullptr) << std::strerror(errno);
    }
    void TearDown() override {
        if (ctx != nullptr) {
            EXPECT_EQ(close_device(ctx), 0);
        }
        fake.reset();
    }

    static ibv_cq_init_attr_ex attr(uint64_t wc_flags = IBV_WC_STANDARD_FLAGS) {
        ibv_cq_init_attr_ex a{};
        a.cqe = 8;
        a.wc_flags = wc_flags;
        return a;
    }

    // jakirod's side: one completion into the ring, published.
    static void push(ibv_cq_ex* cq, const proto::cqe& e) {
        proto::cq_ring_header& ring = *to_cq(ibv_cq_ex_to_cq(cq))->ring;
        const uint32_t producer = proto::load_producer_acquire(ring);
        proto::cq_slots(&ring)[producer & (ring.capacity - 1)] = e;
        proto::publish_producer(ring, producer + 1);
    }
    static uint32_t consumer(ibv_cq_ex* cq) {
        return proto::load_own_consumer(*to_cq(ibv_cq_ex_to_cq(cq))->ring);
    }

    static proto::cqe completion(uint64_t wr_id, uint32_t opcode, uint32_t status = 0) {
        proto::cqe e{};
        e.wr_id = wr_id;
        e.status = status;
        e.opcode = opcode;
        e.vendor_err = status != 0 ? 0x42 : 0;
        e.byte_len = 1000 + static_cast<uint32_t>(wr_id);
        e.imm_data = htobe32(0xabcd0000 | static_cast<uint32_t>(wr_id));
        e.qp_num = 0x101;
        e.src_qp = 0x202;
        e.wc_flags = IBV_WC_WITH_IMM | IBV_WC_GRH;
        e.pkey_index = 0;
        e.slid = 0x33;
        e.sl = 3;
        e.dlid_path_bits = 5;
        return e;
    }

    std::unique_ptr<fake_jakirod> fake;
    ibv_context* ctx = nullptr;
};

TEST_F(ShimCqEx, StartNextEndPollWalkTheRingAndReadEveryField) {
    ibv_cq_init_attr_ex a = attr();
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &a);  // the inline verb, through our op
    ASSERT_NE(cq, nullptr) << std::strerror(errno);
    EXPECT_EQ(cq->context, ctx);
    EXPECT_GE(cq->cqe, 8);
    push(cq, completion(1, IBV_WC_RECV_RDMA_WITH_IMM));
    push(cq, completion(2, IBV_WC_SEND, IBV_WC_REM_ACCESS_ERR));
    push(cq, completion(3, IBV_WC_RDMA_READ));

    ibv_poll_cq_attr pa{};
    ASSERT_EQ(ibv_start_poll(cq, &pa), 0);
    EXPECT_EQ(cq->wr_id, 1u);
    EXPECT_EQ(cq->status, IBV_WC_SUCCESS);
    EXPECT_EQ(ibv_wc_read_opcode(cq), IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(ibv_wc_read_vendor_err(cq), 0u);
    EXPECT_EQ(ibv_wc_read_byte_len(cq), 1001u);
    EXPECT_EQ(ibv_wc_read_imm_data(cq), htobe32(0xabcd0001));
    EXPECT_EQ(ibv_wc_read_invalidated_rkey(cq), htobe32(0xabcd0001)) << "the same 32 bits";
    EXPECT_EQ(ibv_wc_read_qp_num(cq), 0x101u);
    EXPECT_EQ(ibv_wc_read_src_qp(cq), 0x202u);
    EXPECT_EQ(ibv_wc_read_wc_flags(cq), unsigned{IBV_WC_WITH_IMM | IBV_WC_GRH});
    EXPECT_EQ(ibv_wc_read_slid(cq), 0x33u);
    EXPECT_EQ(ibv_wc_read_sl(cq), 3);
    EXPECT_EQ(ibv_wc_read_dlid_path_bits(cq), 5);
    EXPECT_EQ(consumer(cq), 0u) << "nothing handed back before end_poll";

    ASSERT_EQ(ibv_next_poll(cq), 0);
    EXPECT_EQ(cq->wr_id, 2u);
    EXPECT_EQ(cq->status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(ibv_wc_read_vendor_err(cq), 0x42u);
    EXPECT_EQ(ibv_wc_read_opcode(cq), IBV_WC_SEND);
    ASSERT_EQ(ibv_next_poll(cq), 0);
    EXPECT_EQ(cq->wr_id, 3u);
    EXPECT_EQ(ibv_wc_read_byte_len(cq), 1003u);
    EXPECT_EQ(ibv_next_poll(cq), ENOENT);
    EXPECT_EQ(cq->wr_id, 3u) << "ENOENT leaves the last completion as it was";
    ibv_end_poll(cq);
    EXPECT_EQ(consumer(cq), 3u) << "every completion of the session is handed back at once";

    EXPECT_EQ(ibv_start_poll(cq, &pa), ENOENT);
    // ENOENT released the poll lock (no end_poll after it): ibv_poll_cq does not block.
    ibv_wc wc;
    EXPECT_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc), 0);
    EXPECT_EQ(destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
}

TEST_F(ShimCqEx, AnExtendedCqIsAlsoAPlainCq) {
    ibv_comp_channel* channel = create_comp_channel(ctx);
    ASSERT_NE(channel, nullptr);
    ibv_cq_init_attr_ex a = attr(IBV_WC_EX_WITH_BYTE_LEN);
    a.channel = channel;
    a.cq_context = this;
    a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;  // a hint: accepted
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &a);
    ASSERT_NE(cq, nullptr) << std::strerror(errno);
    ibv_cq* plain = ibv_cq_ex_to_cq(cq);
    EXPECT_EQ(plain->channel, channel);
    EXPECT_EQ(plain->cq_context, this);
    EXPECT_EQ(channel->refcnt, 1);

    // Arming goes into the same ring.
    EXPECT_EQ(ibv_req_notify_cq(plain, 1), 0);
    EXPECT_EQ(to_cq(plain)->ring->arm, uint32_t{proto::arm_solicited});

    // The iterator and ibv_poll_cq share the ring and its consumer index.
    for (uint64_t i = 1; i <= 3; ++i) {
        push(cq, completion(i, IBV_WC_RECV));
    }
    ASSERT_EQ(ibv_start_poll(cq, nullptr), 0);
    EXPECT_EQ(cq->wr_id, 1u);
    ibv_end_poll(cq);
    ibv_wc wc[4];
    ASSERT_EQ(ibv_poll_cq(plain, 4, wc), 2);
    EXPECT_EQ(wc[0].wr_id, 2u);
    EXPECT_EQ(wc[0].byte_len, 1002u);
    EXPECT_EQ(wc[1].wr_id, 3u);
    EXPECT_EQ(ibv_start_poll(cq, nullptr), ENOENT);

    EXPECT_EQ(destroy_comp_channel(channel), EBUSY);
    EXPECT_EQ(destroy_cq(plain), 0);
    EXPECT_EQ(destroy_comp_channel(channel), 0);
}

TEST_F(ShimCqEx, TimestampAccessorsReadWhatJakirodStamped) {
    for (const uint64_t flags :
         {uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP},
          uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK},
          uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                   IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK},
          uint64_t{IBV_WC_STANDARD_FLAGS} | uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP}}) {
        SCOPED_TRACE(flags);
        ibv_cq_init_attr_ex a = attr(flags);
        ibv_cq_ex* cq = create_cq_ex(ctx, &a);
        ASSERT_NE(cq, nullptr) << std::strerror(errno);
        proto::cqe e = completion(7, IBV_WC_SEND);
        e.completion_ts = 123'456'789'012ull;
        e.wallclock_ns = 1'800'000'000'000'000'000ull;
        push(cq, e);
        ASSERT_EQ(ibv_start_poll(cq, nullptr), 0);
        EXPECT_EQ(ibv_wc_read_completion_ts(cq), 123'456'789'012ull);
        EXPECT_EQ(ibv_wc_read_completion_wallclock_ns(cq), 1'800'000'000'000'000'000ull);
        ibv_end_poll(cq);
        EXPECT_EQ(destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
    }
}

TEST_F(ShimCqEx, CreateRefusesWhatItCannotDeliver) {
    const std::size_t before = fake->count(proto::opcode::create_cq);
    struct refusal {
        uint64_t wc_flags;
        uint32_t comp_mask;
        uint32_t flags;
        int error;
    };
    const refusal refusals[] = {
        {IBV_WC_EX_WITH_CVLAN, 0, 0, EOPNOTSUPP},
        {IBV_WC_EX_WITH_FLOW_TAG, 0, 0, EOPNOTSUPP},
        {IBV_WC_EX_WITH_TM_INFO, 0, 0, EOPNOTSUPP},
        {uint64_t{1} << 40, 0, 0, EOPNOTSUPP},  // unknown wc_flags
        {IBV_WC_STANDARD_FLAGS, IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
         EOPNOTSUPP},
        {IBV_WC_STANDARD_FLAGS, IBV_CQ_INIT_ATTR_MASK_FLAGS, 1u << 7, EOPNOTSUPP},
        {IBV_WC_STANDARD_FLAGS, IBV_CQ_INIT_ATTR_MASK_PD, 0, EINVAL},  // no parent domain named
    };
    for (const refusal& r : refusals) {
        SCOPED_TRACE(r.wc_flags);
        ibv_cq_init_attr_ex a = attr(r.wc_flags);
        a.comp_mask = r.comp_mask;
        a.flags = r.flags;
        errno = 0;
        EXPECT_EQ(create_cq_ex(ctx, &a), nullptr);
        EXPECT_EQ(errno, r.error);
    }
    // Unknown comp_mask bits: EINVAL (the inline verb refuses them before our op, too).
    ibv_cq_init_attr_ex a = attr();
    a.comp_mask = 1u << 5;
    errno = 0;
    EXPECT_EQ(create_cq_ex(ctx, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    a = attr();
    a.cqe = 0;
    EXPECT_EQ(create_cq_ex(ctx, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(create_cq_ex(ctx, nullptr), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(fake->count(proto::opcode::create_cq), before) << "refused without asking jakirod";
}

}  // namespace
}  // namespace jakiro::verbs_shim::testing
