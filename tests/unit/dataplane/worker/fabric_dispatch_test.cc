#include "worker/fabric_dispatch.hh"

#include "../pipeline/pipeline_fixture.hh"
#include "overlay/superframe.hh"

namespace jakiro::test {
namespace {

// h1 of the test bed with two workers: t1 and t3 on worker 0, t5 on worker 1.
struct FabricDispatch : PipelineTest {
    void SetUp() override {
        PipelineTest::SetUp();
        const auto loaded = load_host_config_text(config_yaml(), "h1.yaml");
        port_assignment ports{uplink, h1_mac, {port_t1, port_t5, port_t3}, {}, {0, 1, 0}};
        std::string error;
        tables = build_tables(loaded.config, ports, neighbors, 1, error);
        ASSERT_TRUE(tables) << error;
    }
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

TEST_F(FabricDispatch, RoceStaysWithTheEngine) {
    ipv4_frame_spec spec{mac("02:00:c6:13:01:02"), gateway, ip("198.19.1.2"), ip("198.19.1.3")};
    spec.dst_port = 4791;
    rte_mbuf* m = ipv4_mbuf(pool, spec);
    vxlan_wrap(m, {h2_mac, h1_mac, ip("198.18.0.2"), ip("198.18.0.1")}, 100, 0);
    EXPECT_EQ(owner(m), 0);
}

}  // namespace
}  // namespace jakiro::test
