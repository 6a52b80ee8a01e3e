// DHTB ingress for IPv6 (shaping/ingress_metering.hh): TCP and UDP over IPv6 that a shaped vNIC
// receives from the fabric meet its tcp class, charged as they were on the wire; above the share
// an ECN-capable packet is marked CE in its traffic class and the others are dropped and counted.

#include "dataplane/shaping/ingress_policer.hh"

#include "dataplane/overlay/ipv6_packet.hh"
#include "dataplane/worker/clock.hh"
#include "tests/unit/dataplane/shaping/shaped_host_fixture.hh"

namespace jakiro::test {
namespace {

struct IngressMeteringIpv6 : ShapedHostTest {
    IngressMeteringIpv6() : ShapedHostTest("16KiB", "max_packet_buffers: 600") {}

    void SetUp() override {
        ShapedHostTest::SetUp();
        policer.sync(*tables, 0, now_ns());
        ctx->policer = &policer;
    }

    // `count` IPv6 frames of 1000 bytes from t2 (h2) to t1, with ECN codepoint `ecn`.
    void from_t2(unsigned count, uint8_t next_header, uint8_t ecn) {
        for (unsigned i = 0; i < count; ++i) {
            rte_mbuf* m = ipv6_mbuf(pool, {mac("02:00:c6:13:01:02"), gateway, ip6("2001:2::1:2"),
                                           ip6("2001:2::1:1"), next_header, 1000});
            auto* iph = rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, sizeof(rte_ether_hdr));
            iph->vtc_flow = rte_cpu_to_be_32((6u << 28) | (uint32_t{ecn} << 20));
            vxlan_wrap(m, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, 100);
            from_uplink(m);
        }
    }
    qos::ingress_class_counters of(qos::traffic_class c) const {
        return policer.meter(slot_t1)->counters(c);
    }

    ingress_policer policer;
};

TEST_F(IngressMeteringIpv6, TcpAndUdpOverIpv6AreTheTcpClassChargedAsOnTheWire) {
    from_t2(2, IPPROTO_TCP, 0);
    from_t2(2, IPPROTO_UDP, 0);
    ASSERT_EQ(ctx->tx.queued(port_t1).size(), 4u);
    const auto tcp = of(qos::traffic_class::tcp);
    EXPECT_EQ(tcp.packets, 4u);
    // The inner frame (14 + 40 + 1000) and the 50 bytes of VXLAN around it.
    EXPECT_EQ(tcp.bytes, 4u * qos::charged_bytes(14 + 40 + 1000));
    EXPECT_EQ(of(qos::traffic_class::rdma).packets, 0u);
}

TEST_F(IngressMeteringIpv6, AboveTheShareEcnCapableIpv6IsMarkedCeInItsTrafficClass) {
    // 200 KB at once (a transmit batch holds 256 frames): far beyond the burst and 5 ms of
    // 100 Mbit/s.
    from_t2(200, IPPROTO_TCP, 0x02);  // ECT(0)
    EXPECT_EQ(drops(drop_reason::qos_ingress_over_share), 0u);
    EXPECT_GT(ctx->counters.qos_ce_marked.read(), 0u);
    unsigned marked = 0;
    for (rte_mbuf* m : ctx->tx.queued(port_t1)) {
        const auto* iph = rte_pktmbuf_mtod_offset(m, const rte_ipv6_hdr*, sizeof(rte_ether_hdr));
        marked += (overlay::ipv6_traffic_class(iph) & 0x03) == 0x03;
    }
    EXPECT_EQ(marked, of(qos::traffic_class::tcp).ce_marked);
    EXPECT_GT(marked, 0u);
}

TEST_F(IngressMeteringIpv6, AboveTheShareNotEcnCapableIpv6IsDroppedAndCounted) {
    from_t2(200, IPPROTO_UDP, 0);
    const auto delivered = ctx->tx.queued(port_t1).size();
    EXPECT_GT(delivered, 0u) << "a burst passes";
    EXPECT_EQ(delivered + drops(drop_reason::qos_ingress_over_share), 200u);
    EXPECT_EQ(of(qos::traffic_class::tcp).dropped, 200u - delivered);
}

}  // namespace
}  // namespace jakiro::test
