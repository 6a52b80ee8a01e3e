// An empty CQ poll spins a few times, then naps; a completion starts the spins over.

#include "verbs_shim/idle_backoff.hh"

#include <gtest/gtest.h>

namespace jakiro::verbs_shim {
namespace {

TEST(IdleBackoff, TheFirstEmptyPollsReturnAtOnceAndLaterOnesNap) {
    idle_backoff b;
    for (uint32_t i = 0; i < idle_backoff::spins; ++i) {
        EXPECT_FALSE(b.nap_after_empty_poll()) << "poll " << i;
    }
    EXPECT_TRUE(b.nap_after_empty_poll());
    EXPECT_TRUE(b.nap_after_empty_poll());
}

TEST(IdleBackoff, ACompletionStartsTheSpinsOver) {
    idle_backoff b;
    for (uint32_t i = 0; i <= idle_backoff::spins; ++i) {
        b.nap_after_empty_poll();
    }
    ASSERT_TRUE(b.nap_after_empty_poll());
    b.on_progress();
    for (uint32_t i = 0; i < idle_backoff::spins; ++i) {
        EXPECT_FALSE(b.nap_after_empty_poll()) << "poll " << i << " after the completion";
    }
    EXPECT_TRUE(b.nap_after_empty_poll());
}

}  // namespace
}  // namespace jakiro::verbs_shim
