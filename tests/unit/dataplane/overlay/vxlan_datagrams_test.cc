#include "dataplane/overlay/vxlan_datagrams.hh"

#include <gtest/gtest.h>
#include <rte_udp.h>

#include <map>
#include <random>
#include <vector>

#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vxlan.hh"
#include "tests/unit/dataplane/overlay/gso_test_support.hh"
#include "tests/unit/frames.hh"

namespace jakiro::overlay {
namespace {

using test::bytes_of;
using test::ip;
using test::mac;
using namespace gso_test;

struct VxlanDatagramsTest : owning_mbufs {
    // A tenant's UDP datagram of `payload` bytes in a VXLAN frame to h2 whose outer source
    // port (its flow's hash) is `outer_port`.
    static rte_mbuf* vxlan_frame(uint16_t outer_port, uint16_t payload, uint16_t inner_port) {
        test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                   ip("198.19.1.1"), ip("198.19.1.2")};
        spec.payload = payload;
        spec.src_port = inner_port;
        rte_mbuf* m = test::ipv4_mbuf(small_pool(), spec);
        EXPECT_TRUE(encapsulate(m, h1_to_h2, 100, 0, outer_port));
        return m;
    }

    // What leaves: every output mbuf as the frames the kernel cuts from it, each with the outer
    // source port it carries.
    std::vector<std::vector<uint8_t>> wire_frames(rte_mbuf** out, uint16_t n) {
        std::vector<std::vector<uint8_t>> frames;
        for (uint16_t i = 0; i < n; ++i) {
            owned.push_back(out[i]);
            for (auto& seg : kernel_segments(bytes_of(out[i]), gso_size_of(out[i]))) {
                frames.push_back(std::move(seg));
            }
        }
        return frames;
    }

    static uint16_t outer_port_of(const std::vector<uint8_t>& frame) {
        return rte_be_to_cpu_16(reinterpret_cast<const rte_udp_hdr*>(frame.data() + 34)->src_port);
    }

    // Every outer flow's frames leave byte for byte as they went in, in their order.
    static void expect_each_flow_in_order(const std::vector<std::vector<uint8_t>>& sent,
                                          const std::vector<std::vector<uint8_t>>& wire) {
        std::map<uint16_t, std::vector<std::vector<uint8_t>>> in, out;
        for (const auto& f : sent) {
            in[outer_port_of(f)].push_back(f);
        }
        for (const auto& f : wire) {
            out[outer_port_of(f)].push_back(f);
        }
        ASSERT_EQ(in.size(), out.size());
        for (auto& [port, frames] : in) {
            ASSERT_EQ(out[port].size(), frames.size()) << "flow " << port;
            for (size_t i = 0; i < frames.size(); ++i) {
                expect_same_frame(out[port][i], frames[i], i);
            }
        }
    }
};

TEST_F(VxlanDatagramsTest, InterleavedFlowsLeaveAsOneDatagramEachCutBackIntoTheSameFrames) {
    std::vector<rte_mbuf*> burst;
    std::vector<std::vector<uint8_t>> sent;
    for (int round = 0; round < 10; ++round) {
        for (uint16_t flow = 0; flow < 3; ++flow) {
            burst.push_back(vxlan_frame(static_cast<uint16_t>(50000 + flow), 18, 1000 + flow));
            sent.push_back(bytes_of(burst.back()));
        }
    }
    const uint16_t n = join_vxlan_datagrams(burst.data(), static_cast<uint16_t>(burst.size()));
    ASSERT_EQ(n, 3) << "one datagram per outer flow";
    for (uint16_t i = 0; i < n; ++i) {
        EXPECT_TRUE(burst[i]->ol_flags & RTE_MBUF_F_TX_UDP_SEG);
        EXPECT_EQ(burst[i]->tso_segsz, sent[0].size() - gso_outer_bytes);
        const auto bytes = bytes_of(burst[i]);
        const auto* iph = reinterpret_cast<const rte_ipv4_hdr*>(bytes.data() + 14);
        EXPECT_EQ(rte_be_to_cpu_16(iph->total_length), bytes.size() - 14);
        EXPECT_EQ(rte_raw_cksum(iph, 20), 0xffff);
        EXPECT_EQ(wire_bytes(burst[i]), 10 * sent[0].size());
    }
    const uint16_t first_flow = outer_port_of(bytes_of(burst[0]));
    EXPECT_EQ(first_flow, 50000) << "a datagram goes where its first frame was";
    expect_each_flow_in_order(sent, wire_frames(burst.data(), n));
}

TEST_F(VxlanDatagramsTest, AFrameOfAnotherSizeEndsItsFlowsDatagramAndTheFlowKeepsItsOrder) {
    // Flow 50000: 18-byte datagrams, a longer one, then short ones again; flow 50001 between.
    const uint16_t sizes[] = {18, 18, 18, 400, 18, 18, 18, 60, 18, 18};
    std::vector<rte_mbuf*> burst;
    std::vector<std::vector<uint8_t>> sent;
    for (const uint16_t size : sizes) {
        burst.push_back(vxlan_frame(50000, size, 1000));
        sent.push_back(bytes_of(burst.back()));
        burst.push_back(vxlan_frame(50001, 18, 1001));
        sent.push_back(bytes_of(burst.back()));
    }
    const uint16_t n = join_vxlan_datagrams(burst.data(), static_cast<uint16_t>(burst.size()));
    EXPECT_LT(n, burst.size());
    for (uint16_t i = 0; i < n; ++i) {
        if (burst[i]->ol_flags & RTE_MBUF_F_TX_UDP_SEG) {
            // Every chunk but the last is the stride the kernel cuts at.
            const auto segments = kernel_segments(bytes_of(burst[i]), burst[i]->tso_segsz);
            for (size_t s = 0; s + 1 < segments.size(); ++s) {
                EXPECT_EQ(segments[s].size() - gso_outer_bytes, burst[i]->tso_segsz);
            }
            EXPECT_LE(segments.back().size() - gso_outer_bytes, burst[i]->tso_segsz);
        }
    }
    expect_each_flow_in_order(sent, wire_frames(burst.data(), n));
}

TEST_F(VxlanDatagramsTest, ADatagramHoldsAtMostTheChunksAReceiverCuts) {
    std::vector<rte_mbuf*> burst;
    std::vector<std::vector<uint8_t>> sent;
    for (int i = 0; i < 100; ++i) {
        burst.push_back(vxlan_frame(50000, 18, 1000));
        sent.push_back(bytes_of(burst.back()));
    }
    const uint16_t n = join_vxlan_datagrams(burst.data(), static_cast<uint16_t>(burst.size()));
    ASSERT_EQ(n, 2);
    EXPECT_EQ(burst[0]->nb_segs, max_gso_chunks);
    expect_each_flow_in_order(sent, wire_frames(burst.data(), n));
}

TEST_F(VxlanDatagramsTest, FramesThatCannotCrossAsADatagramStayAsTheyAre) {
    test::ipv4_frame_spec plain{mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"),
                                ip("198.18.0.1"), ip("198.18.0.2")};
    plain.dst_port = 4791;  // not VXLAN
    rte_mbuf* not_vxlan[2] = {test::ipv4_mbuf(small_pool(), plain),
                              test::ipv4_mbuf(small_pool(), plain)};
    rte_mbuf* offload[2] = {vxlan_frame(50000, 18, 1000), vxlan_frame(50000, 18, 1000)};
    offload[0]->ol_flags |= RTE_MBUF_F_TX_UDP_CKSUM;
    offload[1]->ol_flags |= RTE_MBUF_F_TX_UDP_CKSUM;
    rte_mbuf* arp = test::arp_request_mbuf(small_pool(), mac("02:00:00:00:00:01"), ip("198.18.0.1"),
                                           ip("198.18.0.2"));
    std::vector<rte_mbuf*> burst = {not_vxlan[0], offload[0], arp, not_vxlan[1], offload[1]};
    const std::vector<rte_mbuf*> before = burst;
    std::vector<std::vector<uint8_t>> bytes;
    for (rte_mbuf* m : burst) {
        bytes.push_back(bytes_of(m));
    }
    ASSERT_EQ(join_vxlan_datagrams(burst.data(), static_cast<uint16_t>(burst.size())),
              burst.size());
    EXPECT_EQ(burst, before);
    for (size_t i = 0; i < burst.size(); ++i) {
        owned.push_back(burst[i]);
        EXPECT_EQ(bytes_of(burst[i]), bytes[i]);
        EXPECT_EQ(burst[i]->nb_segs, 1);
    }
}

TEST_F(VxlanDatagramsTest, AFrameThatStaysAsItIsKeepsItsFlowsFramesOnEitherSide) {
    // A RoCE QP's single packets around a datagram the RNIC built for the same QP (offloads
    // asked for: it stays as it is); another flow's frames around them all.
    std::vector<rte_mbuf*> burst;
    std::vector<std::vector<uint8_t>> sent;
    auto add = [&](rte_mbuf* m) {
        burst.push_back(m);
        sent.push_back(bytes_of(m));
    };
    add(vxlan_frame(50000, 18, 1000));
    add(vxlan_frame(50001, 18, 1001));
    add(vxlan_frame(50000, 18, 1000));
    rte_mbuf* built = vxlan_frame(50000, 18, 1000);
    mark_udp_gso(built, rte_pktmbuf_pkt_len(built) - gso_outer_bytes);
    add(built);
    add(vxlan_frame(50001, 18, 1001));
    add(vxlan_frame(50000, 18, 1000));
    add(vxlan_frame(50000, 18, 1000));
    const uint16_t n = join_vxlan_datagrams(burst.data(), static_cast<uint16_t>(burst.size()));
    ASSERT_EQ(n, 4) << "flow 50000: two frames, the built one, two frames; flow 50001 in one";
    EXPECT_EQ(burst[0]->nb_segs, 2);
    EXPECT_EQ(burst[2], built);
    EXPECT_EQ(burst[3]->nb_segs, 2);
    expect_each_flow_in_order(sent, wire_frames(burst.data(), n));
}

TEST_F(VxlanDatagramsTest, ADatagramLeftOverFromAnEarlierRoundIsNotJoinedAgain) {
    std::vector<rte_mbuf*> burst;
    std::vector<std::vector<uint8_t>> sent;
    for (int i = 0; i < 4; ++i) {
        burst.push_back(vxlan_frame(50000, 18, 1000));
        sent.push_back(bytes_of(burst.back()));
    }
    ASSERT_EQ(join_vxlan_datagrams(burst.data(), 4), 1);
    burst.resize(1);
    for (int i = 0; i < 4; ++i) {
        burst.push_back(vxlan_frame(50000, 18, 1000));
        sent.push_back(bytes_of(burst.back()));
    }
    const uint16_t n = join_vxlan_datagrams(burst.data(), static_cast<uint16_t>(burst.size()));
    ASSERT_EQ(n, 2) << "the datagram as it was, then the new frames joined behind it";
    EXPECT_EQ(burst[0]->nb_segs, 4);
    expect_each_flow_in_order(sent, wire_frames(burst.data(), n));
}

TEST_F(VxlanDatagramsTest, AnyMixOfFlowsAndSizesLeavesEveryFlowInOrder) {
    std::mt19937 random(7);
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<rte_mbuf*> burst;
        std::vector<std::vector<uint8_t>> sent;
        const int frames = 1 + static_cast<int>(random() % 250);
        for (int i = 0; i < frames; ++i) {
            // More flows than are gathered at once, a few sizes.
            const auto flow = static_cast<uint16_t>(random() % 20);
            const auto size = static_cast<uint16_t>(18 + 40 * (random() % 3));
            burst.push_back(vxlan_frame(static_cast<uint16_t>(50000 + flow), size, 1000));
            sent.push_back(bytes_of(burst.back()));
        }
        const uint16_t n = join_vxlan_datagrams(burst.data(), static_cast<uint16_t>(burst.size()));
        expect_each_flow_in_order(sent, wire_frames(burst.data(), n));
        TearDown();  // the pool holds a few trials' frames, not all of them
        if (HasFailure()) {
            FAIL() << "trial " << trial;
        }
    }
}

}  // namespace
}  // namespace jakiro::overlay
