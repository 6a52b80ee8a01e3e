// Security-group rule hits across a live apply: a rule id that a new policy gives to another
// rule starts at zero for it, and a rule that keeps its id keeps its count.

#include "dataplane/control/rule_hit_counts.hh"

#include <gtest/gtest.h>

#include <map>

namespace jakiro {
namespace {

secgroup::rule tcp_port(uint16_t port, int line) {
    secgroup::rule r;
    r.proto = secgroup::protocol::tcp;
    r.ports = {port, port};
    r.remote = secgroup::cidr{0, 0};
    r.line = line;
    return r;
}

struct workers {
    std::map<uint32_t, uint64_t> counted;  // what the workers counted under each id, in all
    rule_hit_counts::counted_fn fn() const {
        return [this](uint32_t id) { return counted.contains(id) ? counted.at(id) : 0; };
    }
};

TEST(RuleHitCounts, ARuleThatTakesAnotherRulesIdStartsAtZero) {
    const std::vector<secgroup::group> before = {
        {"web", "blue", {tcp_port(80, 10), tcp_port(443, 11)}, {}}};
    workers w;
    w.counted = {{0, 5}, {1, 7}};
    rule_hit_counts hits;
    EXPECT_EQ(hits.hits(0, w.counted[0]), 5u);
    EXPECT_EQ(hits.hits(1, w.counted[1]), 7u);

    // A rule written first: every id now names another rule.
    const std::vector<secgroup::group> after = {
        {"web", "blue", {tcp_port(22, 10), tcp_port(80, 11), tcp_port(443, 12)}, {}}};
    hits.renumber(before, after, w.fn());
    EXPECT_EQ(hits.hits(0, w.counted[0]), 0u) << "port 22 never matched";
    EXPECT_EQ(hits.hits(1, w.counted[1]), 0u) << "port 80's old count is not port 443's";
    EXPECT_EQ(hits.hits(2, w.counted[2]), 0u);
    // The new rules count from there.
    w.counted[0] += 3;
    w.counted[1] += 1;
    EXPECT_EQ(hits.hits(0, w.counted[0]), 3u);
    EXPECT_EQ(hits.hits(1, w.counted[1]), 1u);
}

TEST(RuleHitCounts, ARuleThatKeepsItsIdKeepsItsCount) {
    const std::vector<secgroup::group> policy = {
        {"web", "blue", {tcp_port(80, 10)}, {tcp_port(53, 12)}}};
    workers w;
    w.counted = {{0, 5}, {1, 9}};
    rule_hit_counts hits;
    hits.renumber(policy, policy, w.fn());
    EXPECT_EQ(hits.hits(0, w.counted[0]), 5u);
    EXPECT_EQ(hits.hits(1, w.counted[1]), 9u);
    // Only the changed rule starts again: the egress rule's port changes.
    std::vector<secgroup::group> changed = policy;
    changed[0].egress[0].ports = {853, 853};
    hits.renumber(policy, changed, w.fn());
    EXPECT_EQ(hits.hits(0, w.counted[0]), 5u);
    EXPECT_EQ(hits.hits(1, w.counted[1]), 0u);
}

}  // namespace
}  // namespace jakiro
