#include "dataplane/overlay/udp_gso.hh"

#include <gtest/gtest.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <cstring>
#include <random>
#include <vector>

#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/vxlan.hh"
#include "tests/unit/dataplane/overlay/gso_test_support.hh"
#include "tests/unit/frames.hh"

namespace jakiro::overlay {
namespace {

using test::bytes_of;
using test::ip;
using test::mac;
using namespace gso_test;

struct UdpGsoTest : owning_mbufs {
    // The VXLAN frames rte_gso cuts from a tenant super-frame of `bytes` at `mss`, as the
    // egress pipeline has them before it joins them (1514-byte underlay frames).
    std::vector<rte_mbuf*> wire_frames(uint32_t bytes, uint16_t mss) {
        const test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                         ip("198.19.1.1"), ip("198.19.1.2")};
        rte_mbuf* m = test::tcp_superframe_mbuf(big_pool(), spec, bytes, mss);
        EXPECT_NE(m, nullptr);
        EXPECT_TRUE(encapsulate(m, h1_to_h2, 100, 0, 50001));
        rte_mbuf* frames[max_segments];
        const int n = segment_superframe(m, true, 1514, small_pool(), frames, max_segments);
        EXPECT_GT(n, 1);
        return {frames, frames + std::max(n, 0)};
    }
};

TEST_F(UdpGsoTest, FramesOfOneSuperFrameBecomeDatagramsTheKernelCutsBackIntoTheSameFrames) {
    auto frames = wire_frames(60000, 1448);
    std::vector<std::vector<uint8_t>> expected;
    for (rte_mbuf* f : frames) {
        expected.push_back(bytes_of(f));
    }
    std::vector<rte_mbuf*> datagrams(frames.size());
    const uint16_t d =
        join_vxlan_frames(frames.data(), static_cast<uint16_t>(frames.size()), datagrams.data());
    ASSERT_GE(d, 1);
    ASSERT_LE(d, 2) << "60 KB of payload plus 42 frames' headers needs two IPv4 datagrams";
    size_t next = 0;
    for (uint16_t g = 0; g < d; ++g) {
        rte_mbuf* m = datagrams[g];
        owned.push_back(m);
        const auto bytes = bytes_of(m);
        ASSERT_LE(bytes.size() - 14, 65535u) << "an IPv4 total length holds it";
        const auto* iph = reinterpret_cast<const rte_ipv4_hdr*>(bytes.data() + 14);
        const auto* udp = reinterpret_cast<const rte_udp_hdr*>(bytes.data() + 34);
        EXPECT_EQ(rte_be_to_cpu_16(iph->total_length), bytes.size() - 14);
        EXPECT_EQ(rte_raw_cksum(iph, 20), 0xffff);
        EXPECT_EQ(rte_be_to_cpu_16(udp->dgram_len), bytes.size() - 34);
        if (m->ol_flags & RTE_MBUF_F_TX_UDP_SEG) {
            EXPECT_EQ(m->l2_len + m->l3_len + m->l4_len, gso_outer_bytes);
            EXPECT_EQ(m->tso_segsz, expected[0].size() - gso_outer_bytes) << "one frame's chunk";
            EXPECT_EQ(udp->dgram_cksum, rte_ipv4_phdr_cksum(iph, 0))
                << "the pseudo-header sum CHECKSUM_PARTIAL wants";
            EXPECT_EQ(
                wire_bytes(m),
                bytes.size() + (kernel_segments(bytes, m->tso_segsz).size() - 1) * gso_outer_bytes);
        }
        for (auto& seg : kernel_segments(bytes, gso_size_of(m))) {
            ASSERT_LT(next, expected.size());
            expect_same_frame(seg, expected[next], next);
            ++next;
        }
    }
    EXPECT_EQ(next, expected.size()) << "every frame once";
}

TEST_F(UdpGsoTest, ReceivedDatagramIsCutIntoFramesThatGroMergesIntoTheTenantsSuperFrame) {
    auto frames = wire_frames(40000, 1448);
    const size_t n = frames.size();
    rte_mbuf* datagram = nullptr;
    ASSERT_EQ(join_vxlan_frames(frames.data(), static_cast<uint16_t>(n), &datagram), 1);
    owned.push_back(datagram);
    const auto bytes = bytes_of(datagram);
    // As the uplink face reads it: the first 1920 bytes into an ordinary mbuf, the rest aside.
    std::vector<uint8_t> tail;
    rte_mbuf* head = test::head_and_tail(small_pool(), bytes, tail);
    rte_mbuf* cut[max_gso_chunks];
    uint16_t count = 0;
    ASSERT_EQ(split_udp_gso(head, tail.data(), bytes.size(), datagram->tso_segsz, small_pool(), cut,
                            count),
              split_verdict::ok);
    ASSERT_EQ(count, n);
    for (uint16_t i = 0; i < count; ++i) {
        const auto frame = bytes_of(cut[i]);
        const auto check = check_outer(frame.data(), frame.size(), ip("198.18.0.2"));
        EXPECT_TRUE(check.ok) << drop_reason_names[static_cast<size_t>(check.reason)] << ": "
                              << "frame " << i << " is an RFC 7348 frame with its own lengths";
        EXPECT_EQ(reinterpret_cast<const rte_udp_hdr*>(frame.data() + 34)->dgram_cksum, 0);
    }
    const uint16_t left = merge_burst(cut, count);
    ASSERT_EQ(left, 1) << "one flow's frames merge into one";
    owned.push_back(cut[0]);
    EXPECT_EQ(rte_pktmbuf_pkt_len(cut[0]), outer_header_bytes + 54 + 40000);
    EXPECT_EQ(cut[0]->tso_segsz, 1514 - 50 - 54) << "the tenant's 1448 cut to the underlay MTU";
    std::vector<uint8_t> data(40000);
    rte_pktmbuf_read(cut[0], outer_header_bytes + 54, data.size(), data.data());
    for (uint32_t i = 0; i < data.size(); ++i) {
        ASSERT_EQ(data[i], static_cast<uint8_t>(i * 13 + 5)) << "byte " << i;
    }
}

TEST_F(UdpGsoTest, LoneFrameStaysAnOrdinaryFrameWithUdpChecksumZero) {
    auto frames = wire_frames(3000, 1448);  // 1448 + 1448 + 104: three frames
    // Only the last one, alone.
    rte_mbuf* out = nullptr;
    ASSERT_EQ(join_vxlan_frames(&frames.back(), 1, &out), 1);
    frames.pop_back();
    owned.insert(owned.end(), frames.begin(), frames.end());
    owned.push_back(out);
    EXPECT_EQ(out->ol_flags & RTE_MBUF_F_TX_UDP_SEG, 0u);
    EXPECT_EQ(rte_pktmbuf_mtod_offset(out, rte_udp_hdr*, 34)->dgram_cksum, 0);
}

// A datagram from the fabric of `len` bytes whose outer headers say Ethernet/IPv4/UDP.
rte_mbuf* received(uint32_t len, std::vector<uint8_t>& tail) {
    std::vector<uint8_t> bytes(len, 0x5a);
    test::ipv4_frame_spec spec{mac("02:00:00:00:00:02"), mac("02:00:00:00:00:01"), ip("198.18.0.1"),
                               ip("198.18.0.2")};
    spec.proto = IPPROTO_UDP;
    spec.payload = 8;
    test::write_ipv4_frame(bytes.data(), spec);
    return test::head_and_tail(small_pool(), bytes, tail);
}

// Splits a datagram from the fabric of `len` bytes at `gso_size` into `cut`.
split_verdict split_received(uint32_t len, uint16_t gso_size, rte_mbuf** cut, uint16_t& count,
                             uint8_t proto = IPPROTO_UDP) {
    std::vector<uint8_t> tail;
    rte_mbuf* head = received(len, tail);
    rte_pktmbuf_mtod_offset(head, rte_ipv4_hdr*, 14)->next_proto_id = proto;
    return split_udp_gso(head, tail.data(), len, gso_size, small_pool(), cut, count);
}

TEST_F(UdpGsoTest, LyingSegmentSizesAreRefusedNotObeyed) {
    rte_mbuf* cut[max_gso_chunks];
    uint16_t count = 0;
    EXPECT_EQ(split_received(9000, 0, cut, count), split_verdict::bad_gso_size);
    EXPECT_EQ(split_received(9000, 4000, cut, count), split_verdict::bad_gso_size)
        << "a chunk larger than an mbuf";
    EXPECT_EQ(split_received(60000, 100, cut, count), split_verdict::too_many_segments);
    EXPECT_EQ(split_received(9000, 1400, cut, count, IPPROTO_TCP), split_verdict::bad_headers);
    EXPECT_EQ(count, 0);
}

TEST_F(UdpGsoTest, TruncatedLastChunkIsAShortFrameNotAnOverread) {
    rte_mbuf* cut[max_gso_chunks];
    uint16_t count = 0;
    const uint32_t len = gso_outer_bytes + 3 * 1400 + 7;  // the last chunk is 7 bytes
    ASSERT_EQ(split_received(len, 1400, cut, count), split_verdict::ok);
    ASSERT_EQ(count, 4);
    EXPECT_EQ(rte_pktmbuf_pkt_len(cut[3]), gso_outer_bytes + 7);
    for (uint16_t i = 0; i < count; ++i) {
        const auto* iph = rte_pktmbuf_mtod_offset(cut[i], const rte_ipv4_hdr*, 14);
        EXPECT_EQ(rte_be_to_cpu_16(iph->total_length), rte_pktmbuf_pkt_len(cut[i]) - 14);
        owned.push_back(cut[i]);
    }
}

TEST_F(UdpGsoTest, RandomDatagramsAreRefusedOrCutIntoFramesWithinTheirBytes) {
    std::mt19937 rng(19);
    for (int round = 0; round < 2000; ++round) {
        const uint32_t len = 1 + rng() % 65600;
        std::vector<uint8_t> bytes(len);
        for (auto& b : bytes) {
            b = static_cast<uint8_t>(rng());
        }
        if (rng() % 2 != 0 && len >= 42) {  // half of them look like IPv4/UDP
            bytes[12] = 0x08;
            bytes[13] = 0x00;
            bytes[14] = 0x45;
            bytes[23] = IPPROTO_UDP;
        }
        std::vector<uint8_t> tail;
        rte_mbuf* head =
            test::head_and_tail(small_pool(), bytes, tail, rng() % 2 ? UINT32_MAX : rng() % 64);
        ASSERT_NE(head, nullptr);
        const uint16_t gso = static_cast<uint16_t>(rng() % 3 ? rng() % 2000 : rng());
        rte_mbuf* cut[max_gso_chunks];
        uint16_t count = 0;
        const auto v = split_udp_gso(head, tail.data(), len, gso, small_pool(), cut, count);
        if (v != split_verdict::ok) {
            EXPECT_EQ(count, 0);
            continue;
        }
        uint32_t total = 0;
        for (uint16_t i = 0; i < count; ++i) {
            EXPECT_LE(rte_pktmbuf_pkt_len(cut[i]), gso_outer_bytes + gso);
            total += rte_pktmbuf_pkt_len(cut[i]) - gso_outer_bytes;
        }
        EXPECT_EQ(total, len - gso_outer_bytes) << "every byte in exactly one frame";
        rte_pktmbuf_free_bulk(cut, count);
    }
}

}  // namespace
}  // namespace jakiro::overlay
