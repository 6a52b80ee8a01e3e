#include "poll_loop/packet_wait.hh"

#include <gtest/gtest.h>

namespace jakiro {
namespace {

constexpr uint64_t hz = 1'000'000'000;  // one cycle per nanosecond
constexpr uint64_t us = hz / 1'000'000;
constexpr uint64_t ms = hz / 1000;

TEST(PacketWait, YieldsWhileTheCoreComesBackSoon) {
    packet_wait wait(hz);
    EXPECT_FALSE(wait.nap_now(0));
    EXPECT_FALSE(wait.yielded(0, 20 * us));
    EXPECT_FALSE(wait.yielded(100 * us, 350 * us));  // exactly the bound is not slow
    EXPECT_FALSE(wait.nap_now(400 * us));
}

TEST(PacketWait, NapsForAPeriodAfterAYieldThatLostTheCoreForATick) {
    packet_wait wait(hz);
    EXPECT_TRUE(wait.yielded(1 * ms, 5 * ms));  // a spinning thread held it until the tick
    EXPECT_TRUE(wait.nap_now(5 * ms));
    EXPECT_TRUE(wait.nap_now(5 * ms + packet_wait::napping_period_ms * ms - 1));
    EXPECT_FALSE(wait.nap_now(5 * ms + packet_wait::napping_period_ms * ms));
}

TEST(PacketWait, AnotherSlowYieldAfterThePeriodNapsAgain) {
    packet_wait wait(hz);
    ASSERT_TRUE(wait.yielded(0, 4 * ms));
    const uint64_t later = 4 * ms + packet_wait::napping_period_ms * ms;
    ASSERT_FALSE(wait.nap_now(later));
    EXPECT_TRUE(wait.yielded(later, later + 3 * ms));
    EXPECT_TRUE(wait.nap_now(later + 3 * ms + 1));
}

}  // namespace
}  // namespace jakiro
