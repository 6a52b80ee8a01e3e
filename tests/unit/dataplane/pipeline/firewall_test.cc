#include <rte_tcp.h>

#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

// t1 carries "web": HTTP from anywhere in 198.19.0.0/16, ICMP from members of "web", egress
// only to TCP 443 and to members of "web". t5 carries no group: nothing may open a flow to it.
const char* firewall_yaml = R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - name: web
    vpc: blue
    ingress:
      - {proto: tcp, ports: 8080, from: 198.19.0.0/16}
      - {proto: icmp, from_group: web}
    egress:
      - {proto: tcp, ports: 443, to: 0.0.0.0/0}
      - {proto: any, to_group: web}
  - {name: open, vpc: red, ingress: [{proto: any, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "net_null1", security_groups: [web]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, port: "net_null2"}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, port: "net_null3", security_groups: [open]}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2, security_groups: [web]}
  - {vpc: red, ip: 198.19.1.2, host: 198.18.0.2}
  - {vpc: blue, ip: 198.19.1.9, host: 198.18.0.9}
)";

struct Firewall : PipelineTest {
    const char* config_yaml() const override { return firewall_yaml; }

    void SetUp() override {
        PipelineTest::SetUp();
        neighbors.learn(ip("198.18.0.2"), h2_mac);
        neighbors.learn(ip("198.18.0.9"), mac("02:00:00:00:00:09"));
    }

    static void set_tcp_flags(rte_mbuf* m, uint8_t flags) {
        rte_pktmbuf_mtod_offset(m, rte_tcp_hdr*, 34)->tcp_flags = flags;
    }
    rte_mbuf* t1_tcp(const char* dst, uint16_t sport, uint16_t dport, uint8_t flags) {
        ipv4_frame_spec spec{t1_mac, gateway, ip("198.19.1.1"), ip(dst), IPPROTO_TCP, sport, dport};
        rte_mbuf* m = ipv4_mbuf(pool, spec);
        set_tcp_flags(m, flags);
        return m;
    }
    rte_mbuf* tcp_to_t1(const char* from_host, const char* src, uint16_t sport, uint16_t dport,
                        uint8_t flags) {
        ipv4_frame_spec spec{mac("02:00:c6:13:01:02"),
                             gateway,
                             ip(src),
                             ip("198.19.1.1"),
                             IPPROTO_TCP,
                             sport,
                             dport};
        rte_mbuf* m = ipv4_mbuf(pool, spec);
        set_tcp_flags(m, flags);
        vxlan_wrap(m, {h2_mac, h1_mac, ip(from_host), ip("198.18.0.1")}, 100);
        return m;
    }
    std::size_t delivered_to_t1() const { return ctx->tx.queued(port_t1).size(); }
    std::size_t sent_to_fabric() const { return ctx->tx.queued(uplink).size(); }
};

TEST_F(Firewall, IngressAllowedPortOpensAFlowAndItsRepliesPass) {
    from_uplink(tcp_to_t1("198.18.0.2", "198.19.1.2", 40000, 8080, RTE_TCP_SYN_FLAG));
    EXPECT_EQ(delivered_to_t1(), 1u);
    // t1's SYN+ACK goes out although egress allows only 443 and members: it is a reply.
    from_tenant(slot_t1, t1_tcp("198.19.1.9", 8080, 40000, RTE_TCP_SYN_FLAG | RTE_TCP_ACK_FLAG));
    EXPECT_EQ(drops(drop_reason::sg_denied_egress), 1u) << "198.19.1.9 is another flow: denied";
    from_tenant(slot_t1, t1_tcp("198.19.1.2", 8080, 40000, RTE_TCP_SYN_FLAG | RTE_TCP_ACK_FLAG));
    EXPECT_EQ(sent_to_fabric(), 1u);
    EXPECT_EQ(ctx->flows->size(), 1u);
    const auto* flow =
        ctx->flows->lookup({slot_t1, IPPROTO_TCP, 0, ip("198.19.1.1"), ip("198.19.1.2"),
                            rte_cpu_to_be_16(8080), rte_cpu_to_be_16(40000)});
    ASSERT_NE(flow, nullptr);
    EXPECT_EQ(flow->state, secgroup::flow_state::tcp_syn_received);
    EXPECT_EQ(flow->initiator, secgroup::direction::ingress);
}

TEST_F(Firewall, UnsolicitedIngressIsDeniedButEgressInitiatedRepliesPass) {
    from_uplink(tcp_to_t1("198.18.0.2", "198.19.1.2", 40000, 22, RTE_TCP_SYN_FLAG));
    EXPECT_EQ(delivered_to_t1(), 0u);
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 1u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1].sg_denied[0].read(), 1u);

    from_tenant(slot_t1, t1_tcp("198.19.1.2", 50000, 443, RTE_TCP_SYN_FLAG));
    EXPECT_EQ(sent_to_fabric(), 1u) << "egress to 443 allowed";
    from_uplink(
        tcp_to_t1("198.18.0.2", "198.19.1.2", 443, 50000, RTE_TCP_SYN_FLAG | RTE_TCP_ACK_FLAG));
    EXPECT_EQ(delivered_to_t1(), 1u) << "the reply of an allowed flow passes";
}

TEST_F(Firewall, VnicWithoutGroupsAcceptsNothingNewEvenOnTheSameHost) {
    from_tenant(slot_t1, t1_tcp("198.19.1.3", 50000, 443, RTE_TCP_SYN_FLAG));
    EXPECT_EQ(ctx->tx.queued(port_t5).size(), 0u);
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 1u) << "t1 may send, t5 may not receive";
    EXPECT_EQ(ctx->counters.vnics[slot_t5].sg_denied[0].read(), 1u);
}

TEST_F(Firewall, VnicWithoutGroupsMayStillOpenFlowsOutward) {
    ipv4_frame_spec spec{t5_mac, gateway, ip("198.19.1.3"), ip("198.19.1.2"), IPPROTO_UDP,
                         5000,   53};
    from_tenant(slot_t5, ipv4_mbuf(pool, spec));
    EXPECT_EQ(sent_to_fabric(), 1u) << "default: egress allowed";
    EXPECT_EQ(ctx->counters.rule_hits[implicit_egress_rule].read(), 1u);
}

TEST_F(Firewall, RemoteGroupRuleAdmitsMembersOnly) {
    auto ping_to_t1 = [&](const char* from_host, const char* src) {
        ipv4_frame_spec spec{mac("02:00:c6:13:01:02"), gateway, ip(src), ip("198.19.1.1"),
                             IPPROTO_ICMP};
        rte_mbuf* m = ipv4_mbuf(pool, spec);
        auto* icmp = rte_pktmbuf_mtod_offset(m, uint8_t*, 34);
        icmp[0] = 8;  // echo request
        vxlan_wrap(m, {h2_mac, h1_mac, ip(from_host), ip("198.18.0.1")}, 100);
        from_uplink(m);
    };
    ping_to_t1("198.18.0.2", "198.19.1.2");  // member of web
    EXPECT_EQ(delivered_to_t1(), 1u);
    ping_to_t1("198.18.0.9", "198.19.1.9");  // not a member
    EXPECT_EQ(delivered_to_t1(), 1u);
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 1u);
}

TEST_F(Firewall, PolicyChangeRevokesFlowsNoLongerAllowed) {
    from_uplink(tcp_to_t1("198.18.0.2", "198.19.1.2", 40000, 8080, RTE_TCP_SYN_FLAG));
    ASSERT_EQ(delivered_to_t1(), 1u);
    // The same configuration without the 8080 rule, as `jakiroctl apply` would publish it.
    std::string changed = firewall_yaml;
    changed.erase(changed.find("      - {proto: tcp, ports: 8080"),
                  std::string("      - {proto: tcp, ports: 8080, from: 198.19.0.0/16}\n").size());
    const auto loaded = load_host_config_text(changed, "h1.yaml");
    ASSERT_TRUE(loaded.ok()) << loaded.errors[0].to_string();
    std::string error;
    tables = build_tables(loaded.config, {uplink, h1_mac, {port_t1, port_t5, port_t3}, {}},
                          neighbors, tables->policy_generation + 1, error);
    ASSERT_TRUE(tables) << error;
    from_uplink(tcp_to_t1("198.18.0.2", "198.19.1.2", 40000, 8080, RTE_TCP_ACK_FLAG));
    EXPECT_EQ(delivered_to_t1(), 1u) << "no second delivery";
    EXPECT_EQ(drops(drop_reason::sg_revoked), 1u);
    EXPECT_EQ(ctx->flows->size(), 1u) << "kept as revoked so the flow stays closed";
}

TEST_F(Firewall, RevokedFlowStaysClosedInBothDirectionsAndCountsOnce) {
    from_uplink(tcp_to_t1("198.18.0.2", "198.19.1.2", 40000, 8080, RTE_TCP_SYN_FLAG));
    ASSERT_EQ(delivered_to_t1(), 1u);
    std::string changed = firewall_yaml;
    changed.erase(changed.find("      - {proto: tcp, ports: 8080"),
                  std::string("      - {proto: tcp, ports: 8080, from: 198.19.0.0/16}\n").size());
    // Egress to the client is allowed ("any to members of web"): without a revoked entry the
    // server's next segment would reopen the flow from its side.
    std::string error;
    tables = build_tables(load_host_config_text(changed, "h1.yaml").config,
                          {uplink, h1_mac, {port_t1, port_t5, port_t3}, {}}, neighbors,
                          tables->policy_generation + 1, error);
    ASSERT_TRUE(tables) << error;
    rte_mbuf* burst[] = {tcp_to_t1("198.18.0.2", "198.19.1.2", 40000, 8080, RTE_TCP_ACK_FLAG),
                         tcp_to_t1("198.18.0.2", "198.19.1.2", 40000, 8080, RTE_TCP_ACK_FLAG)};
    process_uplink_burst(*ctx, *tables, burst, 2);
    from_tenant(slot_t1, t1_tcp("198.19.1.2", 8080, 40000, RTE_TCP_ACK_FLAG));
    from_uplink(tcp_to_t1("198.18.0.2", "198.19.1.2", 40000, 8080, RTE_TCP_ACK_FLAG));
    EXPECT_EQ(delivered_to_t1(), 1u);
    EXPECT_EQ(sent_to_fabric(), 0u) << "the server side cannot reopen a revoked flow";
    EXPECT_EQ(drops(drop_reason::sg_revoked), 4u);
    EXPECT_EQ(ctx->flows->size(), 1u) << "one entry, marked revoked, not erased twice";

    // Putting the rule back lets the flow go on.
    tables = build_tables(load_host_config_text(firewall_yaml, "h1.yaml").config,
                          {uplink, h1_mac, {port_t1, port_t5, port_t3}, {}}, neighbors,
                          tables->policy_generation + 1, error);
    from_uplink(tcp_to_t1("198.18.0.2", "198.19.1.2", 40000, 8080, RTE_TCP_ACK_FLAG));
    EXPECT_EQ(delivered_to_t1(), 2u);
}

TEST_F(Firewall, FlowsStillAllowedSurviveAPolicyChange) {
    from_tenant(slot_t1, t1_tcp("198.19.1.2", 50000, 443, RTE_TCP_SYN_FLAG));
    std::string error;
    const auto loaded = load_host_config_text(firewall_yaml, "h1.yaml");
    tables = build_tables(loaded.config, {uplink, h1_mac, {port_t1, port_t5, port_t3}, {}},
                          neighbors, tables->policy_generation + 1, error);
    ASSERT_TRUE(tables) << error;
    from_tenant(slot_t1, t1_tcp("198.19.1.2", 50000, 443, RTE_TCP_ACK_FLAG));
    EXPECT_EQ(sent_to_fabric(), 2u);
    EXPECT_EQ(drops(drop_reason::sg_revoked), 0u);
}

TEST_F(Firewall, FragmentsAndTruncatedHeadersAreDroppedWithReasons) {
    rte_mbuf* fragment = t1_tcp("198.19.1.2", 50000, 443, RTE_TCP_SYN_FLAG);
    auto* iph = rte_pktmbuf_mtod_offset(fragment, rte_ipv4_hdr*, 14);
    iph->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG);
    from_tenant(slot_t1, fragment);
    EXPECT_EQ(drops(drop_reason::fragment), 1u);

    ipv4_frame_spec spec{t1_mac, gateway, ip("198.19.1.1"), ip("198.19.1.2"), IPPROTO_TCP};
    spec.payload = 0;
    rte_mbuf* shortened = ipv4_mbuf(pool, spec);  // 20-byte TCP header claimed, 8 bytes sent
    auto* short_ip = rte_pktmbuf_mtod_offset(shortened, rte_ipv4_hdr*, 14);
    short_ip->total_length = rte_cpu_to_be_16(28);
    rte_pktmbuf_trim(shortened, 12);
    from_tenant(slot_t1, shortened);
    EXPECT_EQ(drops(drop_reason::l4_truncated), 1u);
}

TEST_F(Firewall, RuleHitsCountPacketsOfTheFlowsARuleAllowed) {
    for (int i = 0; i < 3; ++i) {
        from_tenant(slot_t1, t1_tcp("198.19.1.2", 50000, 443, RTE_TCP_ACK_FLAG));
    }
    const secgroup::rule_catalog catalog(
        load_host_config_text(firewall_yaml, "h1.yaml").config.security_groups);
    EXPECT_EQ(ctx->counters.rule_hits[catalog.id(0, secgroup::direction::egress, 0)].read(), 3u);
    EXPECT_EQ(ctx->counters.flow_misses.read(), 1u) << "one classification, then NFT hits";
}

// The same host with a flow table of 64 entries (host.conntrack.max_flows), which its three
// vNICs share: 21 each by default; t3 may hold 4 (its YAML limit).
struct FlowAllowance : Firewall {
    std::string yaml = [] {
        std::string y = firewall_yaml;
        y.replace(y.find("  underlay:"), 0, "  conntrack: {max_flows: 64}\n");
        const std::string t3 = "security_groups: [open]}";
        y.replace(y.find(t3), t3.size(), "security_groups: [open], limits: {max_flows: 4}}");
        return y;
    }();
    const char* config_yaml() const override { return yaml.c_str(); }

    void SetUp() override {
        Firewall::SetUp();
        std::string error;
        ctx->flows = secgroup::flow_table::create(64, {}, rte_get_tsc_hz(), error);
        ASSERT_TRUE(ctx->flows) << error;
    }

    rte_mbuf* udp(const rte_ether_addr& src_mac, const char* src, const char* dst, uint16_t dport) {
        ipv4_frame_spec spec{src_mac, gateway, ip(src), ip(dst), IPPROTO_UDP, 5000, dport};
        return ipv4_mbuf(pool, spec);
    }
    const rte_ether_addr t3_mac = mac("02:00:c6:13:02:01");
};

TEST_F(FlowAllowance, EachVnicGetsItsYamlLimitOrAnEqualShareOfItsWorkersTable) {
    EXPECT_EQ(tables->vnics[slot_t3].max_flows, 4u);
    EXPECT_EQ(tables->vnics[slot_t1].max_flows, 64u / 3);
    EXPECT_EQ(tables->vnics[slot_t5].max_flows, 64u / 3);
}

TEST_F(FlowAllowance, NewFlowsBeyondAVnicsAllowanceAreDroppedAndCountedForItAlone) {
    for (uint16_t port = 1; port <= 6; ++port) {
        from_tenant(slot_t3, udp(t3_mac, "198.19.1.1", "198.19.1.2", port));
    }
    EXPECT_EQ(sent_to_fabric(), 4u);
    EXPECT_EQ(drops(drop_reason::conntrack_allowance_exceeded), 2u);
    const auto& t3 = ctx->counters.vnics[slot_t3];
    EXPECT_EQ(t3.conntrack_allowance_exceeded.read(), 2u);
    EXPECT_EQ(t3.drops.read(), 2u);
    EXPECT_EQ(t3.sg_denied[1].read(), 0u) << "not a security-group refusal";
    EXPECT_EQ(ctx->flows->flows_of(slot_t3), 4u);
    // Its open flows go on; another vNIC opens new ones.
    from_tenant(slot_t3, udp(t3_mac, "198.19.1.1", "198.19.1.2", 1));
    from_tenant(slot_t1, t1_tcp("198.19.1.2", 50000, 443, RTE_TCP_SYN_FLAG));
    EXPECT_EQ(sent_to_fabric(), 6u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1].conntrack_allowance_exceeded.read(), 0u);
}

TEST_F(FlowAllowance, AFloodOfNewFlowsTakesNoEntryFromAnotherVnic) {
    // t1's connection to t2, then quiet; t5 floods 200 flows to t2, nearly four times the
    // whole table.
    from_tenant(slot_t1, t1_tcp("198.19.1.2", 50000, 443, RTE_TCP_SYN_FLAG));
    from_uplink(
        tcp_to_t1("198.18.0.2", "198.19.1.2", 443, 50000, RTE_TCP_SYN_FLAG | RTE_TCP_ACK_FLAG));
    for (uint16_t port = 1; port <= 200; ++port) {
        from_tenant(slot_t5, udp(t5_mac, "198.19.1.3", "198.19.1.2", port));
        if (port % 50 == 0) {  // the fabric takes what was sent (a batch holds 256)
            for (rte_mbuf* m : ctx->tx.queued(uplink)) {
                rte_pktmbuf_free(m);
            }
            for (rte_mbuf* m : ctx->tx.queued(port_t1)) {
                rte_pktmbuf_free(m);
            }
            ctx->tx.discard_all();
        }
    }
    EXPECT_EQ(ctx->flows->flows_of(slot_t5), 64u / 3);
    EXPECT_EQ(ctx->counters.vnics[slot_t5].conntrack_allowance_exceeded.read(), 200u - 64 / 3);
    EXPECT_EQ(ctx->flows->evictions(), 0u);
    // t2's next packet on the quiet connection is still a reply.
    from_uplink(tcp_to_t1("198.18.0.2", "198.19.1.2", 443, 50000, RTE_TCP_ACK_FLAG));
    EXPECT_EQ(delivered_to_t1(), 1u);
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 0u);
}

// The IPv6 side of the groups: t1 carries "web6" (TCP 8080 from the VPC's /64, ICMPv6 from t2
// only, UDP 8081 by an IPv4 CIDR only; egress TCP 443 to t2 only and anything to the IPv4
// subnet); t5 carries "rdma6" (RDMA from t2's IPv6 address), red t3 "red-any6" (anything from
// ::/0).
const char* firewall_ipv6_yaml = R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - name: web6
    vpc: blue
    ingress:
      - {proto: tcp, ports: 8080, from: "2001:2::/64"}
      - {proto: icmp, from: "2001:2::1:2/128"}
      - {proto: udp, ports: 8081, from: 198.19.0.0/16}
    egress:
      - {proto: tcp, ports: 443, to: "2001:2::1:2/128"}
      - {proto: any, to: 198.19.1.0/24}
  - {name: rdma6, vpc: blue, ingress: [{proto: rdma, from: "2001:2::1:2/128"}]}
  - {name: red-any6, vpc: red, ingress: [{proto: any, from: "::/0"}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null1", security_groups: [web6]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, ip6: 2001:2::1:3/64, port: "net_null2", security_groups: [rdma6]}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null3", security_groups: [red-any6]}
peers:
  - {vpc: blue, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2}
  - {vpc: blue, ip: 198.19.1.4, ip6: 2001:2::1:4, host: 198.18.0.2}
  - {vpc: red, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2}
)";

struct FirewallIpv6 : PipelineTest {
    const char* config_yaml() const override { return firewall_ipv6_yaml; }

    void SetUp() override {
        PipelineTest::SetUp();
        neighbors.learn(ip("198.18.0.2"), h2_mac);
    }

    // `src` -> `dst` with protocol `proto` and destination port `dport` (from port 1000).
    rte_mbuf* frame6(const rte_ether_addr& src_mac, const char* src, const char* dst, uint8_t proto,
                     uint16_t dport) {
        rte_mbuf* m = ipv6_mbuf(pool, {src_mac, gateway, ip6(src), ip6(dst), proto});
        auto* l4 = rte_pktmbuf_mtod_offset(m, uint8_t*, sizeof(rte_ether_hdr) + 40);
        l4[2] = static_cast<uint8_t>(dport >> 8);
        l4[3] = static_cast<uint8_t>(dport);
        return m;
    }
    // The same from t2 (or another host's address) on h2, in VNI `vni`.
    rte_mbuf* from_h2(const char* src, const char* dst, uint8_t proto, uint16_t dport,
                      uint32_t vni = 100) {
        rte_mbuf* m = frame6(mac("02:00:c6:13:01:02"), src, dst, proto, dport);
        vxlan_wrap(m, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, vni);
        return m;
    }
};

TEST_F(FirewallIpv6, AnIpv6CidrRuleAdmitsAndAPortItDoesNotNameIsACountedDrop) {
    from_uplink(from_h2("2001:2::1:2", "2001:2::1:1", IPPROTO_TCP, 8080));
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u);
    from_uplink(from_h2("2001:2::1:4", "2001:2::1:1", IPPROTO_TCP, 8080));
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 2u) << "2001:2::1:4 is in 2001:2::/64 too";
    from_uplink(from_h2("2001:2::1:2", "2001:2::1:1", IPPROTO_TCP, 8081));
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 2u);
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 1u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1].sg_denied[0].read(), 1u);
    const secgroup::rule_catalog catalog(
        load_host_config_text(firewall_ipv6_yaml, "h1.yaml").config.security_groups);
    EXPECT_EQ(ctx->counters.rule_hits[catalog.id(0, secgroup::direction::ingress, 0)].read(), 2u);
}

TEST_F(FirewallIpv6, AnIpv4CidrRuleAdmitsNoIpv6AndAnIcmpRuleMeansIcmpv6) {
    from_uplink(from_h2("2001:2::1:2", "2001:2::1:1", IPPROTO_UDP, 8081));
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 1u) << "udp 8081 is allowed from IPv4 only";
    from_uplink(from_h2("2001:2::1:2", "2001:2::1:1", IPPROTO_ICMPV6, 0));
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u) << "icmp from t2's IPv6 address";
    from_uplink(from_h2("2001:2::1:4", "2001:2::1:1", IPPROTO_ICMPV6, 0));
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 2u) << "icmp from another address";
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u);
}

TEST_F(FirewallIpv6, EgressIsLimitedToTheIpv6CidrsItsRulesName) {
    from_tenant(slot_t1, frame6(t1_mac, "2001:2::1:1", "2001:2::1:2", IPPROTO_TCP, 443));
    EXPECT_EQ(ctx->tx.queued(uplink).size(), 1u);
    from_tenant(slot_t1, frame6(t1_mac, "2001:2::1:1", "2001:2::1:4", IPPROTO_TCP, 443));
    from_tenant(slot_t1, frame6(t1_mac, "2001:2::1:1", "2001:2::1:2", IPPROTO_UDP, 53));
    EXPECT_EQ(ctx->tx.queued(uplink).size(), 1u) << "'any to 198.19.1.0/24' says nothing of IPv6";
    EXPECT_EQ(drops(drop_reason::sg_denied_egress), 2u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1].sg_denied[1].read(), 2u);
}

TEST_F(FirewallIpv6, TheReplyOfAnAllowedIpv6FlowPassesBackUnsolicitedIngressDoesNot) {
    // t1 -> t2:443 is allowed egress; t2's answer (from 443 to 1000) matches no ingress rule.
    from_tenant(slot_t1, frame6(t1_mac, "2001:2::1:1", "2001:2::1:2", IPPROTO_TCP, 443));
    ASSERT_EQ(ctx->tx.queued(uplink).size(), 1u);
    rte_mbuf* reply =
        frame6(mac("02:00:c6:13:01:02"), "2001:2::1:2", "2001:2::1:1", IPPROTO_TCP, 1000);
    auto* l4 = rte_pktmbuf_mtod_offset(reply, uint8_t*, sizeof(rte_ether_hdr) + 40);
    l4[0] = 443 >> 8;
    l4[1] = 443 & 0xff;
    vxlan_wrap(reply, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, 100);
    from_uplink(reply);
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u) << "the reply of t1's own flow";
    from_uplink(from_h2("2001:2::1:2", "2001:2::1:1", IPPROTO_TCP, 1001));
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u);
    EXPECT_EQ(drops(drop_reason::sg_denied_ingress), 1u) << "a new flow from t2 to another port";
}

TEST_F(FirewallIpv6, AnAllIpv6CidrAdmitsEveryIpv6PeerOfTheVpcOnly) {
    from_uplink(from_h2("2001:2::1:2", "2001:2::1:1", IPPROTO_UDP, 7, 200));
    EXPECT_EQ(ctx->tx.queued(port_t3).size(), 1u) << "red t3 takes anything from ::/0";
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 0u) << "and blue t1 nothing of red's";
}

}  // namespace
}  // namespace jakiro::test
