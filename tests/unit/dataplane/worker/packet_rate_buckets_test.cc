// A vNIC's frames-per-second allowance as the worker reads its port: a burst to start, then
// the rate, each vNIC on its own, and a changed allowance taking effect at once.

#include "dataplane/worker/packet_rate_buckets.hh"

#include "dataplane/config/host_config.hh"

#include <gtest/gtest.h>

namespace jakiro {
namespace {

constexpr uint64_t ms = 1'000'000;  // ns

TEST(PacketRateBuckets, AVnicStartsWithTenMillisecondsOfItsRate) {
    packet_rate_buckets rates;
    EXPECT_EQ(rates.available(0, 100'000, 0), 1000u);
    // A small rate still lets one pass of the worker read its bursts.
    EXPECT_EQ(rates.available(1, 1000, 0), packet_rate_buckets::min_burst);
}

TEST(PacketRateBuckets, OverTimeAVnicReadsItsRateAndNoMore) {
    packet_rate_buckets rates;
    constexpr uint32_t rate = 20'000;
    uint64_t read = 0;
    // Polled every 50 µs for one second, reading all it may each time.
    for (uint64_t t = 0; t <= 1000 * ms; t += ms / 20) {
        const uint32_t may = rates.available(3, rate, t);
        rates.charge(3, may);
        read += may;
    }
    // The first burst (200 frames) and then 20 000 a second.
    EXPECT_GE(read, 20'000u);
    EXPECT_LE(read, 20'000u + 200u + 1u);
}

TEST(PacketRateBuckets, AHeldFaceWaitsForTwoMillisecondsOfItsRateWithinItsBurst) {
    EXPECT_EQ(packet_rate_buckets::release_frames(100'000), 200u);
    EXPECT_EQ(packet_rate_buckets::release_frames(1'000'000), 2000u);
    // A small rate: one pass's reads, which is also its whole burst.
    EXPECT_EQ(packet_rate_buckets::release_frames(1000), packet_rate_buckets::min_burst);
    EXPECT_EQ(packet_rate_buckets::release_frames(20'000), packet_rate_buckets::min_burst);
}

TEST(PacketRateBuckets, AVnicHeldUntilItsReleaseStillReadsItsWholeRate) {
    packet_rate_buckets rates;
    constexpr uint32_t rate = 100'000;
    uint64_t read = 0;
    unsigned releases = 0;
    bool held = false;
    // The worker passes every 50 µs; the vNIC always has frames waiting, so each read empties
    // the bucket and the face is held until release_frames have come back.
    for (uint64_t t = 0; t <= 1000 * ms; t += ms / 20) {
        const uint32_t may = rates.available(5, rate, t);
        if (held && may < packet_rate_buckets::release_frames(rate)) {
            continue;
        }
        releases += held ? 1 : 0;
        rates.charge(5, may);
        read += may;
        held = true;
    }
    EXPECT_GE(read, rate);
    EXPECT_LE(read, rate + 1000u + 1u);
    // About one read every 2 ms, not one per pass.
    EXPECT_LE(releases, 500u);
    EXPECT_GE(releases, 450u);
}

TEST(PacketRateBuckets, AnIdleVnicSavesNoMoreThanOneBurst) {
    packet_rate_buckets rates;
    rates.charge(0, rates.available(0, 100'000, 0));
    EXPECT_EQ(rates.available(0, 100'000, 5 * ms), 500u);
    EXPECT_EQ(rates.available(0, 100'000, 60'000 * ms), 1000u);
}

TEST(PacketRateBuckets, OneVnicAtItsBoundLeavesTheOthersTheirs) {
    packet_rate_buckets rates;
    rates.charge(0, rates.available(0, 10'000, 0));
    EXPECT_EQ(rates.available(0, 10'000, 0), 0u);
    EXPECT_EQ(rates.available(1, 10'000, 0), packet_rate_buckets::min_burst);
}

TEST(PacketRateBuckets, AChangedAllowanceAppliesAtOnce) {
    packet_rate_buckets rates;
    rates.charge(2, rates.available(2, 50'000, 0));
    ASSERT_EQ(rates.available(2, 50'000, 0), 0u);
    // Raised by `apply`: a full bucket of the new rate; lowered again: no more than its burst.
    EXPECT_EQ(rates.available(2, 1'000'000, 1), 10'000u);
    EXPECT_EQ(rates.available(2, 50'000, 2), 500u);
}

TEST(PacketRateBuckets, TheLargestAllowanceDoesNotOverflow) {
    packet_rate_buckets rates;
    const uint32_t top = vnic_limits::max_packet_rate_limit;
    rates.charge(0, rates.available(0, top, 0));
    EXPECT_EQ(rates.available(0, top, 3'600'000 * ms), top / 100);
}

}  // namespace
}  // namespace jakiro
