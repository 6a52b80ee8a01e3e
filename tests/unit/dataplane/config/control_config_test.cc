#include <gtest/gtest.h>

#include "dataplane/config/config_loader.hh"

using namespace jakiro;

namespace {
const char* host = "host: {name: h1, underlay: {port: net_null0, ip: 198.18.0.1}}\n";
}

TEST(ControlConfig, EtcdEndpointsVnicPortAndLeaseAreRead) {
    const auto loaded = load_host_config_text(
        std::string(host) +
            "control: {etcd: [http://198.18.0.250:2379], vnic_port: 'p_{name}', lease_ttl: 6}\n",
        "h.yaml");
    ASSERT_TRUE(loaded.ok()) << loaded.errors[0].to_string();
    ASSERT_TRUE(loaded.config.control.has_value());
    EXPECT_EQ(loaded.config.control->etcd, std::vector<std::string>{"http://198.18.0.250:2379"});
    EXPECT_EQ(loaded.config.control->vnic_port, "p_{name}");
    EXPECT_EQ(loaded.config.control->lease_ttl_s, 6u);
}

TEST(ControlConfig, NoControlKeyMeansNoControlPlane) {
    const auto loaded = load_host_config_text(host, "h.yaml");
    ASSERT_TRUE(loaded.ok());
    EXPECT_FALSE(loaded.config.control.has_value());
}

TEST(ControlConfig, ClusterStateInAHostYamlThatFollowsEtcdIsRefusedAtItsLine) {
    const auto loaded =
        load_host_config_text(std::string(host) + "control: {etcd: [http://198.18.0.250:2379]}\n" +
                                  "vpcs: [{name: blue, vni: 100}]\n",
                              "h.yaml");
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.errors[0].to_string(),
              "h.yaml:3: vpcs: comes from etcd when control: is set (remove it here)");
}

TEST(ControlConfig, EndpointsMustBeHttpUrlsAndThePortPatternNamesTheVnic) {
    const auto loaded = load_host_config_text(
        std::string(host) + "control: {etcd: ['198.18.0.250:2379'], vnic_port: fixed}\n", "h.yaml");
    ASSERT_EQ(loaded.errors.size(), 2u);
    EXPECT_NE(loaded.errors[0].to_string().find("control.etcd[0]"), std::string::npos);
    EXPECT_NE(loaded.errors[1].to_string().find("control.vnic_port: must contain {name}"),
              std::string::npos);
}

TEST(ClusterConfig, VnicsNameTheirHostAndHaveNoPort) {
    const auto loaded = load_cluster_config_text(
        "hosts: [{name: h1, underlay_ip: 198.18.0.1}]\n"
        "vpcs: [{name: blue, vni: 100}]\n"
        "vnics:\n"
        "  - {name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:00:01', host: h1}\n"
        "  - {name: t2, vpc: blue, ip: 198.19.1.2/24, mac: '02:00:00:00:00:02', port: p}\n",
        "cluster.yaml");
    ASSERT_EQ(loaded.errors.size(), 2u);
    EXPECT_EQ(loaded.errors[0].to_string(), "cluster.yaml:5: vnics[1].port: unknown key");
    EXPECT_EQ(loaded.errors[1].to_string(), "cluster.yaml:5: vnics[1].host: missing");
    EXPECT_EQ(loaded.config.vnics[0].host, "h1");
}
