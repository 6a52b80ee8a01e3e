#include "dataplane/overlay/superframe.hh"

#include <gtest/gtest.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <vector>

#include "dataplane/overlay/vxlan.hh"
#include "dataplane/vnet_face/vnet_header.hh"
#include "tests/unit/frames.hh"

namespace jakiro::overlay {
namespace {

using test::ip;
using test::mac;

const tunnel_endpoints h1_to_h2{mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"),
                                ip("198.18.0.1"), ip("198.18.0.2")};
constexpr uint32_t start_seq = 1000000;

rte_mempool* big_pool() {
    static rte_mempool* pool =
        rte_pktmbuf_pool_create("sf_test_big", 31, 0, 0, UINT16_MAX, rte_socket_id());
    return pool;
}
rte_mempool* small_pool() {
    static rte_mempool* pool = rte_pktmbuf_pool_create("sf_test_small", 4095, 0, 0,
                                                       RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
    return pool;
}

struct SuperframeTest : testing::Test {
    std::vector<uint8_t> payload;
    std::vector<rte_mbuf*> owned;
    void TearDown() override {
        for (rte_mbuf* m : owned) {
            rte_pktmbuf_free(m);
        }
    }

    // A tenant's TCP super-frame as the vnet face receives it: `bytes` of payload, segment
    // size `mss`, partial checksum.
    rte_mbuf* tenant_superframe(uint32_t bytes, uint16_t mss) {
        rte_mbuf* m = rte_pktmbuf_alloc(big_pool());
        std::vector<uint8_t> frame(54 + bytes);
        test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                   ip("198.19.1.1"), ip("198.19.1.2")};
        spec.proto = IPPROTO_TCP;
        spec.payload = static_cast<uint16_t>(bytes);
        test::write_ipv4_frame(frame.data(), spec);
        payload.resize(bytes);
        for (uint32_t i = 0; i < bytes; ++i) {
            payload[i] = static_cast<uint8_t>(i * 13 + 5);
        }
        std::memcpy(frame.data() + 54, payload.data(), bytes);
        auto* iph = reinterpret_cast<rte_ipv4_hdr*>(frame.data() + 14);
        iph->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
        iph->hdr_checksum = 0;
        iph->hdr_checksum = rte_ipv4_cksum(iph);
        auto* tcp = reinterpret_cast<rte_tcp_hdr*>(iph + 1);
        tcp->data_off = 5 << 4;
        // ACK alone: rte_gro merges only ACK segments (a PSH segment ends a merge).
        tcp->tcp_flags = RTE_TCP_ACK_FLAG;
        tcp->sent_seq = rte_cpu_to_be_32(start_seq);
        tcp->cksum = rte_ipv4_phdr_cksum(iph, 0);
        std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size())), frame.data(),
                    frame.size());
        const vnet_face::virtio_net_hdr hdr{vnet_face::VIRTIO_NET_HDR_F_NEEDS_CSUM,
                                            vnet_face::VIRTIO_NET_HDR_GSO_TCPV4,
                                            54,
                                            mss,
                                            34,
                                            16};
        EXPECT_EQ(vnet_face::to_mbuf(hdr, m), vnet_face::header_verdict::ok);
        return m;
    }

    // A tenant super-frame of `bytes` (segment size 1398) as the other host's uplink receives
    // it: cut into VXLAN frames of at most 1514 bytes, each in a plain mbuf, in `burst`.
    // Returns how many (0 if something failed).
    int fabric_frames(uint32_t bytes, rte_mbuf** burst) {
        rte_mbuf* m = tenant_superframe(bytes, 1398);
        if (!encapsulate(m, h1_to_h2, 100, 0, 50001)) {
            rte_pktmbuf_free(m);
            return 0;
        }
        rte_mbuf* frames[max_segments];
        const int n = segment_superframe(m, true, 1514, small_pool(), frames, max_segments);
        for (int i = 0; i < n; ++i) {
            burst[i] = received_copy(frames[i]);
            rte_pktmbuf_free(frames[i]);
        }
        return n < 0 ? 0 : n;
    }

    // A frame copied into one plain mbuf, as a port would receive it.
    rte_mbuf* received_copy(const rte_mbuf* m) {
        rte_mbuf* copy = rte_pktmbuf_alloc(small_pool());
        const uint32_t len = rte_pktmbuf_pkt_len(m);
        rte_pktmbuf_read(m, 0, len, rte_pktmbuf_append(copy, static_cast<uint16_t>(len)));
        return copy;
    }
};

// Every check a receiver makes on one VXLAN frame; returns its inner TCP payload.
std::vector<uint8_t> check_wire_frame(rte_mbuf* frame, uint32_t max_len, uint32_t* seq) {
    std::vector<uint8_t> bytes(rte_pktmbuf_pkt_len(frame));
    rte_pktmbuf_read(frame, 0, bytes.size(), bytes.data());
    EXPECT_LE(bytes.size(), max_len);
    const auto check = check_outer(bytes.data(), bytes.size(), ip("198.18.0.2"));
    EXPECT_TRUE(check.ok) << "outer headers (RFC 7348, lengths, IPv4 checksum) must verify";
    auto* udp = reinterpret_cast<rte_udp_hdr*>(bytes.data() + 34);
    EXPECT_EQ(udp->dgram_cksum, 0) << "VXLAN over IPv4 sends UDP checksum 0";
    auto* inner = reinterpret_cast<rte_ipv4_hdr*>(bytes.data() + outer_header_bytes + 14);
    EXPECT_EQ(rte_be_to_cpu_16(inner->total_length), bytes.size() - outer_header_bytes - 14);
    EXPECT_EQ(rte_raw_cksum(inner, 20), 0xffff) << "inner IPv4 checksum";
    EXPECT_EQ(test::l4_checksum_ok(inner), true) << "inner TCP checksum";
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(inner + 1);
    *seq = rte_be_to_cpu_32(tcp->sent_seq);
    return {bytes.begin() + outer_header_bytes + 14 + 40, bytes.end()};
}

TEST_F(SuperframeTest, TunnelledSuperFrameIsCutIntoUnderlayMtuFramesThatEachVerify) {
    rte_mbuf* m = tenant_superframe(60000, 1398);
    ASSERT_TRUE(m->ol_flags & RTE_MBUF_F_TX_TCP_SEG);
    ASSERT_TRUE(encapsulate(m, h1_to_h2, 100, 0, 50001));
    rte_mbuf* frames[max_segments];
    const int n = segment_superframe(m, true, 1514, small_pool(), frames, max_segments);
    ASSERT_EQ(n, (60000 + 1397) / 1398) << "the tenant's segment size is kept";
    std::vector<uint8_t> joined;
    uint32_t expected_seq = start_seq;
    for (int i = 0; i < n; ++i) {
        owned.push_back(frames[i]);
        uint32_t seq = 0;
        const auto part = check_wire_frame(frames[i], 1514, &seq);
        EXPECT_EQ(seq, expected_seq) << "frame " << i;
        expected_seq += part.size();
        joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, payload) << "every byte once, in order";
}

TEST_F(SuperframeTest, LargerTenantSegmentsAreCutToTheUnderlayMtu) {
    rte_mbuf* m = tenant_superframe(30000, 8948);  // a jumbo tenant's segments
    ASSERT_TRUE(encapsulate(m, h1_to_h2, 100, 0, 50001));
    rte_mbuf* frames[max_segments];
    const int n = segment_superframe(m, true, 1514, small_pool(), frames, max_segments);
    ASSERT_GT(n, 0);
    for (int i = 0; i < n; ++i) {
        owned.push_back(frames[i]);
        EXPECT_LE(rte_pktmbuf_pkt_len(frames[i]), 1514u);
    }
}

TEST_F(SuperframeTest, PlainSuperFrameIsCutForAPortWithoutSuperFrames) {
    rte_mbuf* m = tenant_superframe(10000, 1398);
    rte_mbuf* frames[max_segments];
    const int n = segment_superframe(m, false, 1464, small_pool(), frames, max_segments);
    ASSERT_EQ(n, 8);
    uint32_t total = 0;
    for (int i = 0; i < n; ++i) {
        owned.push_back(frames[i]);
        std::vector<uint8_t> bytes(rte_pktmbuf_pkt_len(frames[i]));
        rte_pktmbuf_read(frames[i], 0, bytes.size(), bytes.data());
        auto* iph = reinterpret_cast<rte_ipv4_hdr*>(bytes.data() + 14);
        EXPECT_EQ(rte_raw_cksum(iph, 20), 0xffff);
        EXPECT_EQ(test::l4_checksum_ok(iph), true);
        EXPECT_EQ(frames[i]->ol_flags & RTE_MBUF_F_TX_TCP_SEG, 0u) << "no longer a super-frame";
        total += bytes.size() - 54;
    }
    EXPECT_EQ(total, 10000u);
}

TEST_F(SuperframeTest, FabricFramesOfOneFlowAreMergedIntoOneSuperFrameThatChecksOut) {
    rte_mbuf* burst[max_merged];
    const int n = fabric_frames(40000, burst);
    ASSERT_GT(n, 1);
    // Something that is not VXLAN-TCP in the middle of the burst stays as it is.
    uint8_t arp[64];
    burst[n] = test::mbuf_from(
        small_pool(), arp,
        write_arp_request(arp, mac("02:00:00:00:00:09"), ip("198.18.0.9"), ip("198.18.0.2")));
    const uint16_t left = merge_burst(burst, static_cast<uint16_t>(n + 1));
    ASSERT_EQ(left, 2);
    rte_mbuf* merged = burst[0]->nb_segs > 1 ? burst[0] : burst[1];
    owned.push_back(burst[0]);
    owned.push_back(burst[1]);
    EXPECT_EQ(merged->tso_segsz, 1398) << "the segment size, for the tenant's vnet header";
    const uint32_t len = rte_pktmbuf_pkt_len(merged);
    EXPECT_EQ(len, outer_header_bytes + 54 + 40000);
    const auto check = check_outer(rte_pktmbuf_mtod(merged, const uint8_t*), len, ip("198.18.0.2"));
    ASSERT_TRUE(check.ok) << "merged outer lengths and checksum are right";
    auto* inner = rte_pktmbuf_mtod_offset(merged, rte_ipv4_hdr*, outer_header_bytes + 14);
    EXPECT_EQ(rte_be_to_cpu_16(inner->total_length), 40040);
    EXPECT_EQ(rte_raw_cksum(inner, 20), 0xffff);
    std::vector<uint8_t> data(40000);
    rte_pktmbuf_read(merged, outer_header_bytes + 54, data.size(), data.data());
    EXPECT_EQ(data, payload);
}

// rte_gro hands back what it cannot merge after everything it merged. A PSH segment (the last
// of each tenant super-frame) or a tap's ready-made super-frame in the middle of a burst must
// still leave before the later frames of its flow: the tenant's TCP reads reordering as loss.
TEST_F(SuperframeTest, FramesRteGroPassesByKeepTheirPlaceInTheirFlow) {
    for (const bool ready_made : {false, true}) {
        SCOPED_TRACE(ready_made ? "a ready-made super-frame" : "a PSH segment");
        rte_mbuf* burst[max_merged];
        const int n = fabric_frames(40000, burst);
        ASSERT_GT(n, 6);
        const int middle = n / 2;
        auto* tcp = rte_pktmbuf_mtod_offset(burst[middle], rte_tcp_hdr*, outer_header_bytes + 34);
        if (ready_made) {
            burst[middle]->ol_flags |= RTE_MBUF_F_RX_LRO;
        } else {
            tcp->tcp_flags |= RTE_TCP_PSH_FLAG;
        }
        const uint16_t left = merge_burst(burst, static_cast<uint16_t>(n));
        for (uint16_t i = 0; i < left; ++i) {
            owned.push_back(burst[i]);
        }
        ASSERT_EQ(left, 3) << "the frames before it, it, the frames after it";
        uint32_t previous_end = start_seq;
        for (uint16_t i = 0; i < left; ++i) {
            const auto* inner =
                rte_pktmbuf_mtod_offset(burst[i], const rte_ipv4_hdr*, outer_header_bytes + 14);
            const auto* t = reinterpret_cast<const rte_tcp_hdr*>(inner + 1);
            const uint32_t seq = rte_be_to_cpu_32(t->sent_seq);
            EXPECT_EQ(seq, previous_end) << "frame " << i << " continues the stream";
            previous_end = seq + rte_be_to_cpu_16(inner->total_length) - 40;
        }
        EXPECT_EQ(previous_end, start_seq + 40000);
        EXPECT_EQ(burst[1]->nb_segs, 1) << "passed by untouched";
        EXPECT_GT(burst[2]->nb_segs, 1) << "the frames after it are merged still";
    }
}

// A hostile frame in mid-burst: its TCP header claims 60 bytes but the frame ends 8 bytes into
// it, or its IPv4 length says more than arrived. It is passed by in place, untouched; the
// honest frames around it (the control) still merge, and none crosses it.
TEST_F(SuperframeTest, AFrameWithLyingLengthsIsPassedByInPlaceAndItsNeighboursStillMerge) {
    for (const bool short_tcp : {true, false}) {
        SCOPED_TRACE(short_tcp ? "TCP header past the end" : "IPv4 length past the end");
        rte_mbuf* burst[max_merged];
        const int n = fabric_frames(40000, burst);
        ASSERT_GT(n, 6);
        const int middle = n / 2;
        rte_mbuf* liar = burst[middle];
        auto* inner = rte_pktmbuf_mtod_offset(liar, rte_ipv4_hdr*, outer_header_bytes + 14);
        if (short_tcp) {
            reinterpret_cast<rte_tcp_hdr*>(inner + 1)->data_off = 15 << 4;
            rte_pktmbuf_trim(liar, static_cast<uint16_t>(rte_pktmbuf_pkt_len(liar) -
                                                         (outer_header_bytes + 14 + 20 + 8)));
        } else {
            inner->total_length = rte_cpu_to_be_16(rte_be_to_cpu_16(inner->total_length) + 100);
        }
        const uint32_t liar_len = rte_pktmbuf_pkt_len(liar);
        const uint16_t left = merge_burst(burst, static_cast<uint16_t>(n));
        for (uint16_t i = 0; i < left; ++i) {
            owned.push_back(burst[i]);
        }
        ASSERT_EQ(left, 3) << "the frames before it merged, it, the frames after it merged";
        EXPECT_GT(burst[0]->nb_segs, 1) << "control: honest frames merge";
        EXPECT_EQ(burst[1], liar);
        EXPECT_EQ(rte_pktmbuf_pkt_len(liar), liar_len) << "untouched";
        EXPECT_EQ(liar->packet_type, 0u);
        EXPECT_GT(burst[2]->nb_segs, 1);
    }
}

TEST_F(SuperframeTest, ChargesEveryWireFrameWithItsHeadersAndVxlan) {
    rte_mbuf* m = tenant_superframe(14000, 1400);
    owned.push_back(m);
    auto* iph = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, 14);
    EXPECT_EQ(charged_wire_bytes(iph, 0), 14040u + 64) << "one frame: inner frame + 50";
    EXPECT_EQ(charged_wire_bytes(iph, 1400), 14000u + 10 * (40 + 64));
    EXPECT_EQ(charged_wire_bytes(iph, 1399), 14000u + 11 * (40 + 64));
}

TEST_F(SuperframeTest, SuperFrameFitsOnlyWithSegmentsWithinTheMtuAndFewEnoughOfThem) {
    rte_mbuf* m = tenant_superframe(60000, 1410);
    owned.push_back(m);
    EXPECT_TRUE(superframe_fits(m, 1450));
    m->tso_segsz = 1411;  // 1451-byte packets
    EXPECT_FALSE(superframe_fits(m, 1450));
    m->tso_segsz = 900;  // 67 frames
    EXPECT_FALSE(superframe_fits(m, 1450));
}

}  // namespace
}  // namespace jakiro::overlay
