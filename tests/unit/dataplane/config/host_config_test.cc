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

TEST(HostConfig, ParsesIpv6InNetworkOrderAndFormatsItAsRfc5952) {
    const auto address = parse_ipv6("2001:0002:0:0::1:1");
    ASSERT_TRUE(address);
    const ipv6_address expected{0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1};
    EXPECT_EQ(*address, expected);
    EXPECT_EQ(format_ipv6(*address), "2001:2::1:1");
    EXPECT_FALSE(parse_ipv6("2001:2::1::1"));
    EXPECT_FALSE(parse_ipv6("2001:2::1:g"));
    EXPECT_FALSE(parse_ipv6("198.19.1.1"));
}

TEST(HostConfig, Ipv6PrefixWithoutLengthIsOneAddressAndLengthStopsAt128) {
    const auto one = parse_ipv6_prefix("2001:2::1:1");
    ASSERT_TRUE(one);
    EXPECT_EQ(one->length, 128);
    const auto subnet = parse_ipv6_prefix("2001:2::1:1/64");
    ASSERT_TRUE(subnet);
    EXPECT_EQ(subnet->length, 64);
    EXPECT_EQ(subnet->address, one->address);
    EXPECT_FALSE(parse_ipv6_prefix("2001:2::1:1/129"));
    EXPECT_FALSE(parse_ipv6_prefix("2001:2::1:1/"));
    EXPECT_FALSE(parse_ipv6_prefix("2001:2::1:1/64x"));
}

TEST(HostConfig, AVnicIpv6AddressIsGlobalOrUniqueLocalUnicast) {
    auto problem = [](const std::string& text) {
        return ipv6_vnic_address_problem(*parse_ipv6_prefix(text));
    };
    EXPECT_EQ(problem("2001:2::1:1/64"), "");
    EXPECT_EQ(problem("fd00:2::1/64"), "");
    EXPECT_EQ(problem("2001:2::1:0/64"), "");  // host bits 0:0:1:0, not all zero
    EXPECT_EQ(problem("2001:2::/128"), "");    // one address: no subnet to be the router of
    EXPECT_NE(problem("::/64").find("unspecified"), std::string::npos);
    EXPECT_NE(problem("::1/128").find("loopback"), std::string::npos);
    EXPECT_NE(problem("ff02::1/64").find("multicast"), std::string::npos);
    EXPECT_NE(problem("fe80::1/64").find("link-local"), std::string::npos);
    EXPECT_NE(problem("::ffff:198.19.1.1/128").find("IPv4-mapped"), std::string::npos);
    EXPECT_NE(problem("2001:2::/64").find("subnet-router anycast"), std::string::npos);
    EXPECT_NE(problem("2001:2::1:1/0").find("prefix length 0"), std::string::npos);
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
