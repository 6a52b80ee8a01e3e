#include "rnic/timers.hh"

#include <gtest/gtest.h>

namespace jakiro::rnic {
namespace {

TEST(Timers, RnrTimerCodesMatchTheSpecTable) {
    EXPECT_EQ(rnr_timer_us(0), 655360u);  // code 0 is the longest, not zero
    EXPECT_EQ(rnr_timer_us(1), 10u);
    EXPECT_EQ(rnr_timer_us(5), 60u);
    EXPECT_EQ(rnr_timer_us(12), 640u);
    EXPECT_EQ(rnr_timer_us(14), 1280u);
    EXPECT_EQ(rnr_timer_us(18), 5120u);
    EXPECT_EQ(rnr_timer_us(24), 40960u);
    EXPECT_EQ(rnr_timer_us(31), 491520u);
    for (uint8_t c = 2; c < 32; ++c) {
        EXPECT_GT(rnr_timer_us(c), rnr_timer_us(c - 1)) << +c;
    }
}

TEST(Timers, LocalAckTimeoutIs4096NanosecondsTimesPowerOfTwo) {
    EXPECT_FALSE(local_ack_timeout_ns(0).has_value());  // 0 = wait for ever
    EXPECT_EQ(local_ack_timeout_ns(1), 8192u);
    EXPECT_EQ(local_ack_timeout_ns(14), 67108864u);  // perftest's default: 67.1 ms
    EXPECT_EQ(local_ack_timeout_ns(31), uint64_t{4096} << 31);
}

}  // namespace
}  // namespace jakiro::rnic
