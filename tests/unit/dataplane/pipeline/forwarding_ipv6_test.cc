// IPv6 data between dual-stack vNICs of one VPC: switched to a vNIC of this host, tunnelled to
// another host (the outer header IPv4, DSCP and ECN from the traffic class), received from the
// fabric after the checks IPv4 gets, and judged by the security groups' IPv6 side; neighbour
// solicitations inside the tunnel (a foreign VTEP's) answered back through it.

#include <array>
#include <cstring>

#include "dataplane/neighbor_discovery.hh"
#include "dataplane/overlay/ipv6_packet.hh"
#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

struct ForwardingIpv6 : PipelineTest {
    // blue's "members" admit each other (their IPv6 addresses too); red's group admits only an
    // IPv4 CIDR, which says nothing of IPv6.
    const char* config_yaml() const override {
        return R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - {name: members, vpc: blue, ingress: [{proto: any, from_group: members}]}
  - {name: red-v4, vpc: red, ingress: [{proto: any, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null1", security_groups: [members]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, ip6: 2001:2::1:3/64, port: "net_null2", security_groups: [members]}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null3", security_groups: [red-v4]}
peers:
  - {vpc: blue, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2, security_groups: [members]}
  - {vpc: red, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2}
  - {vpc: blue, ip: 198.19.1.4, ip6: 2001:2::1:4, host: 198.18.0.2}
)";
    }

    rte_mbuf* ipv6_frame(const rte_ether_addr& src_mac, const char* src, const char* dst,
                         uint8_t next_header = IPPROTO_UDP, uint8_t traffic_class = 0) {
        rte_mbuf* m = ipv6_mbuf(pool, {src_mac, gateway, ip6(src), ip6(dst), next_header});
        auto* iph = reinterpret_cast<rte_ipv6_hdr*>(rte_pktmbuf_mtod(m, rte_ether_hdr*) + 1);
        iph->vtc_flow = rte_cpu_to_be_32((6u << 28) | (uint32_t{traffic_class} << 20));
        return m;
    }

    rte_mbuf* tunnelled6(const char* from_host, uint32_t vni, const char* src, const char* dst) {
        rte_mbuf* m = ipv6_frame(mac("02:00:c6:13:01:02"), src, dst);
        vxlan_wrap(m, {h2_mac, h1_mac, ip(from_host), ip("198.18.0.1")}, vni);
        return m;
    }
};

TEST_F(ForwardingIpv6, ToAVnicOfThisHostItIsSwitchedToItsPortWithItsMac) {
    from_tenant(slot_t1, ipv6_frame(t1_mac, "2001:2::1:1", "2001:2::1:3", IPPROTO_TCP));
    const auto sent = ctx->tx.queued(port_t5);
    ASSERT_EQ(sent.size(), 1u);
    const auto* eth = rte_pktmbuf_mtod(sent[0], const rte_ether_hdr*);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &t5_mac));
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->src_addr, &gateway));
    EXPECT_EQ(eth->ether_type, rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6));
    EXPECT_EQ(ctx->counters.switched_locally.read(), 1u);
}

TEST_F(ForwardingIpv6, ToAnotherHostItIsTunnelledOverIpv4WithTheTrafficClassOutside) {
    neighbors.learn(ip("198.18.0.2"), h2_mac);
    from_tenant(slot_t1, ipv6_frame(t1_mac, "2001:2::1:1", "2001:2::1:2", IPPROTO_UDP, 0xb9));
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), 1u);
    const auto* frame = rte_pktmbuf_mtod(sent[0], const uint8_t*);
    const auto outer = overlay::check_outer(frame, rte_pktmbuf_data_len(sent[0]), ip("198.18.0.2"));
    ASSERT_TRUE(outer.ok) << name_of(outer.reason);
    EXPECT_EQ(outer.view.vni, 100u);
    EXPECT_EQ(outer.view.outer_tos, 0xb9) << "DSCP and ECN of the traffic class";
    const auto* inner = reinterpret_cast<const rte_ether_hdr*>(frame + outer.view.inner_offset);
    EXPECT_EQ(inner->ether_type, rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6));
    EXPECT_EQ(outer.view.inner_len, sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) + 64u);
    EXPECT_EQ(ctx->counters.encapsulated.read(), 1u);
}

TEST_F(ForwardingIpv6, TheOuterSourcePortFollowsTheIpv6Flow) {
    struct udp6 {  // the header and the UDP header it hashes the ports of: 48 bytes
        rte_ipv6_hdr ip;
        std::array<uint8_t, 8> udp;
    };
    udp6 a{};
    a.ip.vtc_flow = rte_cpu_to_be_32(6u << 28);
    a.ip.proto = IPPROTO_UDP;
    a.ip.payload_len = rte_cpu_to_be_16(8);
    udp6 b = a;
    b.ip.src_addr[15] = 1;
    udp6 c = a;
    c.udp[1] = 7;  // another source port
    static_assert(sizeof(udp6) == 48);
    const auto port = [](const udp6& p) { return overlay::ipv6_flow_entropy_port(&p.ip, 48); };
    EXPECT_EQ(port(a), port(a));
    EXPECT_NE(port(a), port(b));
    EXPECT_NE(port(a), port(c));
    EXPECT_GE(port(a), 49152);
}

TEST_F(ForwardingIpv6, ASpoofedSourceIsStillACountedDrop) {
    from_tenant(slot_t1, ipv6_frame(t1_mac, "2001:2::1:3", "2001:2::1:2"));
    EXPECT_EQ(drops(drop_reason::tenant_src_spoofed), 1u);
    EXPECT_TRUE(ctx->tx.queued(uplink).empty());
    EXPECT_TRUE(ctx->tx.queued(port_t5).empty());
}

TEST_F(ForwardingIpv6, AnAddressOnlyAnotherVpcHasIsAVltMiss) {
    // 2001:2::1:3 is blue t5's; red t3 has no such neighbour.
    from_tenant(slot_t3, ipv6_frame(mac("02:00:c6:13:02:01"), "2001:2::1:1", "2001:2::1:3"));
    EXPECT_EQ(drops(drop_reason::vlt_miss), 1u);
    EXPECT_TRUE(ctx->tx.queued(port_t5).empty());
}

TEST_F(ForwardingIpv6, AnIpv4OnlyRuleAdmitsNoIpv6) {
    neighbors.learn(ip("198.18.0.2"), h2_mac);
    from_uplink(tunnelled6("198.18.0.2", 200, "2001:2::1:2", "2001:2::1:1"));
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 1u);
    EXPECT_TRUE(ctx->tx.queued(port_t3).empty());
}

TEST_F(ForwardingIpv6, FromTheFabricItIsDeliveredWhenTheSourceLivesOnTheSendingHost) {
    from_uplink(tunnelled6("198.18.0.2", 100, "2001:2::1:2", "2001:2::1:1"));
    const auto sent = ctx->tx.queued(port_t1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(rte_pktmbuf_pkt_len(sent[0]), sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) + 64u);
    const auto* eth = rte_pktmbuf_mtod(sent[0], const rte_ether_hdr*);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &t1_mac));
    EXPECT_EQ(ctx->counters.decapsulated.read(), 1u);

    from_uplink(tunnelled6("198.18.0.7", 100, "2001:2::1:2", "2001:2::1:1"));
    EXPECT_EQ(drops(drop_reason::inner_src_spoofed), 1u);
}

TEST_F(ForwardingIpv6, OnlyAReplyToAFlowTheVnicOpenedPassesFromANonMember) {
    // 2001:2::1:4 is not in t1's group "members": what it starts is denied, and the reply to
    // what t1 started passes (one NFT entry for both directions).
    neighbors.learn(ip("198.18.0.2"), h2_mac);
    from_uplink(tunnelled6("198.18.0.2", 100, "2001:2::1:4", "2001:2::1:1"));
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 1u);

    from_tenant(slot_t1, ipv6_frame(t1_mac, "2001:2::1:1", "2001:2::1:4", IPPROTO_UDP));
    ASSERT_EQ(ctx->tx.queued(uplink).size(), 1u);
    rte_mbuf* reply = ipv6_frame(mac("02:00:c6:13:01:04"), "2001:2::1:4", "2001:2::1:1");
    auto* udp = reinterpret_cast<rte_udp_hdr*>(
        reinterpret_cast<rte_ipv6_hdr*>(rte_pktmbuf_mtod(reply, rte_ether_hdr*) + 1) + 1);
    const rte_be16_t sent_from = udp->src_port;
    udp->src_port = udp->dst_port;
    udp->dst_port = sent_from;
    vxlan_wrap(reply, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, 100);
    from_uplink(reply);
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u);
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 1u);
}

// A solicitation from `src` for `target` inside VNI `vni`, sent by host `from_host`.
rte_mbuf* tunnelled_solicitation(const char* from_host, uint32_t vni, const char* src,
                                 const char* target, bool multicast = true) {
    rte_mbuf* m = neighbor_solicitation_mbuf(
        PipelineTest::pool, {mac("02:00:c6:13:01:09"), ip6(src), ip6(target), multicast});
    vxlan_wrap(
        m, {mac("02:00:00:00:00:09"), mac("02:00:00:00:00:01"), ip(from_host), ip("198.18.0.1")},
        vni);
    return m;
}

TEST_F(ForwardingIpv6, ASolicitationInsideTheTunnelIsAnsweredBackThroughItWithTheGatewayMac) {
    from_uplink(tunnelled_solicitation("198.18.0.2", 100, "2001:2::1:2", "2001:2::1:1"));
    EXPECT_TRUE(ctx->tx.queued(port_t1).empty()) << "never delivered to the tenant";
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), 1u);
    const auto* frame = rte_pktmbuf_mtod(sent[0], const uint8_t*);
    ASSERT_EQ(rte_pktmbuf_data_len(sent[0]),
              overlay::outer_header_bytes + neighbor_advertisement_bytes);
    const auto outer = overlay::check_outer(frame, rte_pktmbuf_data_len(sent[0]), ip("198.18.0.2"));
    ASSERT_TRUE(outer.ok) << name_of(outer.reason);
    EXPECT_EQ(outer.view.vni, 100u);
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    const rte_ether_addr vtep_mac = mac("02:00:00:00:00:09");
    const rte_ether_addr asker_mac = mac("02:00:c6:13:01:09");
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &vtep_mac)) << "back to the VTEP";
    const auto* inner_eth = reinterpret_cast<const rte_ether_hdr*>(frame + outer.view.inner_offset);
    const auto* na = reinterpret_cast<const rte_ipv6_hdr*>(inner_eth + 1);
    const auto* icmp = reinterpret_cast<const uint8_t*>(na + 1);
    EXPECT_TRUE(rte_is_same_ether_addr(&inner_eth->dst_addr, &asker_mac));
    EXPECT_EQ(icmp[0], icmp6_neighbor_advertisement);
    EXPECT_TRUE(icmpv6_checksum_ok(na, icmp));
    EXPECT_EQ(std::to_array(na->src_addr), ip6("2001:2::1:1"));
    EXPECT_EQ(std::to_array(na->dst_addr), ip6("2001:2::1:2"));
    EXPECT_EQ(std::memcmp(icmp + 26, gateway.addr_bytes, 6), 0) << "the target is the gateway";
    EXPECT_EQ(ctx->counters.nd_replies_in_overlay.read(), 1u);
}

TEST_F(ForwardingIpv6, NeighbourDiscoveryInTheTunnelNeedsNoIcmpv6Rule) {
    // Red t3's group admits IPv4 only; its IPv6 neighbours still resolve it (unicast too).
    from_uplink(tunnelled_solicitation("198.18.0.2", 200, "2001:2::1:2", "2001:2::1:1", false));
    EXPECT_EQ(ctx->tx.queued(uplink).size(), 1u);
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 0u);
    EXPECT_EQ(ctx->counters.nd_replies_in_overlay.read(), 1u);
}

TEST_F(ForwardingIpv6, NeighbourDiscoveryInTheTunnelThatIsNotAnsweredIsCounted) {
    // From an address that lives on another host, from a link-local one, for an address that is
    // no vNIC of this host, and an advertisement.
    from_uplink(tunnelled_solicitation("198.18.0.7", 100, "2001:2::1:2", "2001:2::1:1"));
    from_uplink(tunnelled_solicitation("198.18.0.2", 100, "fe80::1", "2001:2::1:1"));
    from_uplink(tunnelled_solicitation("198.18.0.2", 100, "2001:2::1:2", "2001:2::1:4"));
    rte_mbuf* na = tunnelled_solicitation("198.18.0.2", 100, "2001:2::1:2", "2001:2::1:1");
    rte_pktmbuf_mtod_offset(na, uint8_t*, overlay::outer_header_bytes + 14 + 40)[0] =
        icmp6_neighbor_advertisement;
    from_uplink(na);
    EXPECT_EQ(drops(drop_reason::inner_nd_ignored), 4u);
    EXPECT_TRUE(ctx->tx.queued(uplink).empty());
    EXPECT_TRUE(ctx->tx.queued(port_t1).empty());
}

}  // namespace
}  // namespace jakiro::test
