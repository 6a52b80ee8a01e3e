// How the plugin edits a host YAML: its vNIC lines go into vnics: and come out again, and
// everything the operator wrote (comments, order, other vNICs) stays as it was.

#include "cni/host_file_registry.hh"

#include <gtest/gtest.h>

#include "dataplane/config/config_loader.hh"

namespace jakiro::cni {
namespace {

const std::string host_yaml = R"(# h1, written by hand
host:
  name: h1
  underlay: {port: "vnet:tap=ultap", ip: 198.18.0.1, mtu: 1500}
vpcs:
  - {name: blue, vni: 100}   # the tenant's VPC
security_groups:
  - {name: default, vpc: blue, ingress: [{proto: any, from_group: default}]}
vnics:
    # static tenants
    - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "vnet:iface=t1"}
peers: []
)";

vnic_entry entry(const std::string& name, uint32_t ip) {
    vnic_entry e;
    e.name = name;
    e.vpc = "blue";
    e.mac = "02:64:c6:13:01:" + std::to_string(ip & 0xff).substr(0, 2);
    e.ip = ip;
    e.length = 24;
    e.security_groups = {"default"};
    e.owner = "jakiro-blue c0ffee eth0";
    return e;
}

TEST(HostFileRegistry, AddedLineIsAValidVnicOfTheFile) {
    std::string error;
    const auto text =
        with_vnic_line(host_yaml, vnic_line(entry("jc01", 0xc6130164), "vnet:iface={name}"), error);
    ASSERT_TRUE(text) << error;
    const auto loaded = load_host_config_text(*text, "h1.yaml");
    ASSERT_TRUE(loaded.ok()) << loaded.errors[0].to_string() << "\n" << *text;
    ASSERT_EQ(loaded.config.vnics.size(), 2u);
    const auto& v =
        loaded.config.vnics[0].name == "jc01" ? loaded.config.vnics[0] : loaded.config.vnics[1];
    EXPECT_EQ(v.port, "vnet:iface=jc01");
    EXPECT_EQ(format_ipv4(v.ip.address), "198.19.1.100");
    EXPECT_NE(text->find("# h1, written by hand"), std::string::npos);
    EXPECT_NE(text->find("# the tenant's VPC"), std::string::npos);
    EXPECT_NE(text->find("# jakiro-cni jakiro-blue c0ffee eth0"), std::string::npos);
}

TEST(HostFileRegistry, RemovingTheLineGivesBackTheOperatorsFile) {
    std::string error;
    const auto text =
        with_vnic_line(host_yaml, vnic_line(entry("jc01", 0xc6130164), "vnet:iface={name}"), error);
    ASSERT_TRUE(text);
    EXPECT_EQ(without_vnic_line(*text, "jc01"), host_yaml);
    EXPECT_EQ(without_vnic_line(host_yaml, "jc01"), host_yaml);  // idempotent
    // A static vNIC is the operator's, never the plugin's.
    EXPECT_EQ(without_vnic_line(host_yaml, "t1"), host_yaml);
}

TEST(HostFileRegistry, AnEmptyVnicsListGrowsAndShrinksBackToEmpty) {
    const std::string empty =
        "host: {name: h1, underlay: {port: \"vnet:tap=ultap\", ip: "
        "198.18.0.1}}\nvpcs: [{name: blue, vni: 100}]\n"
        "security_groups: [{name: default, vpc: blue}]\nvnics: []\n";
    std::string error;
    const auto text =
        with_vnic_line(empty, vnic_line(entry("jc02", 0xc6130165), "vnet:iface={name}"), error);
    ASSERT_TRUE(text) << error;
    ASSERT_TRUE(load_host_config_text(*text, "h1.yaml").ok()) << *text;
    const auto back = without_vnic_line(*text, "jc02");
    EXPECT_EQ(back, empty);
    EXPECT_TRUE(load_host_config_text(back, "h1.yaml").ok());
}

TEST(HostFileRegistry, AFileWithoutVnicsGetsTheList) {
    const std::string none =
        "host: {name: h1, underlay: {port: \"vnet:tap=ultap\", ip: 198.18.0.1}}\n"
        "vpcs: [{name: blue, vni: 100}]\nsecurity_groups: [{name: default, vpc: blue}]\n";
    std::string error;
    const auto text =
        with_vnic_line(none, vnic_line(entry("jc03", 0xc6130166), "vnet:iface={name}"), error);
    ASSERT_TRUE(text) << error;
    EXPECT_TRUE(load_host_config_text(*text, "h1.yaml").ok()) << *text;
}

TEST(HostFileRegistry, RefusesAFlowListItCannotExtendByALine) {
    const std::string flow = "vnics: [{name: t1, vpc: blue}]\n";
    std::string error;
    EXPECT_FALSE(with_vnic_line(flow, "  - {name: jc04}", error));
    EXPECT_NE(error.find("block list"), std::string::npos);
}

TEST(HostFileRegistry, QosAndHostileLookingValuesStayInsideTheirFields) {
    auto e = entry("jc05", 0xc6130167);
    e.qos = YAML::Load(R"({"rate": "1Gbit", "tcp": {"weight": 2}, "rdma": {"weight": 3}})");
    const auto line = vnic_line(e, "vnet:iface={name}");
    std::string error;
    const auto text = with_vnic_line(host_yaml, line, error);
    ASSERT_TRUE(text);
    const auto loaded = load_host_config_text(*text, "h1.yaml");
    ASSERT_TRUE(loaded.ok()) << loaded.errors[0].to_string();
    bool shaped = false;
    for (const auto& v : loaded.config.vnics) {
        shaped |= v.name == "jc05" && v.qos.has_value();
    }
    EXPECT_TRUE(shaped);
    // A QoS value that tries to close the mapping is one (invalid) string, not YAML.
    e.qos = YAML::Load(R"({"rate": "1Gbit}, {name: evil"})");
    const auto hostile = with_vnic_line(host_yaml, vnic_line(e, "vnet:iface={name}"), error);
    ASSERT_TRUE(hostile);
    const auto refused = load_host_config_text(*hostile, "h1.yaml");
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.errors[0].field.find("qos"), std::string::npos)
        << refused.errors[0].to_string();
}

}  // namespace
}  // namespace jakiro::cni
