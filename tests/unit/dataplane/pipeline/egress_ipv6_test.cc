// A dual-stack tenant's IPv6 frames on the egress pipeline: neighbour discovery answered for
// the VPC's addresses, everything else counted under its reason.

#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

struct EgressIpv6 : PipelineTest {
    const char* config_yaml() const override {
        return R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - {name: blue-open, vpc: blue, ingress: [{proto: any, from: 0.0.0.0/0}]}
  - {name: red-open, vpc: red, ingress: [{proto: any, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null1", security_groups: [blue-open]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, ip6: 2001:2::1:3/64, port: "net_null2", security_groups: [blue-open]}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null3", security_groups: [red-open]}
peers:
  - {vpc: blue, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2}
  - {vpc: red, ip: 198.19.1.2, host: 198.18.0.2}
)";
    }

    const rte_ether_addr t3_mac = mac("02:00:c6:13:02:01");

    rte_mbuf* t1_solicits(const char* target, const char* source = "2001:2::1:1") {
        return neighbor_solicitation_mbuf(pool, {t1_mac, ip6(source), ip6(target)});
    }

    // The advertisement queued for `port`, checked to say "target is at the gateway MAC".
    void expect_advertisement(uint16_t port, const char* target, const rte_ether_addr& to) {
        const auto sent = ctx->tx.queued(port);
        ASSERT_EQ(sent.size(), 1u);
        ASSERT_EQ(rte_pktmbuf_pkt_len(sent[0]), neighbor_advertisement_bytes);
        const auto* eth = rte_pktmbuf_mtod(sent[0], const rte_ether_hdr*);
        EXPECT_TRUE(rte_is_same_ether_addr(&eth->src_addr, &gateway));
        EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &to));
        const auto* iph = reinterpret_cast<const rte_ipv6_hdr*>(eth + 1);
        const auto* icmp = reinterpret_cast<const uint8_t*>(iph + 1);
        EXPECT_EQ(icmp[0], icmp6_neighbor_advertisement);
        EXPECT_EQ(0, std::memcmp(icmp + 8, ip6(target).data(), 16));
        EXPECT_EQ(0, std::memcmp(icmp + 26, gateway.addr_bytes, 6));
        EXPECT_TRUE(icmpv6_checksum_ok(iph, icmp));
    }

    rte_mbuf* t1_ipv6(const char* dst, uint8_t next_header = IPPROTO_UDP,
                      const char* src = "2001:2::1:1") {
        return ipv6_mbuf(pool, {t1_mac, gateway, ip6(src), ip6(dst), next_header});
    }
};

TEST_F(EgressIpv6, ASolicitationForAnAddressOnAnotherHostIsAnsweredWithTheGatewayMac) {
    from_tenant(slot_t1, t1_solicits("2001:2::1:2"));
    expect_advertisement(port_t1, "2001:2::1:2", t1_mac);
    EXPECT_EQ(ctx->counters.nd_replies_to_tenants.read(), 1u);
}

TEST_F(EgressIpv6, ASolicitationForAnAddressOnThisHostOrFromALinkLocalSourceIsAnswered) {
    from_tenant(slot_t1, t1_solicits("2001:2::1:3", "fe80::aaaa:bbbb:cccc:dddd"));
    expect_advertisement(port_t1, "2001:2::1:3", t1_mac);
}

TEST_F(EgressIpv6, ASolicitationAsTheTargetItselfIsAnswered) {
    rte_mbuf* probe = neighbor_solicitation_mbuf(
        pool, {t1_mac, ip6("2001:2::1:1"), ip6("2001:2::1:2"), /*multicast=*/false});
    from_tenant(slot_t1, probe);
    expect_advertisement(port_t1, "2001:2::1:2", t1_mac);
}

TEST_F(EgressIpv6, ASolicitationForAnotherVpcsAddressIsNotAnswered) {
    // 2001:2::1:3 is blue t5's; red t3 has no such neighbour.
    from_tenant(slot_t3,
                neighbor_solicitation_mbuf(pool, {t3_mac, ip6("2001:2::1:1"), ip6("2001:2::1:3")}));
    EXPECT_TRUE(ctx->tx.queued(port_t3).empty());
    EXPECT_EQ(drops(drop_reason::tenant_nd_ignored), 1u);
}

TEST_F(EgressIpv6, ASolicitationForAnUnknownOrItsOwnAddressOrADadProbeIsNotAnswered) {
    from_tenant(slot_t1, t1_solicits("2001:2::1:77"));
    from_tenant(slot_t1, t1_solicits("2001:2::1:1"));
    neighbor_solicitation_spec dad{t1_mac, {}, ip6("2001:2::1:2")};
    dad.source_option = false;
    from_tenant(slot_t1, neighbor_solicitation_mbuf(pool, dad));
    EXPECT_TRUE(ctx->tx.queued(port_t1).empty());
    EXPECT_EQ(drops(drop_reason::tenant_nd_ignored), 3u);
}

TEST_F(EgressIpv6, ASolicitationFromAnotherMacOrAnotherGlobalAddressIsASpoof) {
    from_tenant(slot_t1,
                neighbor_solicitation_mbuf(pool, {t5_mac, ip6("2001:2::1:1"), ip6("2001:2::1:2")}));
    from_tenant(slot_t1, t1_solicits("2001:2::1:2", "2001:2::1:3"));
    EXPECT_TRUE(ctx->tx.queued(port_t1).empty());
    EXPECT_EQ(drops(drop_reason::tenant_src_spoofed), 2u);
}

TEST_F(EgressIpv6, RouterAndAdvertisementMessagesFromATenantAreCountedDrops) {
    for (const uint8_t type : {icmp6_router_solicitation, icmp6_router_advertisement,
                               icmp6_neighbor_advertisement, icmp6_redirect}) {
        rte_mbuf* m = t1_solicits("2001:2::1:2");
        rte_pktmbuf_mtod_offset(m, uint8_t*, 14 + 40)[0] = type;
        from_tenant(slot_t1, m);
    }
    EXPECT_TRUE(ctx->tx.queued(port_t1).empty());
    EXPECT_EQ(drops(drop_reason::tenant_nd_ignored), 4u);
}

TEST_F(EgressIpv6, MulticastLinkLocalAndSpoofedIpv6AreCountedUnderTheirReasons) {
    from_tenant(slot_t1, t1_ipv6("ff02::16", 0));  // an MLD report behind hop-by-hop options
    EXPECT_EQ(drops(drop_reason::tenant_not_unicast), 1u);
    from_tenant(slot_t1, t1_ipv6("fe80::1", IPPROTO_UDP, "fe80::2"));
    EXPECT_EQ(drops(drop_reason::tenant_ipv6_link_local), 1u);
    from_tenant(slot_t1, t1_ipv6("2001:2::1:2", IPPROTO_UDP, "2001:2::1:3"));
    EXPECT_EQ(drops(drop_reason::tenant_src_spoofed), 1u);
    from_tenant(slot_t1,
                ipv6_mbuf(pool, {t5_mac, gateway, ip6("2001:2::1:1"), ip6("2001:2::1:2")}));
    EXPECT_EQ(drops(drop_reason::tenant_src_spoofed), 2u) << "another vNIC's MAC";
    EXPECT_TRUE(ctx->tx.queued(uplink).empty());
}

TEST_F(EgressIpv6, ExtensionHeaderChainsAndFragmentsAreCountedDrops) {
    for (const uint8_t next_header : {0, 43, 60, 51, 50, 135, 59}) {
        from_tenant(slot_t1, t1_ipv6("2001:2::1:2", next_header));
    }
    EXPECT_EQ(drops(drop_reason::tenant_ipv6_extension_header), 7u);
    from_tenant(slot_t1, t1_ipv6("2001:2::1:2", IPPROTO_FRAGMENT));
    EXPECT_EQ(drops(drop_reason::fragment), 1u);
}

TEST_F(EgressIpv6, ATruncatedOrLyingIpv6HeaderIsCounted) {
    rte_mbuf* lying = t1_ipv6("2001:2::1:2");
    rte_pktmbuf_mtod_offset(lying, rte_ipv6_hdr*, 14)->payload_len = rte_cpu_to_be_16(1400);
    from_tenant(slot_t1, lying);
    EXPECT_EQ(drops(drop_reason::tenant_bad_ip_header), 1u);
    rte_mbuf* truncated = t1_ipv6("2001:2::1:2");
    rte_pktmbuf_trim(truncated, rte_pktmbuf_pkt_len(truncated) - 30);
    from_tenant(slot_t1, truncated);
    EXPECT_EQ(drops(drop_reason::tenant_truncated), 1u);
}

TEST_F(EgressIpv6, ASolicitationForAnAddressOfAnIpv4OnlyPeerIsNotAnswered) {
    // Red's peer at 198.19.1.2 has no ip6: 2001:2::1:2 is no address of red.
    from_tenant(slot_t3,
                neighbor_solicitation_mbuf(pool, {t3_mac, ip6("2001:2::1:1"), ip6("2001:2::1:2")}));
    EXPECT_EQ(drops(drop_reason::tenant_nd_ignored), 1u);
}

}  // namespace
}  // namespace jakiro::test
