#include "dataplane/overlay/tcp6_superframe.hh"

#include <gtest/gtest.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <utility>
#include <vector>

#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/vxlan.hh"
#include "dataplane/vnet_face/vnet_header.hh"
#include "tests/unit/frames.hh"

namespace jakiro::overlay {
namespace {

using test::ip;
using test::ip6;
using test::mac;

const tunnel_endpoints h1_to_h2{mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"),
                                ip("198.18.0.1"), ip("198.18.0.2")};
const test::ipv6_frame_spec t1_to_t2{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                     ip6("2001:2::1:1"), ip6("2001:2::1:2")};
constexpr uint32_t start_seq = 1000000;
constexpr uint32_t inner_ip_offset = outer_header_bytes + 14;
constexpr uint8_t ack = RTE_TCP_ACK_FLAG;
constexpr uint8_t ack_psh = RTE_TCP_ACK_FLAG | RTE_TCP_PSH_FLAG;

rte_mempool* big_pool() {
    static rte_mempool* pool =
        rte_pktmbuf_pool_create("tcp6_sf_big", 31, 0, 0, UINT16_MAX, rte_socket_id());
    return pool;
}
rte_mempool* small_pool() {
    static rte_mempool* pool = rte_pktmbuf_pool_create("tcp6_sf_small", 4095, 0, 0,
                                                       RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
    return pool;
}

// What the tenant sent: the payload bytes test::tcp6_superframe_mbuf writes.
std::vector<uint8_t> payload_of(uint32_t bytes, uint32_t from = 0) {
    std::vector<uint8_t> p(bytes);
    for (uint32_t i = 0; i < bytes; ++i) {
        p[i] = static_cast<uint8_t>((from + i) * 13 + 5);
    }
    return p;
}

struct Tcp6SuperframeTest : testing::Test {
    std::vector<rte_mbuf*> owned;
    void TearDown() override {
        for (rte_mbuf* m : owned) {
            rte_pktmbuf_free(m);
        }
    }

    // The VXLAN frames of at most 1514 bytes the sending host cuts a tenant super-frame into,
    // each copied into one plain mbuf as the receiving uplink reads it; appended to `burst`.
    void fabric_frames(uint32_t bytes, uint8_t flags, uint32_t seq, std::vector<rte_mbuf*>& burst) {
        rte_mbuf* m = test::tcp6_superframe_mbuf(big_pool(), t1_to_t2, bytes, 1378, flags, seq);
        ASSERT_NE(m, nullptr);
        ASSERT_TRUE(encapsulate(m, h1_to_h2, 100, 0, 50001));
        rte_mbuf* frames[max_segments];
        const int n = segment_superframe(m, true, 1514, small_pool(), frames, max_segments);
        ASSERT_GT(n, 0);
        for (int i = 0; i < n; ++i) {
            const std::vector<uint8_t> b = test::bytes_of(frames[i]);
            burst.push_back(test::mbuf_from(small_pool(), b.data(), b.size()));
            rte_pktmbuf_free(frames[i]);
        }
    }
};

struct wire_segment {
    std::vector<uint8_t> payload;
    uint32_t seq = 0;
    uint8_t flags = 0;
};

// Every check a receiver makes on one frame: the outer headers when `tunnelled`, the IPv6
// payload length and the TCP checksum over the IPv6 pseudo-header.
wire_segment check_frame(const rte_mbuf* frame, bool tunnelled, uint32_t max_len) {
    std::vector<uint8_t> bytes = test::bytes_of(frame);
    EXPECT_LE(bytes.size(), max_len);
    const uint32_t ip_at = tunnelled ? inner_ip_offset : 14;
    if (tunnelled) {
        EXPECT_TRUE(check_outer(bytes.data(), bytes.size(), ip("198.18.0.2")).ok)
            << "outer lengths and IPv4 checksum";
        EXPECT_EQ(reinterpret_cast<const rte_udp_hdr*>(bytes.data() + 34)->dgram_cksum, 0)
            << "RFC 7348: UDP checksum 0";
    }
    auto* iph = reinterpret_cast<rte_ipv6_hdr*>(bytes.data() + ip_at);
    EXPECT_EQ(rte_be_to_cpu_16(iph->payload_len), bytes.size() - ip_at - 40);
    EXPECT_TRUE(test::l4_checksum_ok(iph)) << "TCP checksum over the IPv6 pseudo-header";
    const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(iph + 1);
    EXPECT_EQ(frame->ol_flags & RTE_MBUF_F_TX_TCP_SEG, 0u) << "no longer a super-frame";
    return {
        {bytes.begin() + ip_at + 60, bytes.end()}, rte_be_to_cpu_32(tcp->sent_seq), tcp->tcp_flags};
}

TEST_F(Tcp6SuperframeTest, TunnelledSuperFrameIsCutIntoFramesWhoseIpv6ChecksumsVerify) {
    const uint8_t fin_psh_cwr =
        RTE_TCP_ACK_FLAG | RTE_TCP_PSH_FLAG | RTE_TCP_FIN_FLAG | RTE_TCP_CWR_FLAG;
    rte_mbuf* m = test::tcp6_superframe_mbuf(big_pool(), t1_to_t2, 60000, 1378, fin_psh_cwr);
    ASSERT_NE(m, nullptr);
    ASSERT_TRUE(encapsulate(m, h1_to_h2, 100, 0, 50001));
    rte_mbuf* frames[max_segments];
    const int n = segment_superframe(m, true, 1514, small_pool(), frames, max_segments);
    ASSERT_EQ(n, (60000 + 1377) / 1378) << "the tenant's segment size is kept";
    std::vector<uint8_t> joined;
    uint32_t expected_seq = start_seq;
    for (int i = 0; i < n; ++i) {
        owned.push_back(frames[i]);
        const wire_segment s = check_frame(frames[i], true, 1514);
        EXPECT_EQ(s.seq, expected_seq) << "frame " << i;
        const bool last = i + 1 == n;
        EXPECT_EQ((s.flags & (RTE_TCP_FIN_FLAG | RTE_TCP_PSH_FLAG)) != 0, last)
            << "FIN and PSH end the stream: the last frame only, frame " << i;
        EXPECT_EQ((s.flags & RTE_TCP_CWR_FLAG) != 0, i == 0) << "CWR on the first only";
        EXPECT_TRUE(s.flags & RTE_TCP_ACK_FLAG);
        expected_seq += s.payload.size();
        joined.insert(joined.end(), s.payload.begin(), s.payload.end());
    }
    EXPECT_EQ(joined, payload_of(60000)) << "every byte once, in order";
}

TEST_F(Tcp6SuperframeTest, LargerTenantSegmentsAreCutToTheUnderlayMtu) {
    rte_mbuf* m = test::tcp6_superframe_mbuf(big_pool(), t1_to_t2, 30000, 8928);
    ASSERT_NE(m, nullptr);
    ASSERT_TRUE(encapsulate(m, h1_to_h2, 100, 0, 50001));
    rte_mbuf* frames[max_segments];
    const int n = segment_superframe(m, true, 1514, small_pool(), frames, max_segments);
    ASSERT_EQ(n, (30000 + 1399) / 1400) << "1514 - 50 - 14 - 40 - 20 bytes of payload each";
    for (int i = 0; i < n; ++i) {
        owned.push_back(frames[i]);
        check_frame(frames[i], true, 1514);
    }
}

TEST_F(Tcp6SuperframeTest, PlainSuperFrameIsCutToTheTenantMtuForAPortWithoutSuperFrames) {
    rte_mbuf* m = test::tcp6_superframe_mbuf(big_pool(), t1_to_t2, 10000, 1390);
    ASSERT_NE(m, nullptr);
    rte_mbuf* frames[max_segments];
    const int n = segment_superframe(m, false, 1464, small_pool(), frames, max_segments);
    ASSERT_EQ(n, 8);
    std::vector<uint8_t> joined;
    for (int i = 0; i < n; ++i) {
        owned.push_back(frames[i]);
        const wire_segment s = check_frame(frames[i], false, 1464);
        joined.insert(joined.end(), s.payload.begin(), s.payload.end());
    }
    EXPECT_EQ(joined, payload_of(10000));
}

TEST_F(Tcp6SuperframeTest, AnEmptyPoolIsAFailureNotAPartialCut) {
    rte_mempool* tiny =
        rte_pktmbuf_pool_create("tcp6_sf_tiny", 3, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, 0);
    ASSERT_NE(tiny, nullptr);
    rte_mbuf* m = test::tcp6_superframe_mbuf(big_pool(), t1_to_t2, 20000, 1378);
    ASSERT_NE(m, nullptr);
    rte_mbuf* frames[max_segments];
    EXPECT_EQ(segment_superframe(m, false, 1464, tiny, frames, max_segments), -1);
    EXPECT_EQ(rte_mempool_avail_count(tiny), 3u) << "nothing of the pool is kept";
    rte_mempool_free(tiny);
}

TEST_F(Tcp6SuperframeTest, FabricFramesOfOneFlowAreMergedIntoOneSuperFrameMarkedAsMerged) {
    std::vector<uint8_t> arp(64);
    std::vector<rte_mbuf*> burst;
    fabric_frames(40000, ack_psh, start_seq, burst);
    const size_t cut = burst.size();
    // Something that is not VXLAN-TCP after it stays as it is, in place.
    burst.push_back(test::mbuf_from(small_pool(), arp.data(),
                                    write_arp_request(arp.data(), mac("02:00:00:00:00:09"),
                                                      ip("198.18.0.9"), ip("198.18.0.2"))));
    const uint16_t left = merge_burst(burst.data(), static_cast<uint16_t>(burst.size()));
    ASSERT_EQ(left, 2);
    owned.assign(burst.begin(), burst.begin() + 2);
    rte_mbuf* merged = burst[0];
    EXPECT_EQ(merged->nb_segs, cut);
    EXPECT_EQ(merged->ol_flags, RTE_MBUF_F_RX_LRO) << "as a tap's ready-made super-frame";
    EXPECT_EQ(merged->tso_segsz, 1378) << "the segment size, for the tenant's vnet header";
    EXPECT_EQ(rte_pktmbuf_pkt_len(merged), outer_header_bytes + 74 + 40000);
    EXPECT_EQ(burst[1]->nb_segs, 1) << "the ARP frame, after the merged one";
    const std::vector<uint8_t> bytes = test::bytes_of(merged);
    EXPECT_TRUE(check_outer(bytes.data(), bytes.size(), ip("198.18.0.2")).ok)
        << "merged outer lengths and checksum";
    auto* iph = reinterpret_cast<const rte_ipv6_hdr*>(bytes.data() + inner_ip_offset);
    EXPECT_EQ(rte_be_to_cpu_16(iph->payload_len), 40020);
    const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(iph + 1);
    EXPECT_EQ(rte_be_to_cpu_32(tcp->sent_seq), start_seq);
    EXPECT_EQ(tcp->tcp_flags, ack_psh) << "the last segment's PSH is kept";
    EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + inner_ip_offset + 60, bytes.end()),
              payload_of(40000));
}

// The merged frame, delivered to a tenant whose port takes no super-frames, is cut again into
// frames whose checksums verify: the partial checksum mark_tcp6_superframe writes is right.
TEST_F(Tcp6SuperframeTest, AMergedSuperFrameCutAgainForATenantChecksOut) {
    std::vector<rte_mbuf*> burst;
    fabric_frames(20000, ack, start_seq, burst);
    ASSERT_EQ(merge_burst(burst.data(), static_cast<uint16_t>(burst.size())), 1);
    rte_mbuf* m = burst[0];
    rte_pktmbuf_adj(m, outer_header_bytes);  // decapsulated, as ingress does
    vnet_face::mark_tcp6_superframe(m, m->tso_segsz);
    const vnet_face::virtio_net_hdr hdr = vnet_face::from_mbuf(m);
    EXPECT_EQ(hdr.gso_type, vnet_face::VIRTIO_NET_HDR_GSO_TCPV6);
    EXPECT_EQ(hdr.csum_start, 54);
    EXPECT_EQ(hdr.gso_size, 1378);
    rte_mbuf* frames[max_merged];
    const int n = segment_superframe(m, false, 1464, small_pool(), frames, max_merged);
    ASSERT_EQ(n, (20000 + 1377) / 1378);
    std::vector<uint8_t> joined;
    for (int i = 0; i < n; ++i) {
        owned.push_back(frames[i]);
        const wire_segment s = check_frame(frames[i], false, 1464);
        joined.insert(joined.end(), s.payload.begin(), s.payload.end());
    }
    EXPECT_EQ(joined, payload_of(20000));
}

TEST_F(Tcp6SuperframeTest, FramesThatDoNotFollowOnAreNotMergedAndKeepTheirOrder) {
    std::vector<rte_mbuf*> burst;
    fabric_frames(6000, ack, start_seq, burst);  // 5 frames
    ASSERT_EQ(burst.size(), 5u);
    std::swap(burst[2], burst[3]);  // reordered on the fabric
    std::vector<const rte_mbuf*> order(burst.begin(), burst.end());
    const uint16_t left = merge_burst(burst.data(), 5);
    owned.assign(burst.begin(), burst.begin() + left);
    ASSERT_EQ(left, 4) << "frames 0-1 merged; 3, 2 and 4 each on their own";
    EXPECT_EQ(burst[0], order[0]);
    EXPECT_EQ(burst[0]->nb_segs, 2);
    for (int i = 1; i < 4; ++i) {
        EXPECT_EQ(burst[i], order[i + 1]) << "in the order they came, " << i;
        EXPECT_EQ(burst[i]->nb_segs, 1);
        EXPECT_EQ(burst[i]->ol_flags, 0u);
    }
}

TEST_F(Tcp6SuperframeTest, FramesOfTwoFlowsAreNotMergedIntoEachOther) {
    std::vector<rte_mbuf*> burst;
    fabric_frames(2756, ack, start_seq, burst);  // two full frames
    ASSERT_EQ(burst.size(), 2u);
    test::ipv6_frame_spec other = t1_to_t2;
    other.src_ip = ip6("2001:2::1:3");
    rte_mbuf* m = test::tcp6_superframe_mbuf(big_pool(), other, 2756, 1378, ack, start_seq + 2756);
    ASSERT_NE(m, nullptr);
    ASSERT_TRUE(encapsulate(m, h1_to_h2, 100, 0, 50001));
    rte_mbuf* frames[max_segments];
    ASSERT_EQ(segment_superframe(m, true, 1514, small_pool(), frames, max_segments), 2);
    for (int i = 0; i < 2; ++i) {
        const std::vector<uint8_t> b = test::bytes_of(frames[i]);
        burst.push_back(test::mbuf_from(small_pool(), b.data(), b.size()));
        rte_pktmbuf_free(frames[i]);
    }
    const uint16_t left = merge_burst(burst.data(), 4);
    owned.assign(burst.begin(), burst.begin() + left);
    ASSERT_EQ(left, 2) << "one merged frame per flow";
    EXPECT_EQ(burst[0]->nb_segs, 2);
    EXPECT_EQ(burst[1]->nb_segs, 2);
}

TEST_F(Tcp6SuperframeTest, ChargesEveryWireFrameWithItsIpv6HeadersAndVxlan) {
    rte_mbuf* m = test::tcp6_superframe_mbuf(big_pool(), t1_to_t2, 10000, 1000);
    ASSERT_NE(m, nullptr);
    owned.push_back(m);
    const auto* iph = rte_pktmbuf_mtod_offset(m, const rte_ipv6_hdr*, 14);
    EXPECT_EQ(frames_of(iph, 1000), 10u);
    EXPECT_EQ(charged_wire_bytes(iph, 1000), 10000u + 10 * (40 + 20 + 14 + 50));
    EXPECT_EQ(charged_wire_bytes(iph, 0), 10060u + 14 + 50) << "one frame when not cut";
}

}  // namespace
}  // namespace jakiro::overlay
