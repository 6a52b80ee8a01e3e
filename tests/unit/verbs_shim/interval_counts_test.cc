// The per-byte counts behind MR registration: overlapping adds and removes, clipping, merging.

#include "verbs_shim/interval_counts.hh"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

namespace jakiro::verbs_shim {
namespace {

using run = std::tuple<uint64_t, uint64_t, uint32_t>;

std::vector<run> runs_of(const interval_counts& c) {
    std::vector<run> out;
    c.for_each([&](uint64_t s, uint64_t e, uint32_t n) { out.emplace_back(s, e, n); });
    return out;
}

TEST(IntervalCounts, OverlappingAddsCountEachByte) {
    interval_counts c;
    c.add(0, 100, 1);
    c.add(50, 150, 1);
    EXPECT_EQ(runs_of(c), (std::vector<run>{{0, 50, 1}, {50, 100, 2}, {100, 150, 1}}));
    EXPECT_EQ(c.at(0), 1u);
    EXPECT_EQ(c.at(75), 2u);
    EXPECT_EQ(c.at(149), 1u);
    EXPECT_EQ(c.at(150), 0u);
}

TEST(IntervalCounts, RemovingDropsRunsThatReachZeroAndMergesEqualNeighbours) {
    interval_counts c;
    c.add(0, 100, 1);
    c.add(50, 150, 1);
    c.add(0, 100, -1);
    EXPECT_EQ(runs_of(c), (std::vector<run>{{50, 150, 1}}));
    c.add(50, 150, -1);
    EXPECT_TRUE(c.empty());
}

TEST(IntervalCounts, RemovingWhatWasNeverAddedChangesNothing) {
    interval_counts c;
    c.add(10, 20, 1);
    c.add(0, 10, -1);
    c.add(30, 40, -1);
    EXPECT_EQ(runs_of(c), (std::vector<run>{{10, 20, 1}}));
}

TEST(IntervalCounts, AddFillsGapsBetweenRuns) {
    interval_counts c;
    c.add(0, 10, 1);
    c.add(20, 30, 1);
    c.add(5, 25, 1);
    EXPECT_EQ(runs_of(c),
              (std::vector<run>{{0, 5, 1}, {5, 10, 2}, {10, 20, 1}, {20, 25, 2}, {25, 30, 1}}));
}

TEST(IntervalCounts, SetOverwritesAndZeroErases) {
    interval_counts c;
    c.add(0, 100, 3);
    c.set(40, 60, 0);
    EXPECT_EQ(runs_of(c), (std::vector<run>{{0, 40, 3}, {60, 100, 3}}));
    c.set(30, 70, 3);
    EXPECT_EQ(runs_of(c), (std::vector<run>{{0, 100, 3}})) << "merged back into one run";
}

TEST(IntervalCounts, ForEachClipsToTheAskedRange) {
    interval_counts c;
    c.add(0, 100, 1);
    c.add(200, 300, 2);
    std::vector<run> seen;
    c.for_each(50, 250, [&](uint64_t s, uint64_t e, uint32_t n) { seen.emplace_back(s, e, n); });
    EXPECT_EQ(seen, (std::vector<run>{{50, 100, 1}, {200, 250, 2}}));
}

TEST(IntervalCounts, WorksAtTheTopOfTheAddressSpace) {
    interval_counts c;
    const uint64_t top = ~uint64_t{0};
    c.add(top - 4096, top, 1);
    EXPECT_EQ(c.at(top - 1), 1u);
    c.add(top - 4096, top, -1);
    EXPECT_TRUE(c.empty());
}

}  // namespace
}  // namespace jakiro::verbs_shim
