#include "dataplane/overlay/underlay_neighbors.hh"

#include <gtest/gtest.h>
#include <rte_byteorder.h>

using jakiro::overlay::underlay_neighbors;

namespace {
rte_be32_t host_ip(uint32_t i) {
    return rte_cpu_to_be_32((198u << 24) + (18u << 16) + i);  // numbers only: no network
}
}  // namespace

TEST(UnderlayNeighbors, GrowsPastFourThousandHostsWithOneSlotPerHost) {
    underlay_neighbors neighbors;
    for (uint32_t i = 0; i < 10000; ++i) {
        ASSERT_EQ(neighbors.slot_for(host_ip(i)), i);
    }
    EXPECT_EQ(neighbors.size(), 10000);
    EXPECT_EQ(neighbors.slot_for(host_ip(9000)), 9000);  // known: the same slot
    EXPECT_EQ(neighbors.ip(9999), host_ip(9999));
}

TEST(UnderlayNeighbors, MemoryFollowsTheHostsTalkedTo) {
    underlay_neighbors few, many;
    few.slot_for(host_ip(1));
    for (uint32_t i = 0; i < 5000; ++i) {
        many.slot_for(host_ip(i));
    }
    EXPECT_LT(few.memory_bytes() * 4, many.memory_bytes());
}

TEST(UnderlayNeighbors, LearnsTheMacOfAHostInALaterChunk) {
    underlay_neighbors neighbors;
    for (uint32_t i = 0; i < 3000; ++i) {
        neighbors.slot_for(host_ip(i));
    }
    EXPECT_FALSE(neighbors.mac(2500).has_value());
    rte_ether_addr mac{{0x02, 0, 0, 0, 0x25, 0}};
    neighbors.learn(host_ip(2500), mac);
    ASSERT_TRUE(neighbors.mac(2500).has_value());
    EXPECT_EQ(neighbors.mac(2500)->addr_bytes[4], 0x25);
    neighbors.learn(host_ip(77777), mac);  // not a host we tunnel to: ignored
    EXPECT_EQ(neighbors.size(), 3000);
}

TEST(UnderlayNeighbors, HoldsAMillionHostsAndRefusesTheNext) {
    underlay_neighbors neighbors;
    for (uint32_t i = 0; i < underlay_neighbors::capacity; ++i) {
        ASSERT_NE(neighbors.slot_for(host_ip(i)), underlay_neighbors::none);
    }
    EXPECT_EQ(neighbors.slot_for(host_ip(underlay_neighbors::capacity)), underlay_neighbors::none);
}
