#include "dataplane/overlay/sealing/replay_window.hh"

#include <gtest/gtest.h>

namespace jakiro::overlay::sealing {
namespace {

TEST(ReplayWindowTest, EachSequenceNumberIsAcceptedOnce) {
    replay_window w;
    for (uint64_t s = 1; s <= 10'000; ++s) {
        ASSERT_TRUE(w.check(s));
        ASSERT_TRUE(w.accept(s));
        ASSERT_FALSE(w.check(s));
        ASSERT_FALSE(w.accept(s));
    }
}

TEST(ReplayWindowTest, ReorderingInsideTheWindowIsAcceptedOnce) {
    replay_window w;
    ASSERT_TRUE(w.accept(5000));
    for (uint64_t s = 5000 - replay_window::window + 1; s < 5000; s += 7) {
        EXPECT_TRUE(w.accept(s)) << s;
        EXPECT_FALSE(w.accept(s)) << s;
    }
    EXPECT_FALSE(w.check(5000 - replay_window::window));
    EXPECT_FALSE(w.accept(5000 - replay_window::window));
}

TEST(ReplayWindowTest, AJumpForgetsNothingItMustRemember) {
    replay_window w;
    ASSERT_TRUE(w.accept(63));
    // A jump of less than the bitmap that lands in the same word slot as the old top: the
    // bits of the old numbers must not make the new ones look seen.
    ASSERT_TRUE(w.accept(64 * 64));
    for (uint64_t s = 64 * 64 + 1; s < 64 * 65; ++s) {
        EXPECT_TRUE(w.check(s)) << s;
    }
    EXPECT_FALSE(w.check(63));
    ASSERT_TRUE(w.accept(uint64_t{1} << 40));
    EXPECT_TRUE(w.accept((uint64_t{1} << 40) - 1));
    EXPECT_FALSE(w.accept(64 * 64));
}

TEST(ReplayWindowTest, CheckNeverMovesTheWindow) {
    replay_window w;
    ASSERT_TRUE(w.accept(10));
    EXPECT_TRUE(w.check(1'000'000));  // a forged number far ahead, not yet authenticated
    EXPECT_TRUE(w.accept(11));
    EXPECT_EQ(w.top(), 11u);
}

}  // namespace
}  // namespace jakiro::overlay::sealing
