#include "dataplane/config/host_config.hh"

#include <gtest/gtest.h>

namespace jakiro {
namespace {

TEST(HostConfig, ParsesAndFormatsDottedQuads) {
    EXPECT_EQ(parse_ipv4("198.18.0.1"), 0xc6120001u);
    EXPECT_EQ(format_ipv4(0xc6120001u), "198.18.0.1");
    EXPECT_FALSE(parse_ipv4("198.18.0"));
    EXPECT_FALSE(parse_ipv4("198.18.0.256"));
    EXPECT_FALSE(parse_ipv4("h1"));
}

TEST(HostConfig, PrefixWithoutLengthIsAHostRoute) {
    const auto prefix = parse_ipv4_prefix("198.19.1.1");
    ASSERT_TRUE(prefix);
    EXPECT_EQ(prefix->length, 32);
    EXPECT_FALSE(parse_ipv4_prefix("198.19.1.1/"));
    EXPECT_FALSE(parse_ipv4_prefix("198.19.1.1/24x"));
}

TEST(HostConfig, MacNeedsSixColonSeparatedHexPairs) {
    EXPECT_TRUE(parse_mac("02:00:c6:13:01:01"));
    EXPECT_FALSE(parse_mac("02-00-c6-13-01-01"));
    EXPECT_FALSE(parse_mac("02:00:c6:13:01"));
    EXPECT_FALSE(parse_mac("02:00:c6:13:01:0g"));
    EXPECT_EQ(format_mac(*parse_mac("02:AB:c6:13:01:01")), "02:ab:c6:13:01:01");
}

}  // namespace
}  // namespace jakiro
