#include "dataplane/control_plane/host_view.hh"

#include <gtest/gtest.h>

#include <algorithm>

#include "dataplane/config/config_loader.hh"

using namespace jakiro;
using namespace jakiro::control_plane;

namespace {

host_config host_yaml(const std::string& name, const std::string& ip) {
    auto loaded = load_host_config_text(
        "host: {name: " + name + ", underlay: {port: net_null0, ip: " + ip +
            "}}\n"
            "control: {etcd: [http://198.18.0.250:2379], vnic_port: 'net_af_packet_{name},"
            "iface={name},framesz=2048'}\n",
        "h.yaml");
    EXPECT_TRUE(loaded.ok()) << (loaded.ok() ? "" : loaded.errors[0].to_string());
    return loaded.config;
}

std::shared_ptr<const cluster_view> three_hosts() {
    cluster_records records;
    records.reset(20);
    for (int i = 1; i <= 3; ++i) {
        const auto h = "h" + std::to_string(i);
        records.put("/jakiro/v1/hosts/" + h,
                    "{name: " + h + ", underlay_ip: 198.18.0." + std::to_string(i) + "}", 1);
    }
    records.put("/jakiro/v1/alive/h1", "{name: h1}", 1);
    records.put("/jakiro/v1/alive/h2", "{name: h2}", 1);  // h3's lease expired
    records.put("/jakiro/v1/vpcs/blue", "{name: blue, vni: 100}", 1);
    records.put("/jakiro/v1/groups/blue/default",
                "{name: default, vpc: blue, ingress: [{proto: any, from_group: default}]}", 1);
    auto vnic = [&](const std::string& name, const std::string& ip, const std::string& host,
                    const std::string& mac_byte) {
        records.put("/jakiro/v1/vnics/" + name,
                    "{name: " + name + ", vpc: blue, ip: " + ip + "/24, mac: '02:00:00:00:00:" +
                        mac_byte + "', host: " + host + ", security_groups: [default]}",
                    1);
    };
    vnic("t1", "198.19.1.1", "h1", "01");
    vnic("t2", "198.19.1.2", "h2", "02");
    vnic("t19", "198.19.1.19", "h3", "19");
    vnic("t30", "198.19.1.30", "h9", "30");  // h9 never registered
    return records.build_view();
}

}  // namespace

TEST(HostView, LocalVnicsGetTheirPortAndOthersBecomePeersAtTheirHost) {
    const auto view = three_hosts();
    ASSERT_TRUE(view->usable);
    const auto h1 = compose_host_config(host_yaml("h1", "198.18.0.1"), *view);
    ASSERT_EQ(h1.config.vnics.size(), 1u);
    EXPECT_EQ(h1.config.vnics[0].name, "t1");
    EXPECT_EQ(h1.config.vnics[0].port, "net_af_packet_t1,iface=t1,framesz=2048");
    ASSERT_EQ(h1.config.peers.size(), 2u);
    // In key order: t19 before t2.
    EXPECT_EQ(format_ipv4(h1.config.peers[0].ip), "198.19.1.19");
    EXPECT_EQ(format_ipv4(h1.config.peers[0].host), "198.18.0.3");
    EXPECT_EQ(format_ipv4(h1.config.peers[1].ip), "198.19.1.2");
    EXPECT_EQ(format_ipv4(h1.config.peers[1].host), "198.18.0.2");
    EXPECT_EQ(h1.config.peers[1].security_groups, std::vector<std::string>{"default"});
    EXPECT_EQ(h1.config.vpcs.size(), 1u);
    EXPECT_EQ(h1.config.security_groups.size(), 1u);
}

TEST(HostView, ARemoteVnicsIpv6AddressBecomesItsPeersToo) {
    cluster_records records;
    records.reset(20);
    records.put("/jakiro/v1/hosts/h1", "{name: h1, underlay_ip: 198.18.0.1}", 1);
    records.put("/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.0.2}", 1);
    records.put("/jakiro/v1/vpcs/blue", "{name: blue, vni: 100}", 1);
    records.put("/jakiro/v1/vnics/blue/t1",
                "{name: t1, vpc: blue, ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, "
                "mac: '02:00:00:00:00:01', host: h1}",
                1);
    records.put("/jakiro/v1/vnics/blue/t2",
                "{name: t2, vpc: blue, ip: 198.19.1.2/24, ip6: 2001:2::1:2/64, "
                "mac: '02:00:00:00:00:02', host: h2}",
                1);
    records.put("/jakiro/v1/vnics/blue/t6",
                "{name: t6, vpc: blue, ip: 198.19.1.6/24, mac: '02:00:00:00:00:06', host: h2}", 1);
    const auto view = records.build_view();
    ASSERT_TRUE(view->usable) << (view->rejected.empty() ? "" : view->rejected[0]);
    const auto h1 = compose_host_config(host_yaml("h1", "198.18.0.1"), *view);
    ASSERT_EQ(h1.config.vnics.size(), 1u);
    ASSERT_TRUE(h1.config.vnics[0].ip6);
    EXPECT_EQ(format_ipv6(h1.config.vnics[0].ip6->address), "2001:2::1:1");
    ASSERT_EQ(h1.config.peers.size(), 2u);
    ASSERT_TRUE(h1.config.peers[0].ip6);
    EXPECT_EQ(format_ipv6(*h1.config.peers[0].ip6), "2001:2::1:2");
    EXPECT_FALSE(h1.config.peers[1].ip6);  // t6 is IPv4 only
}

TEST(HostView, AStaleHostKeepsItsVnicsReachable) {
    const auto h1 = compose_host_config(host_yaml("h1", "198.18.0.1"), *three_hosts());
    EXPECT_EQ(h1.stale_hosts, std::vector<std::string>{"h3"});
    const bool t19_peer =
        std::any_of(h1.config.peers.begin(), h1.config.peers.end(),
                    [](const peer_config& p) { return format_ipv4(p.ip) == "198.19.1.19"; });
    EXPECT_TRUE(t19_peer);
}

TEST(HostView, AVnicOnAnUnregisteredHostIsListedNotPlaced) {
    const auto h2 = compose_host_config(host_yaml("h2", "198.18.0.2"), *three_hosts());
    EXPECT_EQ(h2.unplaced, std::vector<std::string>{"t30"});
    EXPECT_EQ(h2.config.peers.size(), 2u);  // t1 and t19
}

TEST(HostView, AMoveSwapsLocalVnicAndPeerBetweenHosts) {
    cluster_records records;
    records.reset(1);
    records.put("/jakiro/v1/hosts/h1", "{name: h1, underlay_ip: 198.18.0.1}", 1);
    records.put("/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.0.2}", 1);
    records.put("/jakiro/v1/vpcs/blue", "{name: blue, vni: 100}", 1);
    records.put("/jakiro/v1/vnics/t1",
                "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:00:01', host: h1}", 1);
    const auto before = records.build_view();
    records.put("/jakiro/v1/vnics/t1",
                "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:00:01', host: h2}", 2);
    const auto after = records.build_view();
    const auto h1 = host_yaml("h1", "198.18.0.1");
    EXPECT_EQ(compose_host_config(h1, *before).config.vnics.size(), 1u);
    const auto moved = compose_host_config(h1, *after);
    EXPECT_TRUE(moved.config.vnics.empty());
    ASSERT_EQ(moved.config.peers.size(), 1u);
    EXPECT_EQ(format_ipv4(moved.config.peers[0].host), "198.18.0.2");
}

TEST(HostView, DefaultVnicPortIsAfPacketOnTheVethNamedAfterTheVnic) {
    EXPECT_EQ(vnic_port_of("", "t7"), "net_af_packet_t7,iface=t7");
    EXPECT_EQ(vnic_port_of("x_{name}:{name}", "ab"), "x_ab:ab");
}
