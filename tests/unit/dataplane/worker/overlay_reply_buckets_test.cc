// Neighbour advertisements into the tunnel per remote host: a burst to start, then the rate,
// each host on its own.

#include "dataplane/worker/overlay_reply_buckets.hh"

#include <gtest/gtest.h>

namespace jakiro {
namespace {

constexpr uint64_t ms = 1'000'000;  // ns
constexpr uint64_t start = 5'000 * ms;

unsigned replies_within(overlay_reply_buckets& buckets, uint16_t host, unsigned asked,
                        uint64_t now_ns) {
    unsigned granted = 0;
    for (unsigned i = 0; i < asked; ++i) {
        granted += buckets.take(host, now_ns) ? 1 : 0;
    }
    return granted;
}

TEST(OverlayReplyBuckets, AFloodingHostGetsItsBurstAndThenItsRate) {
    overlay_reply_buckets buckets;
    EXPECT_EQ(replies_within(buckets, 3, 1000, start), overlay_reply_buckets::burst);
    uint64_t granted = 0;
    // A thousand solicitations every millisecond for one second.
    for (uint64_t t = start + ms; t <= start + 1000 * ms; t += ms) {
        granted += replies_within(buckets, 3, 1000, t);
    }
    EXPECT_EQ(granted, overlay_reply_buckets::per_s);
}

TEST(OverlayReplyBuckets, OneHostAtItsBoundLeavesTheOthersTheirs) {
    overlay_reply_buckets buckets;
    ASSERT_EQ(replies_within(buckets, 1, 1000, start), overlay_reply_buckets::burst);
    EXPECT_FALSE(buckets.take(1, start));
    EXPECT_EQ(replies_within(buckets, 2, 10, start), 10u);
}

TEST(OverlayReplyBuckets, AnIdleHostSavesNoMoreThanOneBurst) {
    overlay_reply_buckets buckets;
    ASSERT_EQ(replies_within(buckets, 0, 1000, start), overlay_reply_buckets::burst);
    EXPECT_EQ(replies_within(buckets, 0, 1000, start + 10 * ms), 10u);
    EXPECT_EQ(replies_within(buckets, 0, 1000, start + 60'000 * ms), overlay_reply_buckets::burst);
}

}  // namespace
}  // namespace jakiro
