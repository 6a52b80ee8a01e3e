#include "dataplane/worker/fabric_dispatch.hh"

#include <random>

#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/vxlan.hh"
#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

// h1 of the test bed with two workers: t1 and t3 on worker 0, t5 on worker 1.
struct FabricDispatch : PipelineTest {
    FabricDispatch() { vnic_workers = {0, 1, 0}; }
    uint8_t owner(rte_mbuf* m) {
        const uint8_t w = fabric_frame_owner(*tables, m, 0);
        rte_pktmbuf_free(m);
        return w;
    }
};

TEST_F(FabricDispatch, AFrameGoesToTheWorkerOfItsDestinationVnic) {
    EXPECT_EQ(owner(tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.3")), 1) << "t5";
    EXPECT_EQ(owner(tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.1")), 0) << "t1";
    EXPECT_EQ(owner(tunnelled("198.18.0.2", 200, "198.19.1.2", "198.19.1.1")), 0)
        << "t3: same address as t1, the VNI decides";
}

TEST_F(FabricDispatch, WhatIsNoVnicsStaysWithTheUplinksWorkerToBeDroppedAndCounted) {
    EXPECT_EQ(owner(tunnelled("198.18.0.2", 300, "198.19.1.2", "198.19.1.3")), 0) << "bad VNI";
    EXPECT_EQ(owner(tunnelled("198.18.0.2", 200, "198.19.1.2", "198.19.1.3")), 0)
        << "red has no 198.19.1.3";
    rte_mbuf* truncated = tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.3");
    rte_pktmbuf_trim(truncated, rte_pktmbuf_pkt_len(truncated) - 60);
    EXPECT_EQ(owner(truncated), 0);
    rte_mbuf* not_ours = tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.3");
    rte_pktmbuf_mtod(not_ours, rte_ether_hdr*)->dst_addr = mac("02:00:00:00:00:99");
    EXPECT_EQ(owner(not_ours), 0);
}

// Each worker's engine runs its own vNICs' QPs, so RoCEv2 goes where TCP goes.
TEST_F(FabricDispatch, RoceGoesToTheWorkerWhoseEngineRunsTheVnicsQps) {
    ipv4_frame_spec spec{mac("02:00:c6:13:01:02"), gateway, ip("198.19.1.2"), ip("198.19.1.3")};
    spec.dst_port = 4791;
    rte_mbuf* m = ipv4_mbuf(pool, spec);
    vxlan_wrap(m, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, 100, 0);
    EXPECT_EQ(owner(m), 1) << "t5's";
    spec.dst_ip = ip("198.19.1.1");
    rte_mbuf* to_t1 = ipv4_mbuf(pool, spec);
    vxlan_wrap(to_t1, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, 100, 0);
    EXPECT_EQ(owner(to_t1), 0) << "t1's";
}

// Dual-stack: IPv6 from the fabric goes to its vNIC's worker too (whose NFT holds the flow its
// reply belongs to, whose engine runs the QPs RoCE v2 over IPv6 is for).
struct FabricDispatchIpv6 : FabricDispatch {
    const char* config_yaml() const override {
        return R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null1"}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, ip6: 2001:2::1:3/64, port: "net_null2"}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, ip6: 2001:2::1:3/64, port: "net_null3"}
peers:
  - {vpc: blue, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2}
)";
    }
    rte_mbuf* tunnelled6(uint32_t vni, const char* dst, uint16_t dst_port = 2000) {
        rte_mbuf* m = ipv6_mbuf(
            pool, {mac("02:00:c6:13:01:02"), gateway, ip6("2001:2::1:2"), ip6(dst), IPPROTO_UDP});
        auto* udp = rte_pktmbuf_mtod_offset(m, uint8_t*, sizeof(rte_ether_hdr) + 40);
        udp[2] = static_cast<uint8_t>(dst_port >> 8);
        udp[3] = static_cast<uint8_t>(dst_port);
        vxlan_wrap(m, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, vni, 0);
        return m;
    }
};

TEST_F(FabricDispatchIpv6, Ipv6AndRoceOverIpv6GoToTheWorkerOfTheirDestinationVnic) {
    EXPECT_EQ(owner(tunnelled6(100, "2001:2::1:3")), 1) << "t5";
    EXPECT_EQ(owner(tunnelled6(100, "2001:2::1:3", 4791)), 1) << "t5's QPs";
    EXPECT_EQ(owner(tunnelled6(100, "2001:2::1:1")), 0) << "t1";
    EXPECT_EQ(owner(tunnelled6(200, "2001:2::1:3")), 0) << "red t3: the VNI decides";
    EXPECT_EQ(owner(tunnelled6(100, "ff02::1:ff01:3")), 0) << "multicast: the uplink's worker";
    rte_mbuf* cut = tunnelled6(100, "2001:2::1:3");
    rte_pktmbuf_trim(cut, rte_pktmbuf_pkt_len(cut) - (overlay::outer_header_bytes + 14 + 39));
    EXPECT_EQ(owner(cut), 0) << "an IPv6 header cut short";
}

// The dispatcher reads every frame off the wire before any check of the ingress pipeline:
// mangled frames (seeded, reproducible) must neither crash it (the sanitized build reads past
// no header) nor reach worker 1 unless they really are for t5, blue's 198.19.1.3.
TEST_F(FabricDispatch, MangledFramesStayWithTheUplinksWorkerUnlessTheyAreForT5) {
    std::mt19937 random(20261202);
    unsigned to_t5 = 0;
    for (int round = 0; round < 4000; ++round) {
        rte_mbuf* m = tunnelled("198.18.0.2", 100, "198.19.1.2", "198.19.1.3");
        ASSERT_NE(m, nullptr);
        auto* bytes = rte_pktmbuf_mtod(m, uint8_t*);
        const uint32_t len = rte_pktmbuf_pkt_len(m);
        // Up to four bytes of the headers (outer and inner: the first 100) changed.
        const int flips = static_cast<int>(random() % 5);
        for (int f = 0; f < flips; ++f) {
            bytes[random() % 100] = static_cast<uint8_t>(random());
        }
        if (random() % 4 == 0) {
            rte_pktmbuf_trim(m, static_cast<uint16_t>(random() % len));
        }
        const uint8_t worker = fabric_frame_owner(*tables, m, 0);
        if (worker != 0) {
            ASSERT_EQ(worker, 1);
            const auto check =
                overlay::check_outer(bytes, rte_pktmbuf_pkt_len(m), tables->underlay_ip);
            ASSERT_TRUE(check.ok) << "round " << round;
            EXPECT_EQ(check.view.vni, 100u) << "round " << round;
            const auto* inner = reinterpret_cast<const rte_ipv4_hdr*>(
                bytes + check.view.inner_offset + sizeof(rte_ether_hdr));
            EXPECT_EQ(inner->dst_addr, ip("198.19.1.3")) << "round " << round;
            ++to_t5;
        }
        rte_pktmbuf_free(m);
    }
    // The control: most rounds change nothing that matters (a byte of a MAC or a checksum).
    EXPECT_GT(to_t5, 400u);
}

}  // namespace
}  // namespace jakiro::test
