// The super-frame pool's charges: a buffer a face charged to its vNIC stays charged wherever it
// waits and comes off the charge when it comes home to the pool, however it is freed; buffers
// charged to nobody and other vNICs' charges are untouched.

#include "dataplane/vnet_face/buffer_charges.hh"

#include <gtest/gtest.h>

#include <vector>

namespace jakiro::vnet_face {
namespace {

constexpr unsigned pool_buffers = 63;

struct BufferCharges : testing::Test {
    buffer_charges charges;
    rte_mempool* pool = nullptr;
    rte_mempool* plain = nullptr;  // indirect mbufs for clones, as the segmentation uses

    void SetUp() override {
        static unsigned created = 0;
        std::string error;
        const std::string n = std::to_string(created++);
        pool = buffer_charges::create_pool("charged_test_" + n, pool_buffers, 2048, charges, error);
        ASSERT_NE(pool, nullptr) << error;
        plain = rte_pktmbuf_pool_create(("plain_test_" + n).c_str(), 63, 0, 0, 0, SOCKET_ID_ANY);
        ASSERT_NE(plain, nullptr);
    }
    void TearDown() override {
        EXPECT_EQ(rte_mempool_in_use_count(pool), 0u) << "a test left buffers out";
        rte_mempool_free(pool);
        rte_mempool_free(plain);
    }

    std::vector<rte_mbuf*> take(unsigned n, int vnic = -1) {
        std::vector<rte_mbuf*> bufs(n);
        EXPECT_EQ(rte_pktmbuf_alloc_bulk(pool, bufs.data(), n), 0);
        if (vnic >= 0) {
            charges.charge(static_cast<uint16_t>(vnic), bufs.data(), n);
        }
        return bufs;
    }
};

TEST_F(BufferCharges, AChargedBufferStaysChargedUntilItComesHomeHoweverItIsFreed) {
    auto bufs = take(10, 3);
    EXPECT_EQ(charges.held(3), 10u);
    rte_pktmbuf_free(bufs[0]);
    EXPECT_EQ(charges.held(3), 9u);
    rte_pktmbuf_free_bulk(&bufs[1], 4);
    EXPECT_EQ(charges.held(3), 5u);

    // A clone (an indirect mbuf from another pool, as a cut super-frame's segments are): the
    // buffer is home only when the last reference to it goes.
    rte_mbuf* clone = rte_pktmbuf_clone(bufs[5], plain);
    ASSERT_NE(clone, nullptr);
    rte_pktmbuf_free(bufs[5]);
    EXPECT_EQ(charges.held(3), 5u) << "the clone still holds the buffer";
    rte_pktmbuf_free(clone);
    EXPECT_EQ(charges.held(3), 4u);

    // A chain: freeing its head frees every segment.
    ASSERT_EQ(rte_pktmbuf_chain(bufs[6], bufs[7]), 0);
    rte_pktmbuf_free(bufs[6]);
    EXPECT_EQ(charges.held(3), 2u);
    rte_pktmbuf_free_bulk(&bufs[8], 2);
    EXPECT_EQ(charges.held(3), 0u);
}

TEST_F(BufferCharges, AFreeOfManyVnicsBuffersGivesEachItsOwnBackAndNobodyElses) {
    auto nobodys = take(5);
    auto ones = take(5, 1);
    auto twos = take(6, 2);
    auto more_ones = take(2, 1);
    EXPECT_EQ(charges.held(1), 7u);
    EXPECT_EQ(charges.held(2), 6u);
    EXPECT_EQ(charges.held(0), 0u);
    // One bulk free, the vNICs' buffers interleaved with buffers charged to nobody.
    std::vector<rte_mbuf*> mixed;
    for (unsigned i = 0; i < 6; ++i) {
        for (auto* v : {&nobodys, &ones, &twos, &more_ones}) {
            if (i < v->size() && (v != &twos || i < 5)) {
                mixed.push_back((*v)[i]);
            }
        }
    }
    rte_pktmbuf_free_bulk(mixed.data(), static_cast<unsigned>(mixed.size()));
    EXPECT_EQ(charges.held(1), 0u);
    EXPECT_EQ(charges.held(2), 1u);
    rte_pktmbuf_free(twos[5]);
    EXPECT_EQ(charges.held(2), 0u);
}

TEST_F(BufferCharges, ABufferTakenAgainUnchargedOwesItsFormerVnicNothing) {
    auto all = take(pool_buffers, 4);
    rte_pktmbuf_free_bulk(all.data(), pool_buffers);
    EXPECT_EQ(charges.held(4), 0u);
    // The same buffers, now taken by someone who charges nobody (the uplink, the RDMA engine).
    auto again = take(pool_buffers);
    rte_pktmbuf_free_bulk(again.data(), pool_buffers);
    EXPECT_EQ(charges.held(4), 0u);
    auto third = take(8, 4);
    EXPECT_EQ(charges.held(4), 8u) << "the count did not go below zero meanwhile";
    rte_pktmbuf_free_bulk(third.data(), 8);
}

}  // namespace
}  // namespace jakiro::vnet_face
