// IPv6 data between dual-stack vNICs of one VPC: switched to a vNIC of this host, tunnelled to
// another host (the outer header IPv4, DSCP and ECN from the traffic class), received from the
// fabric after the checks IPv4 gets, and judged by the security groups' IPv6 side; neighbour
// solicitations inside the tunnel (a foreign VTEP's) answered back through it.

#include <array>
#include <cstring>

#include "dataplane/neighbor_discovery.hh"
#include "dataplane/overlay/ipv6_packet.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/vnet_face/face_registry.hh"
#include "dataplane/worker/clock.hh"
#include "dataplane/worker/overlay_reply_buckets.hh"
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
  - {vpc: blue, ip: 198.19.1.6, ip6: 2001:2::1:6, host: 198.18.0.6}
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

// TCPv6 super-frames take the road TCPv4 ones take (docs/superframes.md, "TCP over IPv6").
struct ForwardingIpv6Superframes : ForwardingIpv6 {
    static inline rte_mempool* big = nullptr;
    static constexpr uint16_t face_t1 = vnet_face::first_face_port;

    static void SetUpTestSuite() {
        ForwardingIpv6::SetUpTestSuite();
        if (big == nullptr) {
            big = rte_pktmbuf_pool_create("fwd6_sf", 7, 0, 0, UINT16_MAX, SOCKET_ID_ANY);
        }
    }
    void SetUp() override {
        ForwardingIpv6::SetUp();
        neighbors.learn(ip("198.18.0.2"), h2_mac);
    }
    void TearDown() override {
        for (rte_mbuf* m : ctx->tx.queued(face_t1)) {
            rte_pktmbuf_free(m);
        }
        ForwardingIpv6::TearDown();
        EXPECT_EQ(rte_mempool_in_use_count(big), 0u) << "super-frames freed once cut and sent";
    }
    void use_face_for_t1() {
        const auto loaded = load_host_config_text(config_yaml(), "h1.yaml");
        port_assignment ports{uplink, h1_mac, {face_t1, port_t5, port_t3}};
        std::string error;
        tables = build_tables(loaded.config, ports, neighbors, 1, error);
        ASSERT_TRUE(tables) << error;
    }
    rte_mbuf* superframe(const rte_ether_addr& src_mac, const char* src, const char* dst,
                         uint32_t bytes, uint16_t mss) {
        return tcp6_superframe_mbuf(big, {src_mac, gateway, ip6(src), ip6(dst)}, bytes, mss);
    }
    // t2's super-frame as h2 cuts it onto the fabric, received and merged on h1.
    void receive_merged_from_t2(uint32_t bytes) {
        rte_mbuf* m =
            superframe(mac("02:00:c6:13:01:02"), "2001:2::1:2", "2001:2::1:1", bytes, 1378);
        ASSERT_NE(m, nullptr);
        ASSERT_TRUE(overlay::encapsulate(m, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")},
                                         100, 0, 50000));
        rte_mbuf* wire[overlay::max_segments];
        const int n = overlay::segment_superframe(m, true, 1514, pool, wire, overlay::max_segments);
        ASSERT_GT(n, 1);
        rte_mbuf* burst[overlay::max_merged];
        for (int i = 0; i < n; ++i) {
            const std::vector<uint8_t> b = bytes_of(wire[i]);
            burst[i] = mbuf_from(pool, b.data(), b.size());
            rte_pktmbuf_free(wire[i]);
        }
        const uint16_t left = overlay::merge_burst(burst, static_cast<uint16_t>(n));
        ASSERT_EQ(left, 1) << "one flow's frames of one burst merge into one";
        process_uplink_burst(*ctx, *tables, burst, left);
    }
};

TEST_F(ForwardingIpv6Superframes, ATcpv6SuperFrameToAnotherHostIsJudgedOnceAndLeavesAsMtuFrames) {
    from_tenant(slot_t1, superframe(t1_mac, "2001:2::1:1", "2001:2::1:2", 60000, 1378));
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), (60000u + 1377) / 1378);
    uint32_t payload = 0;
    for (rte_mbuf* frame : sent) {
        const std::vector<uint8_t> bytes = bytes_of(frame);
        EXPECT_LE(bytes.size(), 1514u);
        EXPECT_TRUE(overlay::check_outer(bytes.data(), bytes.size(), ip("198.18.0.2")).ok);
        const auto* inner = reinterpret_cast<const rte_ipv6_hdr*>(bytes.data() + 64);
        EXPECT_TRUE(l4_checksum_ok(inner)) << "TCP checksum over the IPv6 pseudo-header";
        payload += bytes.size() - 64 - 60;
    }
    EXPECT_EQ(payload, 60000u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1]
                  .sg_allowed[static_cast<std::size_t>(secgroup::direction::egress)]
                  .read(),
              1u)
        << "one security-group decision for the whole super-frame";
    EXPECT_EQ(ctx->counters.encapsulated.read(), sent.size());
}

TEST_F(ForwardingIpv6Superframes, ATcpv6SuperFrameToAnAfPacketNeighbourIsCutToTheTenantMtu) {
    from_tenant(slot_t1, superframe(t1_mac, "2001:2::1:1", "2001:2::1:3", 20000, 1378));
    const auto sent = ctx->tx.queued(port_t5);
    ASSERT_EQ(sent.size(), (20000u + 1377) / 1378);
    for (rte_mbuf* frame : sent) {
        const std::vector<uint8_t> bytes = bytes_of(frame);
        EXPECT_LE(bytes.size(), 14u + 1450);
        EXPECT_TRUE(l4_checksum_ok(reinterpret_cast<const rte_ipv6_hdr*>(bytes.data() + 14)));
    }
}

TEST_F(ForwardingIpv6Superframes, ATcpv6SuperFrameWhoseSegmentsExceedTheMtuIsDropped) {
    from_tenant(slot_t1, superframe(t1_mac, "2001:2::1:1", "2001:2::1:2", 20000, 1391));
    EXPECT_EQ(drops(drop_reason::tenant_bad_superframe), 1u) << "1451-byte packets";
    EXPECT_TRUE(ctx->tx.queued(uplink).empty());
}

TEST_F(ForwardingIpv6Superframes, MergedTcpv6FramesReachAVnetFaceAsOneGsoTcpv6SuperFrame) {
    use_face_for_t1();
    receive_merged_from_t2(30000);
    const auto sent = ctx->tx.queued(face_t1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(rte_pktmbuf_pkt_len(sent[0]), 74u + 30000) << "decapsulated, whole";
    const auto hdr = vnet_face::from_mbuf(sent[0]);
    EXPECT_EQ(hdr.gso_type, vnet_face::VIRTIO_NET_HDR_GSO_TCPV6);
    EXPECT_EQ(hdr.gso_size, 1378);
    EXPECT_EQ(hdr.flags, vnet_face::VIRTIO_NET_HDR_F_NEEDS_CSUM);
    EXPECT_EQ(hdr.csum_start, 54);
    const auto* eth = rte_pktmbuf_mtod(sent[0], const rte_ether_hdr*);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &t1_mac));
}

TEST_F(ForwardingIpv6Superframes, MergedTcpv6FramesReachAnAfPacketPortCutToTheTenantMtu) {
    receive_merged_from_t2(30000);
    const auto sent = ctx->tx.queued(port_t1);
    ASSERT_EQ(sent.size(), (30000u + 1377) / 1378);
    uint32_t payload = 0;
    for (rte_mbuf* frame : sent) {
        const std::vector<uint8_t> bytes = bytes_of(frame);
        EXPECT_LE(bytes.size(), 14u + 1450);
        EXPECT_TRUE(l4_checksum_ok(reinterpret_cast<const rte_ipv6_hdr*>(bytes.data() + 14)));
        payload += bytes.size() - 74;
    }
    EXPECT_EQ(payload, 30000u);
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

// A host that floods solicitations into the tunnel gets one reply each up to its allowance, the
// rest are counted drops; another host is answered as before.
TEST_F(ForwardingIpv6, SolicitationsBeyondAHostsAllowanceAreCountedDropsForThatHostOnly) {
    constexpr unsigned flood = overlay_reply_buckets::burst + 100;
    const uint64_t answered = answered_of_a_flood(flood, [&] {
        return tunnelled_solicitation("198.18.0.2", 100, "2001:2::1:2", "2001:2::1:1");
    });
    EXPECT_EQ(ctx->counters.nd_replies_in_overlay.read(), answered);
    EXPECT_EQ(drops(drop_reason::inner_nd_rate_limited), flood - answered);
    // The control: another host's solicitation is answered.
    from_uplink(tunnelled_solicitation("198.18.0.6", 100, "2001:2::1:6", "2001:2::1:1"));
    EXPECT_EQ(ctx->tx.queued(uplink).size(), answered + 1);
    EXPECT_EQ(drops(drop_reason::inner_nd_ignored), 0u);
}

}  // namespace
}  // namespace jakiro::test
