#include "dataplane/worker/handoff.hh"

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <span>
#include <string>
#include <vector>

namespace jakiro {
namespace {

struct Handoff : testing::Test {
    static inline rte_mempool* pool = nullptr;
    static inline int created = 0;
    std::unique_ptr<worker_handoff> handoff;

    static void SetUpTestSuite() {
        if (pool == nullptr) {
            pool = rte_pktmbuf_pool_create("handoff_test", 8191, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                           SOCKET_ID_ANY);
        }
    }
    void SetUp() override {
        ASSERT_NE(pool, nullptr);
        std::string error;
        handoff = worker_handoff::create(2, "ut" + std::to_string(created++), error);
        ASSERT_TRUE(handoff) << error;
    }
    void TearDown() override {
        handoff.reset();  // frees what is left in its rings
        EXPECT_EQ(rte_mempool_in_use_count(pool), 0u);
    }
    std::vector<rte_mbuf*> burst(uint16_t n) {
        std::vector<rte_mbuf*> pkts(n);
        EXPECT_EQ(rte_pktmbuf_alloc_bulk(pool, pkts.data(), n), 0);
        for (uint16_t i = 0; i < n; ++i) {
            pkts[i]->hash.usr = i;  // the order they were given in
        }
        return pkts;
    }
};

TEST_F(Handoff, FabricFramesReachTheOwnerInOrder) {
    auto pkts = burst(40);
    ASSERT_EQ(handoff->give_fabric(1, pkts.data(), 40), 40);
    EXPECT_TRUE(handoff->pending(1));
    EXPECT_FALSE(handoff->pending(0)) << "worker 0's rings are its own";
    rte_mbuf* out[64];
    const uint16_t n = handoff->take_fabric(1, out, 64);
    ASSERT_EQ(n, 40);
    for (uint16_t i = 0; i < n; ++i) {
        EXPECT_EQ(out[i]->hash.usr, i);
    }
    EXPECT_EQ(handoff->take_port(1, out, 64), 0) << "fabric and port frames do not mix";
    rte_pktmbuf_free_bulk(out, n);
}

TEST_F(Handoff, PortFramesCarryThePortTheyAreFor) {
    auto pkts = burst(3);
    ASSERT_EQ(handoff->give_port(0, 7, pkts.data(), 3), 3);
    rte_mbuf* out[8];
    ASSERT_EQ(handoff->take_port(0, out, 8), 3);
    for (rte_mbuf* m : std::span(out, 3)) {
        EXPECT_EQ(m->port, 7);
    }
    rte_pktmbuf_free_bulk(out, 3);
}

TEST_F(Handoff, AFullRingTakesWhatFitsAndTheGiverKeepsTheRest) {
    // An rte_ring of size N holds N - 1.
    const uint16_t room = worker_handoff::ring_size - 1;
    auto first = burst(room);
    ASSERT_EQ(handoff->give_fabric(1, first.data(), room), room);
    auto more = burst(10);
    EXPECT_EQ(handoff->give_fabric(1, more.data(), 10), 0);
    rte_pktmbuf_free_bulk(more.data(), 10);  // the caller's to drop and count
}

TEST_F(Handoff, AWorkerWithFramesWaitingDoesNotSleep) {
    EXPECT_TRUE(handoff->before_sleep(1));
    handoff->after_sleep(1);
    auto pkts = burst(1);
    ASSERT_EQ(handoff->give_fabric(1, pkts.data(), 1), 1);
    EXPECT_FALSE(handoff->before_sleep(1));
}

TEST_F(Handoff, AFrameHandedToASleepingWorkerEndsItsSleep) {
    ASSERT_TRUE(handoff->before_sleep(1));
    auto pkts = burst(1);
    ASSERT_EQ(handoff->give_fabric(1, pkts.data(), 1), 1);  // rings the bell: it "sleeps"
    const uint64_t start = rte_get_timer_cycles();
    handoff->sleep(1, 2'000'000);  // 2 s unless the bell rang
    const double waited = double(rte_get_timer_cycles() - start) / rte_get_timer_hz();
    handoff->after_sleep(1);
    EXPECT_LT(waited, 0.5);
}

TEST_F(Handoff, EngineWorkersAreWokenThroughTheirEngine) {
    int woken = 0;
    handoff->set_waker(0, [&woken] { ++woken; });
    ASSERT_TRUE(handoff->before_sleep(0));
    auto pkts = burst(2);
    ASSERT_EQ(handoff->give_port(0, 1, pkts.data(), 2), 2);
    handoff->after_sleep(0);
    EXPECT_EQ(woken, 1);
    auto more = burst(1);
    ASSERT_EQ(handoff->give_port(0, 1, more.data(), 1), 1);
    EXPECT_EQ(woken, 1) << "an awake worker is not woken";
}

}  // namespace
}  // namespace jakiro
