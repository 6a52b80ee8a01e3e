#include "rnic/wire/psn.hh"

#include <gtest/gtest.h>

namespace jakiro::rnic {
namespace {

TEST(Psn, AddAndSubtractWrapAt24Bits) {
    EXPECT_EQ(psn_add(0xFFFFFF, 1), 0u);
    EXPECT_EQ(psn_add(0xFFFFF0, 0x20), 0x10u);
    EXPECT_EQ(psn_sub(0, 1), 0xFFFFFFu);
    EXPECT_EQ(psn_sub(0x10, 0x20), 0xFFFFF0u);
    EXPECT_EQ(psn_add(0x123456, 0), 0x123456u);
}

TEST(Psn, DiffTakesTheShortWayRound) {
    EXPECT_EQ(psn_diff(5, 3), 2);
    EXPECT_EQ(psn_diff(3, 5), -2);
    EXPECT_EQ(psn_diff(0, 0xFFFFFF), 1);
    EXPECT_EQ(psn_diff(0xFFFFFF, 0), -1);
    EXPECT_EQ(psn_diff(0x7FFFFF, 0), 0x7FFFFF);
    // Exactly half the space away is "behind": the duplicate half includes 2^23.
    EXPECT_EQ(psn_diff(0x800000, 0), -0x800000);
    EXPECT_EQ(psn_diff(0, 0x800000), -0x800000);
    // Bits above 24 are ignored.
    EXPECT_EQ(psn_diff(0x01000001, 0), 1);
}

TEST(Psn, OrderingAcrossTheWrap) {
    EXPECT_TRUE(psn_before(0xFFFFFF, 0));
    EXPECT_FALSE(psn_before(0, 0xFFFFFF));
    EXPECT_TRUE(psn_before_eq(7, 7));
    EXPECT_FALSE(psn_before(7, 7));
}

TEST(Psn, WindowAcrossTheWrap) {
    // Outstanding PSNs 0xFFFFFE, 0xFFFFFF, 0, 1 -> window [0xFFFFFE, 2)
    EXPECT_TRUE(psn_in_window(0xFFFFFE, 0xFFFFFE, 2));
    EXPECT_TRUE(psn_in_window(0, 0xFFFFFE, 2));
    EXPECT_TRUE(psn_in_window(1, 0xFFFFFE, 2));
    EXPECT_FALSE(psn_in_window(2, 0xFFFFFE, 2));
    EXPECT_FALSE(psn_in_window(0xFFFFFD, 0xFFFFFE, 2));
    EXPECT_FALSE(psn_in_window(5, 5, 5));  // empty window
}

TEST(Psn, ClassifiesRequestsAroundTheExpectedPsn) {
    EXPECT_EQ(classify_request_psn(100, 100), psn_class::expected);
    EXPECT_EQ(classify_request_psn(101, 100), psn_class::ahead);
    EXPECT_EQ(classify_request_psn(99, 100), psn_class::duplicate);
}

TEST(Psn, ClassifiesAcrossTheWrap) {
    EXPECT_EQ(classify_request_psn(0x000001, 0xFFFFFE), psn_class::ahead);
    EXPECT_EQ(classify_request_psn(0xFFFFFF, 0x000001), psn_class::duplicate);
    EXPECT_EQ(classify_request_psn(0x000000, 0xFFFFFF), psn_class::ahead);
    EXPECT_EQ(classify_request_psn(0xFFFFFF, 0x000000), psn_class::duplicate);
}

TEST(Psn, HalfSpaceBoundaries) {
    const uint32_t expected = 0x000010;
    // 2^23 behind is still a duplicate; 2^23 - 1 ahead is the furthest "ahead".
    EXPECT_EQ(classify_request_psn(psn_sub(expected, psn_half_space), expected),
              psn_class::duplicate);
    EXPECT_EQ(classify_request_psn(psn_add(expected, psn_half_space - 1), expected),
              psn_class::ahead);
    // One more step ahead wraps into the duplicate half.
    EXPECT_EQ(classify_request_psn(psn_add(expected, psn_half_space), expected),
              psn_class::duplicate);
}

}  // namespace
}  // namespace jakiro::rnic
