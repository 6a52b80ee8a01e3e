#include "dataplane/shaping/ingress_policer.hh"
#include "dataplane/worker/clock.hh"
#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

using Egress = PipelineTest;

TEST_F(Egress, TenantArpForAVpcAddressIsAnsweredWithTheGatewayMac) {
    from_tenant(slot_t1, arp_request_mbuf(pool, t1_mac, ip("198.19.1.2"), ip("198.19.1.1")));
    EXPECT_EQ(drops(drop_reason::tenant_arp_ignored), 1u) << "sender IP must be the vNIC's";

    from_tenant(slot_t1, arp_request_mbuf(pool, t1_mac, ip("198.19.1.1"), ip("198.19.1.2")));
    const auto sent = ctx->tx.queued(port_t1);
    ASSERT_EQ(sent.size(), 1u);
    const auto arp = parse_arp(rte_pktmbuf_mtod(sent[0], uint8_t*), rte_pktmbuf_data_len(sent[0]));
    ASSERT_TRUE(arp);
    EXPECT_EQ(arp->opcode, RTE_ARP_OP_REPLY);
    EXPECT_EQ(arp->sender_ip, ip("198.19.1.2"));
    EXPECT_TRUE(rte_is_same_ether_addr(&arp->sender_mac, &gateway));
}

TEST_F(Egress, TenantArpForAnUnknownAddressIsNotAnswered) {
    from_tenant(slot_t1, arp_request_mbuf(pool, t1_mac, ip("198.19.1.1"), ip("198.19.1.77")));
    EXPECT_TRUE(ctx->tx.queued(port_t1).empty());
    EXPECT_EQ(drops(drop_reason::tenant_arp_ignored), 1u);
}

TEST_F(Egress, SameHostDestinationIsSwitchedPortToPortWithoutTunnel) {
    from_tenant(slot_t1, t1_packet("198.19.1.3"));
    const auto sent = ctx->tx.queued(port_t5);
    ASSERT_EQ(sent.size(), 1u);
    const auto* eth = rte_pktmbuf_mtod(sent[0], const rte_ether_hdr*);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &t5_mac));
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->src_addr, &gateway));
    EXPECT_EQ(eth->ether_type, rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4));
    EXPECT_TRUE(ctx->tx.queued(uplink).empty());
    EXPECT_EQ(ctx->counters.vnics[slot_t5].to_tenant_packets.read(), 1u);
}

TEST_F(Egress, RemoteDestinationWaitsForTheUnderlayNeighbour) {
    from_tenant(slot_t1, t1_packet("198.19.1.2"));
    EXPECT_EQ(drops(drop_reason::underlay_neighbor_unresolved), 1u);
    EXPECT_TRUE(ctx->tx.queued(uplink).empty());
}

TEST_F(Egress, RemoteDestinationIsEncapsulatedWithTheVpcVni) {
    neighbors.learn(ip("198.18.0.2"), h2_mac);
    from_tenant(slot_t1, t1_packet("198.19.1.2", 0x02));
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), 1u);
    const auto* frame = rte_pktmbuf_mtod(sent[0], const uint8_t*);
    const auto outer = overlay::check_outer(frame, rte_pktmbuf_data_len(sent[0]), ip("198.18.0.2"));
    ASSERT_TRUE(outer.ok) << name_of(outer.reason);
    EXPECT_EQ(outer.view.vni, 100u);
    EXPECT_EQ(outer.view.outer_tos, 0x02) << "ECN copied to the outer header";
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &h2_mac));
    EXPECT_EQ(ctx->counters.encapsulated.read(), 1u);
}

TEST_F(Egress, RedTenantWithTheSameAddressTunnelsInItsOwnVni) {
    neighbors.learn(ip("198.18.0.2"), h2_mac);
    ipv4_frame_spec spec{mac("02:00:c6:13:02:01"), gateway, ip("198.19.1.1"), ip("198.19.1.2")};
    from_tenant(slot_t3, ipv4_mbuf(pool, spec));
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), 1u);
    const auto outer = overlay::check_outer(rte_pktmbuf_mtod(sent[0], const uint8_t*),
                                            rte_pktmbuf_data_len(sent[0]), ip("198.18.0.2"));
    EXPECT_EQ(outer.view.vni, 200u);
}

TEST_F(Egress, ConfiguredInnerMacIsUsedForForeignVteps) {
    neighbors.learn(ip("198.18.0.9"), mac("02:00:00:00:00:09"));
    from_tenant(slot_t1, t1_packet("198.19.1.9"));
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), 1u);
    const auto* inner = rte_pktmbuf_mtod_offset(sent[0], const rte_ether_hdr*, 50);
    const auto expected = mac("02:00:c6:13:01:09");
    EXPECT_TRUE(rte_is_same_ether_addr(&inner->dst_addr, &expected));
}

TEST_F(Egress, SpoofedSourceAddressIsDroppedAndCharged) {
    ipv4_frame_spec spec{t1_mac, gateway, ip("198.19.1.3"), ip("198.19.1.2")};
    from_tenant(slot_t1, ipv4_mbuf(pool, spec));
    spec.src_ip = ip("198.19.1.1");
    spec.src_mac = t5_mac;
    from_tenant(slot_t1, ipv4_mbuf(pool, spec));
    EXPECT_EQ(drops(drop_reason::tenant_src_spoofed), 2u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1].drops.read(), 2u);
}

TEST_F(Egress, AddressOutsideTheVpcIsAVltMiss) {
    from_tenant(slot_t1, t1_packet("198.19.2.2"));
    EXPECT_EQ(drops(drop_reason::vlt_miss), 1u);
}

TEST_F(Egress, BroadcastLldpMislabelledAndOversizedFramesAreDroppedWithReasons) {
    from_tenant(slot_t1, t1_packet("255.255.255.255"));
    EXPECT_EQ(drops(drop_reason::tenant_not_unicast), 1u);

    rte_mbuf* lldp = t1_packet("198.19.1.2");
    rte_pktmbuf_mtod(lldp, rte_ether_hdr*)->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_LLDP);
    from_tenant(slot_t1, lldp);
    EXPECT_EQ(drops(drop_reason::tenant_unsupported_ethertype), 1u);

    rte_mbuf* v6 = t1_packet("198.19.1.2");  // an IPv4 packet labelled IPv6
    rte_pktmbuf_mtod(v6, rte_ether_hdr*)->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
    from_tenant(slot_t1, v6);
    EXPECT_EQ(drops(drop_reason::tenant_bad_ip_header), 1u);

    ipv4_frame_spec big{t1_mac, gateway, ip("198.19.1.1"), ip("198.19.1.2")};
    big.payload = 1500;
    from_tenant(slot_t1, ipv4_mbuf(pool, big));
    EXPECT_EQ(drops(drop_reason::tenant_too_big), 1u);
}

TEST_F(Egress, TruncatedAndLyingIpHeadersAreDropped) {
    rte_mbuf* shortened = t1_packet("198.19.1.2");
    rte_pktmbuf_trim(shortened, rte_pktmbuf_pkt_len(shortened) - 20);
    from_tenant(slot_t1, shortened);
    EXPECT_EQ(drops(drop_reason::tenant_truncated), 1u);

    rte_mbuf* lying = t1_packet("198.19.1.2");
    rte_pktmbuf_mtod_offset(lying, rte_ipv4_hdr*, 14)->total_length = rte_cpu_to_be_16(1400);
    from_tenant(slot_t1, lying);
    EXPECT_EQ(drops(drop_reason::tenant_bad_ip_header), 1u);
}

TEST_F(Egress, EthernetPaddingIsNotCarriedIntoTheTunnel) {
    neighbors.learn(ip("198.18.0.2"), h2_mac);
    ipv4_frame_spec spec{t1_mac, gateway, ip("198.19.1.1"), ip("198.19.1.2")};
    spec.payload = 2;  // 44-byte frame
    rte_mbuf* m = ipv4_mbuf(pool, spec);
    std::memset(rte_pktmbuf_append(m, 16), 0, 16);  // padded to 60 as on the wire
    from_tenant(slot_t1, m);
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(rte_pktmbuf_pkt_len(sent[0]), 50u + 14 + 20 + 8 + 2);
}

// RoCE comes only from a vNIC's engine: a tenant's crafted RoCEv2 (UDP 4791, BTH + RETH) or
// CNP on its Ethernet face goes nowhere, on this host or across the fabric.
TEST_F(Egress, TenantRoceOnTheEthernetFaceIsDroppedHereAndAcrossTheFabric) {
    neighbors.learn(ip("198.18.0.2"), h2_mac);
    auto udp = [&](const char* dst, uint16_t src_port, uint16_t dst_port) {
        ipv4_frame_spec spec{t1_mac, gateway, ip("198.19.1.1"), ip(dst)};
        spec.src_port = src_port;
        spec.dst_port = dst_port;
        spec.payload = 12 + 16 + 64 + 4;  // BTH, RETH, data, ICRC
        rte_mbuf* m = ipv4_mbuf(pool, spec);
        auto* bth = rte_pktmbuf_mtod_offset(m, uint8_t*, 14 + 20 + 8);
        bth[0] = 0x0A;  // RC RDMA WRITE Only
        bth[2] = bth[3] = 0xFF;
        return m;
    };
    // Control: the same sender's UDP to a neighbouring port leaves, to t5 and to t2.
    from_tenant(slot_t1, udp("198.19.1.3", 50000, 4790));
    from_tenant(slot_t1, udp("198.19.1.2", 50000, 4790));
    EXPECT_EQ(ctx->tx.queued(port_t5).size(), 1u);
    EXPECT_EQ(ctx->tx.queued(uplink).size(), 1u);
    EXPECT_EQ(drops(drop_reason::tenant_roce), 0u);
    // RoCEv2 to 4791 and anything from 4791 (a forged response or CNP source), both ways.
    from_tenant(slot_t1, udp("198.19.1.3", 50000, 4791));
    from_tenant(slot_t1, udp("198.19.1.2", 50000, 4791));
    from_tenant(slot_t1, udp("198.19.1.3", 4791, 4791));
    from_tenant(slot_t1, udp("198.19.1.2", 4791, 1234));
    EXPECT_EQ(ctx->tx.queued(port_t5).size(), 1u) << "nothing more reached t5";
    EXPECT_EQ(ctx->tx.queued(uplink).size(), 1u) << "nothing more left for the fabric";
    EXPECT_EQ(drops(drop_reason::tenant_roce), 4u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1].drops.read(), 4u);
    // Fragments: the first one carries the port and is judged like the datagram; a later one
    // carries no UDP header and never passes the firewall (nor reaches an engine as RoCE).
    rte_mbuf* first = udp("198.19.1.2", 50000, 4791);
    rte_pktmbuf_mtod_offset(first, rte_ipv4_hdr*, 14)->fragment_offset =
        rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG);
    from_tenant(slot_t1, first);
    EXPECT_EQ(drops(drop_reason::tenant_roce), 5u);
    rte_mbuf* later = udp("198.19.1.2", 50000, 4791);
    rte_pktmbuf_mtod_offset(later, rte_ipv4_hdr*, 14)->fragment_offset = rte_cpu_to_be_16(3);
    from_tenant(slot_t1, later);
    EXPECT_EQ(drops(drop_reason::fragment), 1u);
    EXPECT_EQ(ctx->tx.queued(uplink).size(), 1u);
}

}  // namespace
}  // namespace jakiro::test

namespace jakiro::test {
namespace {

// t5 receives at 1 Mbit/s: its ingress meter holds what reaches it, from the fabric or, here,
// from t1 on the same host.
struct EgressToAShapedNeighbour : PipelineTest {
    const char* config_yaml() const override {
        return R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}]
security_groups:
  - {name: blue-open, vpc: blue, ingress: [{proto: any, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "net_null1", security_groups: [blue-open]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, port: "net_null2", security_groups: [blue-open], qos: {rate: 1Mbit, burst: 1000}}
)";
    }
    void SetUp() override {
        PipelineTest::SetUp();
        policer.sync(*tables, 0, now_ns());
        ctx->policer = &policer;
    }
    ingress_policer policer;
};

TEST_F(EgressToAShapedNeighbour, SameHostFramesMeetTheReceiversIngressMeter) {
    constexpr unsigned frames = 64;
    for (unsigned i = 0; i < frames; ++i) {
        from_tenant(slot_t1, t1_packet("198.19.1.3"));  // not ECN-capable
    }
    const auto delivered = ctx->tx.queued(port_t5).size();
    EXPECT_GT(delivered, 0u) << "a burst passes";
    EXPECT_LT(delivered, frames) << "beyond it, the share holds";
    EXPECT_EQ(delivered + drops(drop_reason::qos_ingress_over_share), frames);
}

TEST_F(EgressToAShapedNeighbour, SameHostEcnCapableFramesAreMarkedNotDropped) {
    for (unsigned i = 0; i < 8; ++i) {
        from_tenant(slot_t1, t1_packet("198.19.1.3", 0x02));  // ECT(0)
    }
    EXPECT_EQ(drops(drop_reason::qos_ingress_over_share), 0u);
    EXPECT_GT(ctx->counters.qos_ce_marked.read(), 0u);
    bool some_ce = false;
    for (rte_mbuf* m : ctx->tx.queued(port_t5)) {
        const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, sizeof(rte_ether_hdr));
        some_ce |= (ip->type_of_service & 0x03) == 0x03;
    }
    EXPECT_TRUE(some_ce);
}

// Super-frames from a vnet face (vnet_face/vnet_header.hh): judged once, then cut only where a
// wire or a port needs MTU-sized frames.
struct EgressSuperframes : PipelineTest {
    static inline rte_mempool* big = nullptr;
    static constexpr uint16_t face_t5 = vnet_face::first_face_port;  // t5 behind a vnet face
    bool t5_on_face = false;

    static void SetUpTestSuite() {
        PipelineTest::SetUpTestSuite();
        if (big == nullptr) {
            big = rte_pktmbuf_pool_create("egress_sf", 7, 0, 0, UINT16_MAX, SOCKET_ID_ANY);
        }
    }
    void SetUp() override {
        PipelineTest::SetUp();
        neighbors.learn(ip("198.18.0.2"), h2_mac);
    }
    void use_face_for_t5() {
        const auto loaded = load_host_config_text(config_yaml(), "h1.yaml");
        port_assignment ports{uplink, h1_mac, {port_t1, face_t5, port_t3}};
        std::string error;
        tables = build_tables(loaded.config, ports, neighbors, 1, error);
        ASSERT_TRUE(tables) << error;
        t5_on_face = true;
    }
    void TearDown() override {
        for (rte_mbuf* m : ctx->tx.queued(face_t5)) {
            rte_pktmbuf_free(m);
        }
        PipelineTest::TearDown();
        EXPECT_EQ(rte_mempool_in_use_count(big), 0u) << "super-frames freed once cut and sent";
    }
    rte_mbuf* superframe(const char* dst, uint32_t bytes, uint16_t mss) {
        return tcp_superframe_mbuf(big, {t1_mac, gateway, ip("198.19.1.1"), ip(dst)}, bytes, mss);
    }
    uint64_t allowed_out() const {
        return ctx->counters.vnics[slot_t1]
            .sg_allowed[static_cast<std::size_t>(secgroup::direction::egress)]
            .read();
    }
};

TEST_F(EgressSuperframes, SuperFrameToAnotherHostIsJudgedOnceAndLeavesAsMtuSizedVxlan) {
    rte_mbuf* m = superframe("198.19.1.2", 60000, 1398);
    ASSERT_NE(m, nullptr);
    from_tenant(slot_t1, m);
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), (60000u + 1397) / 1398);
    for (rte_mbuf* frame : sent) {
        EXPECT_LE(rte_pktmbuf_pkt_len(frame), 1514u);
        uint8_t bytes[1514];
        const auto* data = static_cast<const uint8_t*>(
            rte_pktmbuf_read(frame, 0, rte_pktmbuf_pkt_len(frame), bytes));
        EXPECT_TRUE(overlay::check_outer(data, rte_pktmbuf_pkt_len(frame), ip("198.18.0.2")).ok);
    }
    EXPECT_EQ(allowed_out(), 1u) << "one security-group decision for the whole super-frame";
    EXPECT_EQ(ctx->counters.encapsulated.read(), sent.size());
}

TEST_F(EgressSuperframes, SuperFrameToAVnetFaceOnTheSameHostGoesWhole) {
    use_face_for_t5();
    from_tenant(slot_t1, superframe("198.19.1.3", 60000, 1398));
    const auto sent = ctx->tx.queued(face_t5);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_TRUE(sent[0]->ol_flags & RTE_MBUF_F_TX_TCP_SEG);
    EXPECT_EQ(sent[0]->tso_segsz, 1398);
    EXPECT_EQ(rte_pktmbuf_pkt_len(sent[0]), 60054u);
    const auto* eth = rte_pktmbuf_mtod(sent[0], const rte_ether_hdr*);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &t5_mac));
}

TEST_F(EgressSuperframes, SuperFrameToAnAfPacketNeighbourIsCutToTheTenantMtu) {
    from_tenant(slot_t1, superframe("198.19.1.3", 20000, 1398));
    const auto sent = ctx->tx.queued(port_t5);
    ASSERT_EQ(sent.size(), (20000u + 1397) / 1398);
    for (rte_mbuf* frame : sent) {
        EXPECT_LE(rte_pktmbuf_pkt_len(frame), 14u + 1450);
        EXPECT_EQ(frame->ol_flags & RTE_MBUF_F_TX_TCP_SEG, 0u);
    }
}

TEST_F(EgressSuperframes, SuperFrameWhoseSegmentsExceedTheMtuIsDropped) {
    from_tenant(slot_t1, superframe("198.19.1.2", 20000, 1411));  // 1451-byte packets
    from_tenant(slot_t1, superframe("198.19.1.2", 60000, 500));   // 120 frames
    EXPECT_EQ(drops(drop_reason::tenant_bad_superframe), 2u);
    EXPECT_TRUE(ctx->tx.queued(uplink).empty());
}

}  // namespace
}  // namespace jakiro::test
