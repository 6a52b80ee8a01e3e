#include "qos/token_bucket.hh"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "qos/config.hh"

namespace jakiro::qos {
namespace {

constexpr uint64_t ms = 1'000'000;
constexpr uint64_t s = 1'000'000'000;

TEST(TokenBucket, StartsFullAndRefillsAtItsRate) {
    token_bucket b(8'000'000'000, 10'000, 0);  // 1 GB/s = 1 byte per ns
    EXPECT_EQ(b.available(), 10'000u);
    b.consume(10'000);
    EXPECT_EQ(b.available(), 0u);
    EXPECT_FALSE(b.has_tokens());
    b.refill(1'234);
    EXPECT_EQ(b.tokens(), 1'234);
    b.refill(1'000'000);
    EXPECT_EQ(b.tokens(), 10'000) << "capped at the burst";
}

TEST(TokenBucket, FractionalBytesAccumulateExactly) {
    token_bucket b(1, 1, 0);  // 1 bit/s: one byte every 8 s
    b.consume(1);
    for (uint64_t t = 1; t < 8; ++t) {
        b.refill(t * s);
        EXPECT_EQ(b.units(), static_cast<int64_t>(t * 1'000'000'000)) << t;
        EXPECT_EQ(b.available(), 0u) << t;
    }
    b.refill(8 * s);
    EXPECT_EQ(b.available(), 1u);
}

// Integer token units: after any sequence of refills the bucket has gained exactly
// rate × elapsed / 8e9 bytes. Checked to the unit over 1000 simulated seconds of random poll
// gaps at an awkward rate, draining everything each poll.
TEST(TokenBucket, DoesNotDriftOverLongRuns) {
    for (uint64_t rate :
         {uint64_t{999'999'937}, uint64_t{123'456'789'011}, uint64_t{100'000'000}}) {
        // Up to a second of traffic: never reached within these gaps, so never capped.
        const uint64_t burst = std::min(rate / 8, max_burst_bytes);
        token_bucket b(rate, burst, 0);
        b.consume(burst);  // a full bucket gains nothing: start empty
        unsigned __int128 consumed_units = static_cast<unsigned __int128>(burst) * units_per_byte;
        std::mt19937_64 rng(rate);
        std::uniform_int_distribution<uint64_t> gap(1, 2 * ms);
        uint64_t now = 0;
        while (now < 1000 * s) {
            now += gap(rng);
            b.refill(now);
            const uint64_t n = b.available();
            b.consume(n);
            consumed_units += static_cast<unsigned __int128>(n) * units_per_byte;
        }
        const unsigned __int128 expected = static_cast<unsigned __int128>(burst) * units_per_byte +
                                           static_cast<unsigned __int128>(rate) * now;
        EXPECT_TRUE(consumed_units + static_cast<uint64_t>(b.units()) == expected) << rate;
        EXPECT_LT(b.units(), units_per_byte);  // less than one byte left over
    }
}

TEST(TokenBucket, DebtIsBoundedByTheBurstAndRepaidAtTheRate) {
    token_bucket b(8'000'000'000, 1'000, 0);
    b.consume(5'000);
    EXPECT_EQ(b.tokens(), -1'000) << "debt floor is one burst";
    b.refill(999);
    EXPECT_FALSE(b.has_tokens());
    b.refill(1'001);
    EXPECT_EQ(b.tokens(), 1);
    EXPECT_TRUE(b.fits(1'000, 999));  // 1 - 1000 = -999
    EXPECT_FALSE(b.fits(1'001, 999));
}

TEST(TokenBucket, MaxDebtCanBeDeeperThanTheBurst) {
    token_bucket b(8'000'000'000, 1'000, 0);
    b.set_max_debt(4'000);
    b.consume(10'000);
    EXPECT_EQ(b.tokens(), -4'000);
    b.refill(5'000);
    EXPECT_EQ(b.tokens(), 1'000);
}

TEST(TokenBucket, RefundGivesBackUpToTheBurst) {
    token_bucket b(8'000'000'000, 1'000, 0);
    b.consume(600);
    b.refund(400);
    EXPECT_EQ(b.tokens(), 800);
    b.refund(10'000);
    EXPECT_EQ(b.tokens(), 1'000);
}

TEST(TokenBucket, LiveRateChangeCreditsTheOldRateUpToNow) {
    token_bucket b(8'000'000'000, 100'000, 0);  // 1 byte/ns
    b.consume(100'000);
    b.set(16'000'000'000, 100'000, 1'000);  // 1000 ns at 1 B/ns, then 2 B/ns
    EXPECT_EQ(b.tokens(), 1'000);
    b.refill(2'000);
    EXPECT_EQ(b.tokens(), 3'000);
    b.set(16'000'000'000, 500, 2'000);  // a smaller burst clips what is held
    EXPECT_EQ(b.tokens(), 500);
}

TEST(TokenBucket, TimeGoingBackwardsChangesNothing) {
    token_bucket b(8'000'000'000, 10'000, 5'000);
    b.consume(10'000);
    b.refill(4'000);
    EXPECT_EQ(b.tokens(), 0);
    b.refill(6'000);
    EXPECT_EQ(b.tokens(), 1'000);
}

TEST(TokenBucket, NsUntilTokensPredictsTheRefill) {
    token_bucket b(8'000'000'000, 10'000, 0);
    EXPECT_EQ(b.ns_until_tokens(), 0u);
    b.consume(12'000);  // 2000 bytes of debt
    const uint64_t wait = b.ns_until_tokens();
    b.refill(wait - 1);
    EXPECT_FALSE(b.has_tokens());
    b.refill(wait);
    EXPECT_TRUE(b.has_tokens());
    EXPECT_EQ(token_bucket().ns_until_tokens(), ~uint64_t{0});
}

TEST(TokenBucket, NsUntilTokensFromNowCreditsTheTimeSinceTheLastRefill) {
    token_bucket b(8'000'000'000, 10'000, 0);
    b.consume(12'000);
    const uint64_t wait = b.ns_until_tokens();
    EXPECT_EQ(b.ns_until_tokens(0), wait);
    EXPECT_EQ(b.ns_until_tokens(wait / 2), wait - wait / 2);
    EXPECT_EQ(b.ns_until_tokens(wait + 5), 0u);
}

TEST(TokenBucket, ExtremeRatesAndGapsDoNotOverflow) {
    token_bucket b(max_rate_bps, max_burst_bytes, 0);
    b.consume(~uint64_t{0});
    EXPECT_EQ(b.tokens(), -static_cast<int64_t>(max_burst_bytes));
    b.refill(~uint64_t{0} - 1);
    EXPECT_EQ(b.available(), max_burst_bytes);
    token_bucket slow(1, 1, 0);
    slow.consume(1);
    slow.refill(~uint64_t{0});
    EXPECT_EQ(slow.available(), 1u);
}

TEST(TokenBucket, AResumedBucketContinuesTheOneItWasTakenFrom) {
    token_bucket before(8'000'000'000, 10'000, 0);
    before.consume(10'000 + 4'000);                    // 4 000 bytes in debt at t = 0
    token_bucket after(8'000'000'000, 10'000, 3'000);  // a new bucket: full
    after.resume(before.state(), 3'000);
    after.refill(3'000);
    EXPECT_EQ(after.tokens(), -1'000) << "the debt, less what 3 000 ns refilled";
    after.refill(100'000);
    EXPECT_EQ(after.tokens(), 10'000);
}

TEST(TokenBucket, AResumedBucketKeepsToItsOwnBurstAndTheCurrentTime) {
    token_bucket before(8'000'000'000, 10'000, 0);
    token_bucket smaller(8'000'000'000, 2'000, 0);
    smaller.resume(before.state(), 0);
    EXPECT_EQ(smaller.tokens(), 2'000) << "clipped to the new burst";
    before.consume(50'000);  // at most one burst of debt
    smaller.resume(before.state(), 0);
    EXPECT_EQ(smaller.tokens(), -2'000) << "and to its deepest debt";
    // A time beyond now (a corrupt state) cannot keep the bucket from refilling.
    smaller.resume({-2'000 * units_per_byte, ~uint64_t{0}}, 5'000);
    smaller.refill(6'000);
    EXPECT_EQ(smaller.tokens(), -1'000);
}

}  // namespace
}  // namespace jakiro::qos
