// The host reserve of mappings and descriptors: shares from the vNICs' demands, refusals only
// for a vNIC over its share, never past the capacity, live capacity changes.

#include "rnic/queues/host_reserve.hh"

#include <gtest/gtest.h>

namespace jakiro::verbs {
namespace {

constexpr auto maps = host_resource::mappings;

TEST(HostReserve, EveryQuotaThatFitsIsGuaranteedWhole) {
    auto reserve = std::make_shared<host_reserve>(host_amounts{100, 100});
    auto a = vnic_account::open(reserve, {30, 10});
    auto b = vnic_account::open(reserve, {50, 10});
    EXPECT_FALSE(reserve->overcommitted(maps));
    EXPECT_EQ(a->share().mappings, 30u);
    EXPECT_EQ(b->share().mappings, 50u);
    EXPECT_TRUE(a->take(maps, 30));
    EXPECT_TRUE(b->take(maps, 50));
    EXPECT_EQ(reserve->held().mappings, 80u);
    EXPECT_EQ(reserve->demand().mappings, 80u);
}

TEST(HostReserve, OvercommittedSharesAreProportionalAndNeverPassTheCapacity) {
    auto reserve = std::make_shared<host_reserve>(host_amounts{90, 100});
    auto a = vnic_account::open(reserve, {100, 1});
    auto b = vnic_account::open(reserve, {200, 1});
    EXPECT_TRUE(reserve->overcommitted(maps));
    EXPECT_EQ(a->share().mappings, 30u);
    EXPECT_EQ(b->share().mappings, 60u);
    // a wants everything: it gets its share and nothing of b's.
    uint64_t got = 0;
    while (a->take(maps, 1)) {
        ++got;
    }
    EXPECT_EQ(got, 30u);
    EXPECT_EQ(a->refused(maps), 1u);
    for (int i = 0; i < 60; ++i) {
        ASSERT_TRUE(b->take(maps, 1)) << "b within its share, whatever a did: " << i;
    }
    EXPECT_FALSE(b->take(maps, 1)) << "the host is full";
    EXPECT_EQ(reserve->held().mappings, 90u);
}

TEST(HostReserve, WhatNoShareCoversMayBeBorrowedAndGivenBack) {
    // Capacity 100, shares 30 + 30 (the quotas fit): 40 is nobody's, but nobody may pass its
    // quota either, so a vNIC is only ever refused by its own quota here.
    auto reserve = std::make_shared<host_reserve>(host_amounts{100, 100});
    auto a = vnic_account::open(reserve, {30, 1});
    auto b = vnic_account::open(reserve, {30, 1});
    EXPECT_TRUE(a->take(maps, 30));
    EXPECT_TRUE(a->take(maps, 20)) << "beyond its share, from what no share covers";
    EXPECT_TRUE(b->take(maps, 30)) << "b's share was never lent";
    EXPECT_TRUE(a->take(maps, 20));
    EXPECT_FALSE(a->take(maps, 1)) << "the capacity";
    a->give(maps, 70);
    EXPECT_EQ(reserve->held().mappings, 30u);
    EXPECT_TRUE(a->take(maps, 70));
}

TEST(HostReserve, LoweringTheCapacityRefusesGrowthAndTakesNothingBack) {
    auto reserve = std::make_shared<host_reserve>(host_amounts{100, 100});
    auto a = vnic_account::open(reserve, {60, 1});
    auto b = vnic_account::open(reserve, {40, 1});
    ASSERT_TRUE(a->take(maps, 60));
    reserve->set_capacity({50, 100});  // shares now 30 and 20
    EXPECT_EQ(a->held().mappings, 60u) << "nothing taken back";
    EXPECT_FALSE(a->take(maps, 1));
    EXPECT_FALSE(b->take(maps, 1)) << "the host is over its capacity until a lets go";
    a->give(maps, 40);
    EXPECT_TRUE(b->take(maps, 20)) << "b's share, once there is room";
    EXPECT_FALSE(a->take(maps, 11)) << "a is held to its share of 30";
    EXPECT_TRUE(a->take(maps, 10));
}

TEST(HostReserve, AVnicThatLeavesGivesItsShareToTheOthers) {
    auto reserve = std::make_shared<host_reserve>(host_amounts{100, 100});
    auto a = vnic_account::open(reserve, {100, 1});
    {
        auto b = vnic_account::open(reserve, {100, 1});
        EXPECT_EQ(a->share().mappings, 50u);
    }
    EXPECT_EQ(a->share().mappings, 100u);
    a->set_demand({40, 1});
    EXPECT_EQ(a->share().mappings, 40u);
    EXPECT_EQ(reserve->demand().mappings, 40u);
}

TEST(HostReserve, AChargeIsGivenBackWhenItGoes) {
    auto reserve = std::make_shared<host_reserve>(host_amounts{2, 2});
    auto a = vnic_account::open(reserve, {2, 2});
    account_charge first, second, third;
    ASSERT_TRUE(charge(a, host_resource::descriptors, 2, first));
    EXPECT_FALSE(charge(a, host_resource::descriptors, 1, second));
    {
        account_charge moved = std::move(first);
        EXPECT_EQ(a->held().descriptors, 2u);
    }
    EXPECT_EQ(a->held().descriptors, 0u);
    EXPECT_TRUE(charge(a, host_resource::descriptors, 1, third));
    EXPECT_TRUE(charge(nullptr, host_resource::descriptors, 100, second)) << "nothing to charge";
}

TEST(HostReserve, AnMrsChargeCountsTheRegistrationAndItsMapping) {
    auto a = vnic_account::open(nullptr, {10, 10});
    ASSERT_TRUE(a->take_mr(4096));
    ASSERT_TRUE(a->take_mr(100));
    EXPECT_EQ(a->mrs(), 2u);
    EXPECT_EQ(a->mr_bytes(), 4196u);
    EXPECT_EQ(a->held().mappings, 2u);
    a->give_mr(4096);
    EXPECT_EQ(a->mrs(), 1u);
    EXPECT_EQ(a->mr_bytes(), 100u);
    EXPECT_EQ(a->held().mappings, 1u);
}

}  // namespace
}  // namespace jakiro::verbs
