#include "dataplane/config/config_loader.hh"

#include <gtest/gtest.h>

#include <string>

namespace jakiro {
namespace {

const char* valid_config = R"(host:
  name: h1
  underlay: {port: "net_af_packet0,iface=ul0", ip: 198.18.0.1, mtu: 1500}
vpcs:
  - {name: blue, vni: 100}
  - {name: red, vni: 200}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "net_af_packet1,iface=t1"}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, port: "net_af_packet2,iface=t3"}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2}
  - {vpc: blue, ip: 198.19.1.9, host: 198.18.0.9, mac: "02:00:c6:13:01:09"}
)";

// Replaces the first occurrence of `from` in the valid config.
std::string with(const std::string& from, const std::string& to) {
    std::string text = valid_config;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
}

// Loads `text` and expects exactly one error naming `line` and `field`.
void expect_error(const std::string& text, int line, const std::string& field,
                  const std::string& words) {
    const auto result = load_host_config_text(text, "h1.yaml");
    ASSERT_EQ(result.errors.size(), 1u) << text;
    const auto& error = result.errors[0];
    EXPECT_EQ(error.file, "h1.yaml");
    EXPECT_EQ(error.line, line) << error.to_string();
    EXPECT_EQ(error.field, field) << error.to_string();
    const auto message = error.to_string();
    EXPECT_NE(message.find("h1.yaml:" + std::to_string(line) + ": " + field), std::string::npos)
        << message;
    EXPECT_NE(message.find(words), std::string::npos) << message;
}

TEST(ConfigLoader, AcceptsTheDesignExampleAndKeepsEveryValue) {
    const auto result = load_host_config_text(valid_config, "h1.yaml");
    ASSERT_TRUE(result.ok()) << result.errors[0].to_string();
    const auto& c = result.config;
    EXPECT_EQ(c.name, "h1");
    EXPECT_EQ(format_ipv4(c.underlay.ip), "198.18.0.1");
    EXPECT_EQ(c.tenant_mtu(), 1450u);
    ASSERT_EQ(c.vpcs.size(), 2u);
    EXPECT_EQ(c.vpcs[1].vni, 200u);
    ASSERT_EQ(c.vnics.size(), 2u);
    EXPECT_EQ(format_mac(c.vnics[0].mac), "02:00:c6:13:01:01");
    EXPECT_EQ(c.vnics[0].ip.length, 24);
    ASSERT_EQ(c.peers.size(), 2u);
    EXPECT_FALSE(c.peers[0].mac.has_value());
    ASSERT_TRUE(c.peers[1].mac.has_value());
    EXPECT_EQ(format_mac(*c.peers[1].mac), "02:00:c6:13:01:09");
}

TEST(ConfigLoader, SameAddressInTwoVpcsIsAllowed) {
    // t1 (blue) and t3 (red) both use 198.19.1.1 in the valid config.
    EXPECT_TRUE(load_host_config_text(valid_config, "h1.yaml").ok());
}

TEST(ConfigLoader, UnknownKeyIsAnErrorWithLineAndField) {
    expect_error(with("{name: red, vni: 200}", "{name: red, vni: 200, colour: red}"), 6,
                 "vpcs[1].colour", "unknown key");
}

TEST(ConfigLoader, UnknownTopLevelKeyIsAnError) {
    expect_error(std::string(valid_config) + "routers: []\n", 13, "routers", "unknown key");
}

TEST(ConfigLoader, BadMacNamesTheVnicField) {
    expect_error(with("02:00:c6:13:02:01", "02:00:zz:13:02:01"), 9, "vnics[1].mac",
                 "not a MAC address");
}

TEST(ConfigLoader, MulticastMacIsRejected) {
    expect_error(with("02:00:c6:13:02:01", "01:00:5e:00:00:01"), 9, "vnics[1].mac", "multicast");
}

TEST(ConfigLoader, BadIpPrefixIsRejected) {
    expect_error(
        with("198.19.1.1/24, port: \"net_af_packet2", "198.19.1.1/33, port: \"net_af_packet2"), 9,
        "vnics[1].ip", "not an IPv4 address/prefix");
}

TEST(ConfigLoader, VniOutOfRangeIsRejected) {
    expect_error(with("vni: 200", "vni: 16777216"), 6, "vpcs[1].vni",
                 "not a number in [1, 16777215]");
}

TEST(ConfigLoader, DuplicateVniIsRejected) {
    expect_error(with("vni: 200", "vni: 100"), 6, "vpcs[1].vni", "used by two VPCs");
}

TEST(ConfigLoader, DuplicateVnicNameIsRejected) {
    expect_error(with("{name: t3, vpc: red", "{name: t1, vpc: red"), 9, "vnics[1].name",
                 "duplicate vNIC name");
}

TEST(ConfigLoader, UnknownVpcOfVnicIsRejected) {
    expect_error(with("{name: t3, vpc: red", "{name: t3, vpc: green"), 9, "vnics[1].vpc",
                 "unknown VPC 'green'");
}

TEST(ConfigLoader, TwoOwnersOfOneAddressInAVpcAreRejected) {
    expect_error(with("{vpc: blue, ip: 198.19.1.2,", "{vpc: blue, ip: 198.19.1.1,"), 11,
                 "peers[0].ip", "already used in VPC 'blue'");
}

TEST(ConfigLoader, PeerOnOurOwnUnderlayAddressIsRejected) {
    expect_error(with("host: 198.18.0.2}", "host: 198.18.0.1}"), 11, "peers[0].host",
                 "own underlay address");
}

TEST(ConfigLoader, MissingFieldNamesTheEntryLine) {
    expect_error(with("ip: 198.19.1.1/24, port: \"net_af_packet1,iface=t1\"",
                      "port: \"net_af_packet1,iface=t1\""),
                 8, "vnics[0].ip", "missing");
}

TEST(ConfigLoader, MtuOutsideTheSupportedRangeIsRejected) {
    expect_error(with("mtu: 1500", "mtu: 9200"), 3, "host.underlay.mtu", "not a number");
}

TEST(ConfigLoader, WorkersDefaultToOneAndTakeACountUpToTheLimit) {
    EXPECT_EQ(load_host_config_text(valid_config, "h1.yaml").config.workers, 1u);
    const auto two =
        load_host_config_text(with("  name: h1\n", "  name: h1\n  workers: 2\n"), "h1.yaml");
    ASSERT_TRUE(two.ok()) << two.errors[0].to_string();
    EXPECT_EQ(two.config.workers, 2u);
}

TEST(ConfigLoader, WorkersOutsideOneToTheLimitAreRejected) {
    for (const char* bad : {"0", "17", "two", "-1"}) {
        expect_error(with("  name: h1\n", std::string("  name: h1\n  workers: ") + bad + "\n"), 3,
                     "host.workers", "not a number");
    }
}

TEST(ConfigLoader, RdmaLimitsLowerTheHostsMappingsAndDescriptors) {
    const auto none = load_host_config_text(valid_config, "h1.yaml");
    EXPECT_FALSE(none.config.rdma_limits.mappings.has_value()) << "the kernel's, by default";
    const auto set = load_host_config_text(
        with("  name: h1\n", "  name: h1\n  rdma_limits: {mappings: 3000, descriptors: 500}\n"),
        "h1.yaml");
    ASSERT_TRUE(set.ok()) << set.errors[0].to_string();
    EXPECT_EQ(set.config.rdma_limits.mappings, 3000u);
    EXPECT_EQ(set.config.rdma_limits.descriptors, 500u);
    expect_error(with("  name: h1\n", "  name: h1\n  rdma_limits: {maps: 3}\n"), 3,
                 "host.rdma_limits.maps", "");
}

TEST(ConfigLoader, PortUsedTwiceIsRejected) {
    expect_error(with("net_af_packet2,iface=t3", "net_af_packet1,iface=t3"), 9, "vnics[1].port",
                 "used twice");
}

TEST(ConfigLoader, VnetFacesServeVnicsAndTheUnderlayButNotBothOnOneInterface) {
    const auto vnics =
        load_host_config_text(with("net_af_packet1,iface=t1", "vnet:iface=t1"), "h1.yaml");
    EXPECT_TRUE(vnics.ok());
    const auto uplink =
        load_host_config_text(with("net_af_packet0,iface=ul0", "vnet:iface=ul0"), "h1.yaml");
    EXPECT_TRUE(uplink.ok());
    std::string both = with("net_af_packet1,iface=t1", "vnet:iface=t1");
    both.replace(both.find("net_af_packet0,iface=ul0"), 24, "vnet:iface=t1");
    expect_error(both, 3, "host.underlay.port", "also a vNIC port");
}

TEST(ConfigLoader, YamlSyntaxErrorNamesTheLine) {
    const auto result = load_host_config_text("host:\n  name: [h1\n", "broken.yaml");
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.errors[0].file, "broken.yaml");
    EXPECT_GT(result.errors[0].line, 1);
}

TEST(ConfigLoader, UnreadableFileIsReportedNotThrown) {
    const auto result = load_host_config_file("/nonexistent/jakiro.yaml");
    ASSERT_FALSE(result.ok());
    EXPECT_NE(result.errors[0].to_string().find("/nonexistent/jakiro.yaml"), std::string::npos);
}

TEST(ConfigLoader, ScalarWhereAListBelongsIsAnError) {
    const auto result = load_host_config_text(
        with("vpcs:\n  - {name: blue, vni: 100}\n  - {name: red, vni: 200}\n", "vpcs: blue\n"),
        "h1.yaml");
    ASSERT_FALSE(result.ok());
    // The vNICs and peers then name unknown VPCs too; the first error is the cause.
    EXPECT_EQ(result.errors[0].to_string(), "h1.yaml:4: vpcs: must be a list");
}

}  // namespace
}  // namespace jakiro

namespace jakiro {
namespace {

const char* sg_config = R"(host:
  name: h1
  underlay: {port: "net_af_packet0,iface=ul0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - name: web
    vpc: blue
    ingress:
      - {proto: tcp, ports: 8080, from: 198.19.0.0/16}
      - {proto: rdma, from_group: web}
  - {name: default, vpc: red, ingress: [{proto: any, from_group: default}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "net_af_packet1", security_groups: [web]}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2, security_groups: [web]}
)";

std::string sg_with(const std::string& from, const std::string& to) {
    std::string text = sg_config;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
}

void expect_sg_error(const std::string& text, int line, const std::string& field,
                     const std::string& words) {
    const auto result = load_host_config_text(text, "sg.yaml");
    ASSERT_EQ(result.errors.size(), 1u)
        << (result.errors.empty() ? text : result.errors[0].to_string());
    const auto message = result.errors[0].to_string();
    EXPECT_NE(message.find("sg.yaml:" + std::to_string(line) + ": " + field + ": "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(words), std::string::npos) << message;
}

TEST(SecurityGroupConfig, ValidGroupsLoadWithImplicitEgressAndResolvedRemoteGroups) {
    const auto result = load_host_config_text(sg_config, "sg.yaml");
    ASSERT_TRUE(result.ok()) << result.errors[0].to_string();
    const auto& groups = result.config.security_groups;
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(groups[0].ingress[0].ports.low, 8080);
    EXPECT_EQ(groups[0].ingress[0].line, 9);
    EXPECT_EQ(groups[0].ingress[1].proto, secgroup::protocol::rdma);
    EXPECT_EQ(groups[0].ingress[1].remote_group_index, 0);
    ASSERT_EQ(groups[0].egress.size(), 1u) << "no egress list: allow all egress";
    EXPECT_EQ(groups[0].egress[0].remote->length, 0);
    EXPECT_EQ(result.config.vnics[0].security_groups, std::vector<std::string>{"web"});
}

TEST(SecurityGroupConfig, BadCidrNamesTheRule) {
    expect_sg_error(sg_with("from: 198.19.0.0/16", "from: 198.19.0.0/40"), 9,
                    "security_groups[0].ingress[0].from", "not an IPv4 or IPv6 CIDR");
}

TEST(SecurityGroupConfig, AnIpv6CidrIsARuleForIpv6PeersOnly) {
    std::string text = sg_with("from: 198.19.0.0/16", "from: \"2001:2::/64\"");
    const std::string red = "  - {name: default, vpc: red";
    text.insert(text.find(red),
                "  - {name: out6, vpc: blue, ingress: [], egress: [{proto: rdma, "
                "to: \"2001:2::1:2/128\"}]}\n");
    const auto result = load_host_config_text(text, "sg.yaml");
    ASSERT_TRUE(result.ok()) << result.errors[0].to_string();
    const auto& rule = result.config.security_groups[0].ingress[0];
    ASSERT_TRUE(rule.remote6);
    EXPECT_FALSE(rule.remote) << "an IPv6 CIDR names no IPv4 peer";
    EXPECT_EQ(format_ipv6(rule.remote6->address), "2001:2::");
    EXPECT_EQ(rule.remote6->length, 64);
    const auto& out = result.config.security_groups.at(1).egress.at(0);
    ASSERT_TRUE(out.remote6);
    EXPECT_EQ(format_ipv6(out.remote6->address), "2001:2::1:2");
    EXPECT_EQ(out.remote6->length, 128);
}

TEST(SecurityGroupConfig, ABadIpv6CidrNamesTheRuleAndAnExample) {
    for (const char* bad : {"\"2001:2::/129\"", "\"2001:2::1:1\"", "\"2001:2:::/64\""}) {
        expect_sg_error(sg_with("from: 198.19.0.0/16", std::string("from: ") + bad), 9,
                        "security_groups[0].ingress[0].from",
                        "is not an IPv6 CIDR (e.g. 2001:2::/64)");
    }
}

TEST(SecurityGroupConfig, PortOutOfRangeIsRejected) {
    expect_sg_error(sg_with("ports: 8080", "ports: 70000"), 9,
                    "security_groups[0].ingress[0].ports", "not a port or range");
}

TEST(SecurityGroupConfig, UnknownProtocolIsRejected) {
    expect_sg_error(sg_with("proto: tcp", "proto: sctp"), 9, "security_groups[0].ingress[0].proto",
                    "unknown protocol 'sctp'");
}

TEST(SecurityGroupConfig, UnknownRemoteGroupIsRejected) {
    expect_sg_error(sg_with("from_group: web", "from_group: db"), 10,
                    "security_groups[0].ingress[1].from_group", "unknown security group 'db'");
}

TEST(SecurityGroupConfig, RemoteGroupOfAnotherVpcIsUnknownHere) {
    expect_sg_error(sg_with("from_group: web", "from_group: default"), 10,
                    "security_groups[0].ingress[1].from_group", "in VPC 'blue'");
}

TEST(SecurityGroupConfig, PortsOnIcmpAreRejected) {
    expect_sg_error(sg_with("{proto: tcp, ports: 8080", "{proto: icmp, ports: 8080"), 9,
                    "security_groups[0].ingress[0].ports", "tcp and udp only");
}

TEST(SecurityGroupConfig, RuleNeedsExactlyOneRemote) {
    expect_sg_error(sg_with("{proto: rdma, from_group: web}",
                            "{proto: rdma, from_group: web, from: 0.0.0.0/0}"),
                    10, "security_groups[0].ingress[1]", "exactly one of 'from' and 'from_group'");
}

TEST(SecurityGroupConfig, EgressRuleUsesToNotFrom) {
    const auto result =
        load_host_config_text(sg_with("      - {proto: rdma, from_group: web}\n",
                                      "      - {proto: rdma, from_group: web}\n    egress:\n      "
                                      "- {proto: any, from: 0.0.0.0/0}\n"),
                              "sg.yaml");
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.errors[0].to_string(),
              "sg.yaml:12: security_groups[0].egress[0].from: unknown key");
}

TEST(SecurityGroupConfig, VnicGroupMustExistInItsVpc) {
    expect_sg_error(sg_with("security_groups: [web]}\npeers", "security_groups: [default]}\npeers"),
                    13, "vnics[0].security_groups[0]",
                    "unknown security group 'default' in VPC 'blue'");
}

TEST(SecurityGroupConfig, SameGroupNameInTwoVpcsIsFineTwiceInOneIsNot) {
    const std::string blue_default = "  - {name: default, vpc: blue, ingress: []}\nvnics:";
    EXPECT_TRUE(load_host_config_text(sg_with("vnics:", blue_default), "sg.yaml").ok());
    expect_sg_error(sg_with("vnics:", "  - {name: web, vpc: blue}\nvnics:"), 12,
                    "security_groups[2].name", "duplicate security group 'web' in VPC 'blue'");
}

TEST(MetricsConfig, ListenAddressIsParsedAndOptional) {
    EXPECT_FALSE(load_host_config_text(valid_config, "h1.yaml").config.metrics.has_value());
    const auto result = load_host_config_text(
        with("  name: h1\n", "  name: h1\n  metrics: {listen: 127.0.0.1:9417}\n"), "h1.yaml");
    ASSERT_TRUE(result.ok()) << result.errors[0].to_string();
    ASSERT_TRUE(result.config.metrics.has_value());
    EXPECT_EQ(result.config.metrics->ip, 0x7f000001u);
    EXPECT_EQ(result.config.metrics->port, 9417);
    EXPECT_EQ(result.config.metrics->text(), "127.0.0.1:9417");
}

TEST(MetricsConfig, BadListenAddressNamesLineAndField) {
    for (const char* bad : {"127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "localhost:9417",
                            "127.0.0.1:94x7", ":9417"}) {
        expect_error(
            with("  name: h1\n", std::string("  name: h1\n  metrics: {listen: \"") + bad + "\"}\n"),
            3, "host.metrics.listen", "is not ADDR:PORT");
    }
    expect_error(with("  name: h1\n", "  name: h1\n  metrics: {listen: 127.0.0.1:9417, tls: 1}\n"),
                 3, "host.metrics.tls", "unknown key");
    expect_error(with("  name: h1\n", "  name: h1\n  metrics: {}\n"), 3, "host.metrics.listen",
                 "missing");
}

}  // namespace
}  // namespace jakiro
