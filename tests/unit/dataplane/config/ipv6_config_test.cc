// vnics[].ip6 and peers[].ip6: a dual-stack vNIC's IPv6 address, checked as its IPv4 one is.

#include <gtest/gtest.h>

#include <string>

#include "dataplane/config/config_loader.hh"

namespace jakiro {
namespace {

// t1 and t3 share their addresses, in two VPCs, as the test bed's blue and red tenants do.
const char* dual_stack = R"(host:
  name: h1
  underlay: {port: "net_af_packet0,iface=ul0", ip: 198.18.0.1}
vpcs:
  - {name: blue, vni: 100}
  - {name: red, vni: 200}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_af_packet1,iface=t1"}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_af_packet2,iface=t3"}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, port: "net_af_packet3,iface=t5"}
peers:
  - {vpc: blue, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2}
)";

std::string with(const std::string& from, const std::string& to) {
    std::string text = dual_stack;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
}

void expect_error(const std::string& text, int line, const std::string& field,
                  const std::string& words) {
    const auto result = load_host_config_text(text, "h1.yaml");
    ASSERT_EQ(result.errors.size(), 1u) << text;
    const auto message = result.errors[0].to_string();
    EXPECT_EQ(result.errors[0].line, line) << message;
    EXPECT_EQ(result.errors[0].field, field) << message;
    EXPECT_NE(message.find(words), std::string::npos) << message;
}

TEST(Ipv6Config, AVnicKeepsItsAddressAndPrefixLengthAndAPeerItsAddress) {
    const auto result = load_host_config_text(dual_stack, "h1.yaml");
    ASSERT_TRUE(result.ok()) << result.errors[0].to_string();
    const auto& c = result.config;
    ASSERT_TRUE(c.vnics[0].ip6);
    EXPECT_EQ(format_ipv6(c.vnics[0].ip6->address), "2001:2::1:1");
    EXPECT_EQ(c.vnics[0].ip6->length, 64);
    EXPECT_EQ(c.vnics[0].ip6->address[0], 0x20);  // network order
    EXPECT_EQ(c.vnics[0].ip6->address[15], 0x01);
    ASSERT_TRUE(c.peers[0].ip6);
    EXPECT_EQ(format_ipv6(*c.peers[0].ip6), "2001:2::1:2");
}

TEST(Ipv6Config, AVnicWithoutIp6IsIpv4Only) {
    const auto result = load_host_config_text(dual_stack, "h1.yaml");
    ASSERT_TRUE(result.ok());
    EXPECT_FALSE(result.config.vnics[2].ip6);
}

TEST(Ipv6Config, TheSameIpv6AddressInTwoVpcsIsAllowed) {
    const auto result = load_host_config_text(dual_stack, "h1.yaml");
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result.config.vnics[0].ip6, result.config.vnics[1].ip6);
}

TEST(Ipv6Config, AMalformedAddressNamesTheFieldAndAnExample) {
    expect_error(with("ip6: 2001:2::1:1/64, port: \"net_af_packet1",
                      "ip6: 2001:2::1::1/64, port: "
                      "\"net_af_packet1"),
                 8, "vnics[0].ip6", "is not an IPv6 address/prefix (e.g. 2001:2::1:1/64)");
    expect_error(with("ip6: 2001:2::1:1/64, port: \"net_af_packet1",
                      "ip6: 2001:2::1:1/129, port: "
                      "\"net_af_packet1"),
                 8, "vnics[0].ip6", "is not an IPv6 address/prefix");
    expect_error(with("ip6: 2001:2::1:1/64, port: \"net_af_packet1",
                      "ip6: 198.19.1.1/24, port: "
                      "\"net_af_packet1"),
                 8, "vnics[0].ip6", "is not an IPv6 address/prefix");
}

TEST(Ipv6Config, AnAddressThatIsNotUnicastIsRefusedWithItsReason) {
    const std::string t1 = "ip6: 2001:2::1:1/64, port: \"net_af_packet1";
    expect_error(with(t1, "ip6: ff02::1/64, port: \"net_af_packet1"), 8, "vnics[0].ip6",
                 "not a unicast address a vNIC may have: is a multicast address");
    expect_error(with(t1, "ip6: fe80::1/64, port: \"net_af_packet1"), 8, "vnics[0].ip6",
                 "link-local");
    expect_error(with(t1, "ip6: \"::\", port: \"net_af_packet1"), 8, "vnics[0].ip6", "unspecified");
    expect_error(with(t1, "ip6: \"::1\", port: \"net_af_packet1"), 8, "vnics[0].ip6", "loopback");
    expect_error(with(t1, "ip6: \"::ffff:198.19.1.1\", port: \"net_af_packet1"), 8, "vnics[0].ip6",
                 "IPv4-mapped");
    expect_error(with(t1, "ip6: 2001:2::/64, port: \"net_af_packet1"), 8, "vnics[0].ip6",
                 "subnet-router anycast");
}

TEST(Ipv6Config, TwoVnicsOfAVpcWithOneIpv6AddressAreRefused) {
    expect_error(with("ip: 198.19.1.3/24, port", "ip: 198.19.1.3/24, ip6: 2001:2::1:1/64, port"),
                 10, "vnics[2].ip6", "address 2001:2::1:1 already used in VPC 'blue'");
}

TEST(Ipv6Config, APeerClaimingALocalVnicsIpv6AddressIsRefused) {
    expect_error(with("ip6: 2001:2::1:2, host", "ip6: \"2001:2:0::1:1\", host"), 12, "peers[0].ip6",
                 "address 2001:2::1:1 already used in VPC 'blue'");
}

TEST(Ipv6Config, APeersIp6IsOneAddressWithoutAPrefix) {
    expect_error(with("ip6: 2001:2::1:2, host", "ip6: 2001:2::1:2/64, host"), 12, "peers[0].ip6",
                 "is not an IPv6 address (e.g. 2001:2::1:2)");
}

TEST(Ipv6Config, ClusterVnicRecordsCarryIp6) {
    const auto result = load_cluster_config_text(R"(hosts:
  - {name: h1, underlay_ip: 198.18.0.1}
vpcs:
  - {name: blue, vni: 100}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, host: h1}
  - {name: t2, vpc: blue, mac: "02:00:c6:13:01:02", ip: 198.19.1.2/24, ip6: 2001:2::1:1/64, host: h1}
)",
                                                 "cluster.yaml");
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_EQ(result.errors[0].field, "vnics[1].ip6");
    EXPECT_NE(result.errors[0].message.find("already used in VPC 'blue'"), std::string::npos);
}

}  // namespace
}  // namespace jakiro
