// ibv_resize_cq in the shim against a fake jakirod that plays the engine's timing: completions
// the engine adds to the new ring before the shim has mapped it are the program's, in order;
// a ring that claims more than it can hold is refused (EPROTO), never read past its end. And
// what an empty poll does: it naps on the ring until the next completion.

#include "verbs_shim/cq.hh"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "tests/unit/verbs_shim/fake_jakirod.hh"
#include "verbs_shim/context.hh"

namespace jakiro::verbs_shim::testing {
namespace {

namespace proto = verbs_proto;

class ShimCq : public ::testing::Test {
  protected:
    void SetUp() override {
        fake = std::make_unique<fake_jakirod>();
        ctx = fake->open();
        ASSERT_NE(ctx, nullptr) << std::strerror(errno);
        cq = create_cq(ctx, 4, nullptr, nullptr, 0);
        ASSERT_NE(cq, nullptr) << std::strerror(errno);
    }
    void TearDown() override {
        EXPECT_EQ(destroy_cq(cq), 0);
        EXPECT_EQ(close_device(ctx), 0);
        fake.reset();
    }

    std::unique_ptr<fake_jakirod> fake;
    ibv_context* ctx = nullptr;
    ibv_cq* cq = nullptr;
};

TEST_F(ShimCq, ResizeKeepsCompletionsTheEngineAddedBeforeTheShimMappedTheNewRing) {
    fake->on_resize(3);
    ASSERT_EQ(resize_cq(cq, 16), 0);
    EXPECT_EQ(cq->cqe, 16);
    ibv_wc wc[8];
    ASSERT_EQ(poll_cq(cq, 8, wc), 3);
    EXPECT_EQ(wc[0].wr_id, 1000u);
    EXPECT_EQ(wc[2].wr_id, 1002u);
    EXPECT_EQ(poll_cq(cq, 8, wc), 0);
}

TEST_F(ShimCq, ResizeRefusesANewRingThatClaimsMoreThanItHolds) {
    fake->on_resize(2, 16);  // 18 published in a ring of 16
    EXPECT_EQ(resize_cq(cq, 16), EPROTO);
    EXPECT_EQ(cq->cqe, 4) << "the shim still reads the old ring";
    ibv_wc wc[8];
    EXPECT_EQ(poll_cq(cq, 8, wc), 0);
}

TEST_F(ShimCq, ResizeRefusesNonsenseBeforeAskingJakirod) {
    const std::size_t before = fake->count(proto::opcode::resize_cq);
    EXPECT_EQ(resize_cq(cq, 0), EINVAL);
    EXPECT_EQ(resize_cq(cq, -5), EINVAL);
    EXPECT_EQ(resize_cq(cq, static_cast<int>(fake_limits().max_cqe) + 1), EINVAL);
    EXPECT_EQ(resize_cq(nullptr, 8), EINVAL);
    EXPECT_EQ(fake->count(proto::opcode::resize_cq), before);
}

// What the engine does for a completion (rnic/queues/cq_ring.cc): write, publish, wake.
void complete(proto::cq_ring_header& ring, uint64_t wr_id, ibv_wc_opcode opcode) {
    const uint32_t producer = proto::load_producer_acquire(ring);
    proto::cqe e{};
    e.wr_id = wr_id;
    e.opcode = opcode;
    proto::cq_slots(&ring)[producer & (ring.capacity - 1)] = e;
    proto::publish_producer(ring, producer + 1);
    proto::wake_napping_poller(ring);
}

// A program spinning on an empty CQ naps between polls (idle_backoff.hh) on the CQ ring's
// futex word, so that jakirod's next completion ends the nap instead of the nap's timer.
TEST_F(ShimCq, AnEmptyPollNapsOnTheRingAndTheCompletionWrittenMeanwhileIsReturned) {
    using clock = std::chrono::steady_clock;
    proto::cq_ring_header& ring = *to_cq(cq)->ring;
    std::atomic<bool> done{false};
    ibv_wc got{};
    std::thread program([&] {
        const auto deadline = clock::now() + std::chrono::seconds(10);
        while (poll_cq(cq, 1, &got) == 0 && clock::now() < deadline) {
        }
        done = true;
    });
    const auto deadline = clock::now() + std::chrono::seconds(5);
    while (proto::shared_index(ring.poller_napping).load() == 0 && clock::now() < deadline) {
        std::this_thread::yield();
    }
    const bool napped_on_ring = proto::shared_index(ring.poller_napping).load() != 0;
    complete(ring, 77, IBV_WC_RECV);
    program.join();
    EXPECT_TRUE(napped_on_ring) << "the empty polls never napped on the CQ ring";
    EXPECT_TRUE(done);
    EXPECT_EQ(got.wr_id, 77u);
}

// A program that polls two CQs in turn (UCX: its receive and its send CQ) naps on both at once,
// so that a completion in either ends the nap, not only one in the CQ it polled last.
TEST_F(ShimCq, AThreadPollingTwoCqsInTurnNapsOnBothAndACompletionInEitherIsReturned) {
    using clock = std::chrono::steady_clock;
    ibv_cq* other = create_cq(ctx, 4, nullptr, nullptr, 0);
    ASSERT_NE(other, nullptr) << std::strerror(errno);
    proto::cq_ring_header& first = *to_cq(cq)->ring;
    proto::cq_ring_header& second = *to_cq(other)->ring;
    std::atomic<bool> done{false};
    ibv_wc got{};
    std::thread program([&] {
        const auto deadline = clock::now() + std::chrono::seconds(10);
        while (poll_cq(cq, 1, &got) == 0 && poll_cq(other, 1, &got) == 0 &&
               clock::now() < deadline) {
        }
        done = true;
    });
    const auto napping = [](proto::cq_ring_header& r) {
        return proto::shared_index(r.poller_napping).load() != 0;
    };
    const auto deadline = clock::now() + std::chrono::seconds(5);
    bool on_both = false;
    while (!on_both && clock::now() < deadline) {
        on_both = napping(first) && napping(second);
    }
    complete(first, 78, IBV_WC_SEND);
    program.join();
    EXPECT_TRUE(on_both) << "the empty polls never napped on both CQs at once";
    EXPECT_TRUE(done);
    EXPECT_EQ(got.wr_id, 78u);
    EXPECT_EQ(destroy_cq(other), 0);
}

}  // namespace
}  // namespace jakiro::verbs_shim::testing
