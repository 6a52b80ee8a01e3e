#include "dataplane/overlay/superframe.hh"
#include "dataplane/rnic_glue/roce_port.hh"
#include "rnic/engine.hh"
#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

using Ingress = PipelineTest;

TEST_F(Ingress, TunnelledPacketIsDeliveredToTheVnicOfItsVpc) {
    from_uplink(tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.1"));
    from_uplink(tunnelled("198.18.0.2", 200, "198.19.1.2", "198.19.1.1"));
    const auto blue = ctx->tx.queued(port_t1);
    const auto red = ctx->tx.queued(port_t3);
    ASSERT_EQ(blue.size(), 1u);
    ASSERT_EQ(red.size(), 1u) << "same address, other VPC, other vNIC";
    const auto* eth = rte_pktmbuf_mtod(blue[0], const rte_ether_hdr*);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &t1_mac));
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->src_addr, &gateway));
    EXPECT_EQ(rte_pktmbuf_pkt_len(blue[0]), 14u + 20 + 8 + 64) << "outer headers stripped";
    EXPECT_EQ(ctx->counters.decapsulated.read(), 2u);
}

TEST_F(Ingress, UnknownVniIsDropped) {
    from_uplink(tunnelled("198.18.0.2", 300, "198.19.1.2", "198.19.1.1"));
    EXPECT_EQ(drops(drop_reason::vxlan_unknown_vni), 1u);
}

TEST_F(Ingress, InnerSourceFromTheWrongHostIsDroppedAsSpoofed) {
    // 198.19.1.2 lives on 198.18.0.2; the same claim from 198.18.0.9 is an injection.
    from_uplink(tunnelled("198.18.0.9", 100, "198.19.1.2", "198.19.1.1"));
    // A source that is a local vNIC cannot arrive from the fabric either.
    from_uplink(tunnelled("198.18.0.2", 100, "198.19.1.3", "198.19.1.1"));
    EXPECT_EQ(drops(drop_reason::inner_src_spoofed), 2u);
    EXPECT_TRUE(ctx->tx.queued(port_t1).empty());
}

TEST_F(Ingress, DestinationThatIsNotLocalIsDropped) {
    from_uplink(tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.9"));
    EXPECT_EQ(drops(drop_reason::inner_dst_not_local), 1u);
}

TEST_F(Ingress, FramesForOtherMacsOnTheFabricAreCountedNotDelivered) {
    rte_mbuf* m = tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.1");
    rte_pktmbuf_mtod(m, rte_ether_hdr*)->dst_addr = mac("02:00:00:00:00:77");
    from_uplink(m);
    EXPECT_EQ(drops(drop_reason::underlay_not_for_us), 1u);
}

TEST_F(Ingress, OuterCeMarksEctInnerAndDropsNotEct) {
    from_uplink(tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.1", 0x02, 0x03));
    const auto sent = ctx->tx.queued(port_t1);
    ASSERT_EQ(sent.size(), 1u);
    const auto* iph = rte_pktmbuf_mtod_offset(sent[0], const rte_ipv4_hdr*, 14);
    EXPECT_EQ(iph->type_of_service & 3, 3);
    EXPECT_EQ(rte_raw_cksum(iph, 20), 0xffff);
    from_uplink(tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.1", 0x00, 0x03));
    EXPECT_EQ(drops(drop_reason::inner_ce_on_not_ect), 1u);
}

TEST_F(Ingress, UnderlayArpForOurAddressIsAnsweredAndTheAskerLearnt) {
    from_uplink(arp_request_mbuf(pool, h2_mac, ip("198.18.0.2"), ip("198.18.0.1")));
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), 1u);
    const auto arp = parse_arp(rte_pktmbuf_mtod(sent[0], uint8_t*), rte_pktmbuf_data_len(sent[0]));
    ASSERT_TRUE(arp);
    EXPECT_EQ(arp->opcode, RTE_ARP_OP_REPLY);
    EXPECT_TRUE(rte_is_same_ether_addr(&arp->sender_mac, &h1_mac));
    const uint32_t slot = neighbors.slot_for(ip("198.18.0.2"));
    const auto learnt = neighbors.mac(slot);
    ASSERT_TRUE(learnt);
    EXPECT_TRUE(rte_is_same_ether_addr(&*learnt, &h2_mac));
}

TEST_F(Ingress, UnderlayArpForAnotherAddressIsIgnored) {
    from_uplink(arp_request_mbuf(pool, h2_mac, ip("198.18.0.2"), ip("198.18.0.5")));
    EXPECT_TRUE(ctx->tx.queued(uplink).empty());
}

TEST_F(Ingress, ArpInsideTheTunnelIsAnsweredBackThroughIt) {
    // A Linux VTEP (198.18.0.9) asks for t1 inside VNI 100.
    rte_mbuf* m =
        arp_request_mbuf(pool, mac("02:00:c6:13:01:09"), ip("198.19.1.9"), ip("198.19.1.1"));
    vxlan_wrap(m, {mac("02:00:00:00:00:09"), h1_mac, ip("198.18.0.9"), ip("198.18.0.1")}, 100);
    from_uplink(m);
    const auto sent = ctx->tx.queued(uplink);
    ASSERT_EQ(sent.size(), 1u);
    const auto* frame = rte_pktmbuf_mtod(sent[0], const uint8_t*);
    const auto outer = overlay::check_outer(frame, rte_pktmbuf_data_len(sent[0]), ip("198.18.0.9"));
    ASSERT_TRUE(outer.ok) << name_of(outer.reason);
    EXPECT_EQ(outer.view.vni, 100u);
    const auto arp = parse_arp(frame + 50, outer.view.inner_len);
    ASSERT_TRUE(arp);
    EXPECT_EQ(arp->opcode, RTE_ARP_OP_REPLY);
    EXPECT_EQ(arp->sender_ip, ip("198.19.1.1"));
}

// A host that floods ARP requests into the tunnel gets one reply each up to its allowance, the
// rest are counted drops; another host is answered as before.
TEST_F(Ingress, ArpRequestsBeyondAHostsAllowanceAreCountedDropsForThatHostOnly) {
    const auto request = [&](const char* tenant_mac, const char* tenant_ip, const char* host_mac,
                             const char* host_ip) {
        rte_mbuf* m = arp_request_mbuf(pool, mac(tenant_mac), ip(tenant_ip), ip("198.19.1.1"));
        vxlan_wrap(m, {mac(host_mac), h1_mac, ip(host_ip), ip("198.18.0.1")}, 100);
        return m;
    };
    constexpr unsigned flood = overlay_reply_buckets::burst + 100;
    const uint64_t answered = answered_of_a_flood(flood, [&] {
        return request("02:00:c6:13:01:09", "198.19.1.9", "02:00:00:00:00:09", "198.18.0.9");
    });
    EXPECT_EQ(ctx->counters.arp_replies_in_overlay.read(), answered);
    EXPECT_EQ(drops(drop_reason::inner_arp_rate_limited), flood - answered);
    // The control: another host's request is answered.
    from_uplink(request("02:00:c6:13:01:02", "198.19.1.2", "02:00:00:00:00:02", "198.18.0.2"));
    EXPECT_EQ(ctx->tx.queued(uplink).size(), answered + 1);
    EXPECT_EQ(drops(drop_reason::inner_dst_not_local), 0u);
}

TEST_F(Ingress, BurstOfMixedPacketsIsSortedOutPacketByPacket) {
    rte_mbuf* burst[] = {
        tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.1"),
        tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.3"),
        tunnelled("198.18.0.2", 300, "198.19.1.2", "198.19.1.1"),
        tunnelled("198.18.0.2", 200, "198.19.1.2", "198.19.1.1"),
    };
    process_uplink_burst(*ctx, *tables, burst, 4);
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u);
    EXPECT_EQ(ctx->tx.queued(port_t5).size(), 1u);
    EXPECT_EQ(ctx->tx.queued(port_t3).size(), 1u);
    EXPECT_EQ(drops(drop_reason::vxlan_unknown_vni), 1u);
}

// A tunnelled UDP datagram from port 4791 (or to it, where no engine takes it) is RoCE that a
// tenant's Ethernet face must never receive.
TEST_F(Ingress, InnerUdpOfTheRocePortNeverReachesATenantPort) {
    auto inner = [&](uint16_t src_port, uint16_t dst_port) {
        ipv4_frame_spec spec{mac("02:00:c6:13:01:02"), gateway, ip("198.19.1.2"), ip("198.19.1.1")};
        spec.src_port = src_port;
        spec.dst_port = dst_port;
        rte_mbuf* m = ipv4_mbuf(pool, spec);
        vxlan_wrap(m, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, 100, 0);
        return m;
    };
    from_uplink(inner(50000, 4790));
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u) << "control: other UDP is delivered";
    from_uplink(inner(4791, 50000));
    from_uplink(inner(50000, 4791));  // this fixture has no engine to take it
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u);
    EXPECT_EQ(drops(drop_reason::tenant_roce), 2u);
}

// What rte_gro merged from another host's VXLAN frames reaches a vnet face as one super-frame
// and an af_packet port cut to the tenant MTU again.
struct IngressSuperframes : PipelineTest {
    static inline rte_mempool* big = nullptr;
    static constexpr uint16_t face_t1 = vnet_face::first_face_port;

    static void SetUpTestSuite() {
        PipelineTest::SetUpTestSuite();
        if (big == nullptr) {
            big = rte_pktmbuf_pool_create("ingress_sf", 7, 0, 0, UINT16_MAX, SOCKET_ID_ANY);
        }
    }
    void TearDown() override {
        for (rte_mbuf* m : ctx->tx.queued(face_t1)) {
            rte_pktmbuf_free(m);
        }
        PipelineTest::TearDown();
    }
    void use_face_for_t1() {
        const auto loaded = load_host_config_text(config_yaml(), "h1.yaml");
        port_assignment ports{uplink, h1_mac, {face_t1, port_t5, port_t3}};
        std::string error;
        tables = build_tables(loaded.config, ports, neighbors, 1, error);
        ASSERT_TRUE(tables) << error;
    }
    // t2's 30000-byte super-frame as h2 puts it on the fabric, received and merged on h1.
    void receive_merged_from_t2() {
        rte_mbuf* m = tcp_superframe_mbuf(
            big, {mac("02:00:c6:13:01:02"), gateway, ip("198.19.1.2"), ip("198.19.1.1")}, 30000,
            1398);
        ASSERT_NE(m, nullptr);
        ASSERT_TRUE(overlay::encapsulate(m, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")},
                                         100, 0, 50000));
        rte_mbuf* wire[overlay::max_segments];
        const int n = overlay::segment_superframe(m, true, 1514, pool, wire, overlay::max_segments);
        ASSERT_GT(n, 1);
        rte_mbuf* burst[overlay::max_merged];
        for (int i = 0; i < n; ++i) {
            uint8_t bytes[1514];
            const uint32_t len = rte_pktmbuf_pkt_len(wire[i]);
            rte_pktmbuf_read(wire[i], 0, len, bytes);
            burst[i] = mbuf_from(pool, bytes, len);
            rte_pktmbuf_free(wire[i]);
        }
        const uint16_t left = overlay::merge_burst(burst, static_cast<uint16_t>(n));
        ASSERT_EQ(left, 1) << "one flow's frames of one burst merge into one";
        process_uplink_burst(*ctx, *tables, burst, left);
    }
};

TEST_F(IngressSuperframes, MergedFramesReachAVnetFaceAsOneSuperFrame) {
    use_face_for_t1();
    receive_merged_from_t2();
    const auto sent = ctx->tx.queued(face_t1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(rte_pktmbuf_pkt_len(sent[0]), 54u + 30000) << "decapsulated, whole";
    EXPECT_TRUE(sent[0]->ol_flags & RTE_MBUF_F_TX_TCP_SEG);
    EXPECT_EQ(sent[0]->tso_segsz, 1398);
    const auto hdr = vnet_face::from_mbuf(sent[0]);
    EXPECT_EQ(hdr.gso_type, vnet_face::VIRTIO_NET_HDR_GSO_TCPV4);
    EXPECT_EQ(hdr.flags, vnet_face::VIRTIO_NET_HDR_F_NEEDS_CSUM);
    const auto* eth = rte_pktmbuf_mtod(sent[0], const rte_ether_hdr*);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &t1_mac));
}

TEST_F(IngressSuperframes, MergedFramesReachAnAfPacketPortCutToTheTenantMtu) {
    receive_merged_from_t2();
    const auto sent = ctx->tx.queued(port_t1);
    ASSERT_EQ(sent.size(), (30000u + 1397) / 1398);
    uint32_t payload = 0;
    for (rte_mbuf* frame : sent) {
        EXPECT_LE(rte_pktmbuf_pkt_len(frame), 14u + 1450);
        uint8_t bytes[1514];
        rte_pktmbuf_read(frame, 0, rte_pktmbuf_pkt_len(frame), bytes);
        EXPECT_TRUE(l4_checksum_ok(reinterpret_cast<const rte_ipv4_hdr*>(bytes + 14)));
        payload += rte_pktmbuf_pkt_len(frame) - 54;
    }
    EXPECT_EQ(payload, 30000u);
}

}  // namespace
}  // namespace jakiro::test

namespace jakiro::test {
namespace {

// RoCEv2 leaves the pipeline for the RNIC, but only after the RFC 6040 step: the outer CE the
// fabric set is DCQCN's congestion signal, and the engine reads it from the inner header (that
// an inner CE makes the receiver send a CNP is pinned in tests/unit/rnic/dcqcn_test.cc,
// a_ce_mark_from_the_fabric_makes_the_receiver_send_a_cnp_and_the_sender_slow).
struct IngressRoce : PipelineTest {
    rnic::engine engine{4, 16};
    std::unique_ptr<roce_port> port;

    void SetUp() override {
        PipelineTest::SetUp();
        port = std::make_unique<roce_port>(*ctx);
        ctx->engine = &engine;
        ctx->rdma_port = port.get();
    }

    rte_mbuf* roce_from_h2(uint8_t inner_tos, uint8_t outer_tos) {
        ipv4_frame_spec spec{mac("02:00:c6:13:01:02"), gateway, ip("198.19.1.2"), ip("198.19.1.1")};
        spec.dst_port = rnic::roce_udp_port;
        spec.tos = inner_tos;
        rte_mbuf* m = ipv4_mbuf(pool, spec);
        vxlan_wrap(m, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, 100, outer_tos);
        return m;
    }
};

TEST_F(IngressRoce, OuterCeOnRoceReachesTheEngineAsInnerCeAndNotEctUnderCeIsDropped) {
    from_uplink(roce_from_h2(0x02, 0x03));  // ECT(0) inside, CE outside
    EXPECT_EQ(ctx->counters.ce_marked_on_decap.read(), 1u) << "the RFC 6040 step ran";
    EXPECT_EQ(engine.counters().received.read(), 1u) << "then the RNIC got it";
    EXPECT_EQ(ctx->counters.vnics[slot_t1].rdma_rx_packets.read(), 1u);

    from_uplink(roce_from_h2(0x00, 0x03));  // Not-ECT inside, CE outside
    EXPECT_EQ(drops(drop_reason::inner_ce_on_not_ect), 1u);
    EXPECT_EQ(engine.counters().received.read(), 1u) << "RFC 6040: dropped, not delivered";
}

}  // namespace
}  // namespace jakiro::test
