#include "dataplane/poll_loop/packet_wait.hh"

#include <gtest/gtest.h>

namespace jakiro {
namespace {

constexpr uint64_t hz = 1'000'000'000;  // one cycle per nanosecond
constexpr uint64_t us = hz / 1'000'000;
constexpr uint64_t ms = hz / 1000;
constexpr uint64_t first = packet_wait::first_napping_period_ms * ms;
constexpr uint64_t most = packet_wait::max_napping_period_ms * ms;

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
    EXPECT_TRUE(wait.nap_now(5 * ms + first - 1));
    EXPECT_FALSE(wait.nap_now(5 * ms + first));
}

// A program starting or a compiler's burst takes the core once: the worker is back to
// yielding (10 µs ping-pongs on one host, not 25 µs) within a few scheduler ticks, not a second.
TEST(PacketWait, OnePassingSlowYieldNapsForTicksNotASecond) {
    packet_wait wait(hz);
    ASSERT_TRUE(wait.yielded(0, 4 * ms));
    EXPECT_LE(first, 20 * ms);
    EXPECT_FALSE(wait.nap_now(4 * ms + 20 * ms));
    EXPECT_FALSE(wait.yielded(4 * ms + 20 * ms, 4 * ms + 20 * ms + 10 * us));
    EXPECT_FALSE(wait.nap_now(4 * ms + 21 * ms));
}

// A neighbour that keeps spinning makes every yield tried after a period slow: the periods
// double up to the longest, so that it costs a neighbour's ping one tick a second at most.
TEST(PacketWait, SlowYieldsRightAfterEachPeriodDoubleItUpToTheLongest) {
    packet_wait wait(hz);
    uint64_t now = 0;
    uint64_t expected = first;
    for (int i = 0; i < 12; ++i) {
        ASSERT_TRUE(wait.yielded(now, now + 4 * ms));
        now += 4 * ms;
        EXPECT_EQ(wait.napping_period(), expected) << "slow yield " << i;
        EXPECT_TRUE(wait.nap_now(now + expected - 1));
        now += expected;  // the period ends; the next yield is slow again at once
        ASSERT_FALSE(wait.nap_now(now));
        expected = std::min(expected * 2, most);
    }
    EXPECT_EQ(wait.napping_period(), most);
}

TEST(PacketWait, ACalmAsLongAsTheLastPeriodStartsShortAgain) {
    packet_wait wait(hz);
    ASSERT_TRUE(wait.yielded(0, 4 * ms));
    ASSERT_TRUE(wait.yielded(4 * ms + first, 8 * ms + first));
    ASSERT_EQ(wait.napping_period(), 2 * first);
    const uint64_t ended = 8 * ms + 3 * first;  // the second period's end
    // Calm for the period's length: fast yields only.
    EXPECT_FALSE(wait.yielded(ended + first, ended + first + 10 * us));
    const uint64_t later = ended + 2 * first;
    ASSERT_TRUE(wait.yielded(later, later + 4 * ms));
    EXPECT_EQ(wait.napping_period(), first);
    EXPECT_FALSE(wait.nap_now(later + 4 * ms + first));
}

// Frames and doorbells end the nap themselves: a timer that ends it sooner only wakes the
// worker to find nothing (two to five such wake-ups per RDMA round trip across hosts with 10 µs
// naps).
TEST(PacketWait, ANapThatArrivalsEndLastsTheRestOfTheWindow) {
    packet_wait wait(hz);
    const uint64_t window_end = 1 * ms + 200 * us;
    EXPECT_EQ(wait.nap_us(1 * ms + 30 * us, window_end, true, 10), 170u);
    EXPECT_EQ(wait.nap_us(1 * ms + 195 * us, window_end, true, 10), 10u);  // never shorter
    EXPECT_EQ(wait.nap_us(2 * ms, window_end, true, 10), 10u);             // window over
}

// Where nothing but the timer ends a nap, the worker looks again after the shortest one.
TEST(PacketWait, ANapOnlyATimerEndsIsTheShortest) {
    packet_wait wait(hz);
    EXPECT_EQ(wait.nap_us(1 * ms + 30 * us, 1 * ms + 200 * us, false, 10), 10u);
}

}  // namespace
}  // namespace jakiro
