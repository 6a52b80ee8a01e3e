// An empty CQ poll spins a few times, then naps; a completion starts the spins over.

#include "verbs_shim/idle_backoff.hh"

#include <gtest/gtest.h>

namespace jakiro::verbs_shim {
namespace {

TEST(IdleBackoff, the_first_empty_polls_return_at_once_and_later_ones_nap) {
    idle_backoff b;
    for (uint32_t i = 0; i < idle_backoff::spins; ++i) {
        EXPECT_FALSE(b.nap_after_empty_poll()) << "poll " << i;
    }
    EXPECT_TRUE(b.nap_after_empty_poll());
    EXPECT_TRUE(b.nap_after_empty_poll());
}

TEST(IdleBackoff, a_completion_starts_the_spins_over) {
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
