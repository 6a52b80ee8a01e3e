#include "dataplane/vnet_face/tap_header.hh"

#include <gtest/gtest.h>
#include <rte_udp.h>

#include <random>
#include <vector>

#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/vxlan.hh"
#include "dataplane/vnet_face/uplink_frames.hh"
#include "tests/unit/frames.hh"

namespace jakiro::vnet_face {
namespace {

using test::ip;
using test::mac;

rte_mempool* big_pool() {
    static rte_mempool* p =
        rte_pktmbuf_pool_create("tap_header_big", 63, 0, 0, UINT16_MAX, rte_socket_id());
    return p;
}
rte_mempool* small_pool() {
    static rte_mempool* p = rte_pktmbuf_pool_create("tap_header_small", 255, 0, 0,
                                                    RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
    return p;
}

const overlay::tunnel_endpoints h1_to_h2{mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"),
                                         ip("198.18.0.1"), ip("198.18.0.2")};
const test::ipv4_frame_spec t1_to_t2{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                     ip("198.19.1.1"), ip("198.19.1.2")};

// A tenant's TCP super-frame of `bytes` payload cut at `mss`, VXLAN-encapsulated and marked for
// a tap uplink, as the egress pipeline hands it to the face.
rte_mbuf* vxlan_superframe(uint32_t bytes, uint16_t mss) {
    rte_mbuf* m = test::tcp_superframe_mbuf(big_pool(), t1_to_t2, bytes, mss);
    EXPECT_NE(m, nullptr);
    EXPECT_TRUE(overlay::encapsulate(m, h1_to_h2, 100, 0, 50001));
    EXPECT_TRUE(overlay::mark_vxlan_superframe(m));
    return m;
}

// What the receiving tap uplink makes of `m`'s bytes: a 2 KB head mbuf with the first bytes,
// chained to a 64 KB mbuf with the rest (vnet_face receive_uplink_tap).
rte_mbuf* as_received(const rte_mbuf* m, uint32_t head_bytes = 1920) {
    std::vector<uint8_t> bytes = test::bytes_of(m);
    const uint32_t head_len = std::min<uint32_t>(head_bytes, bytes.size());
    rte_mbuf* head = test::mbuf_from(small_pool(), bytes.data(), head_len);
    if (head_len < bytes.size()) {
        rte_mbuf* tail =
            test::mbuf_from(big_pool(), bytes.data() + head_len, bytes.size() - head_len);
        EXPECT_EQ(rte_pktmbuf_chain(head, tail), 0);
    }
    return head;
}

TEST(TapHeader, VxlanSuperFrameLeavesWithTunnelGsoOffsetsWhereItsHeadersAre) {
    rte_mbuf* m = vxlan_superframe(20000, 1400);
    const tap_header h = tap_header_for(m);
    EXPECT_EQ(h.base.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
    EXPECT_EQ(h.base.gso_type, VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4 | VIRTIO_NET_HDR_GSO_TCPV4);
    EXPECT_EQ(h.base.gso_size, 1400);
    EXPECT_EQ(h.outer_th_offset, 34) << "outer UDP after Ethernet and IPv4";
    EXPECT_EQ(h.inner_nh_offset, 64) << "inner IPv4 after UDP, VXLAN and inner Ethernet";
    EXPECT_EQ(h.base.csum_start, 84) << "the inner TCP header";
    EXPECT_EQ(h.base.csum_offset, tcp_csum_offset);
    EXPECT_EQ(h.base.hdr_len, 104);
    // The outer headers the kernel copies to every segment are those of a whole VXLAN frame.
    const std::vector<uint8_t> bytes = test::bytes_of(m);
    const auto outer = overlay::check_outer(bytes.data(), bytes.size(), ip("198.18.0.2"));
    EXPECT_TRUE(outer.ok);
    EXPECT_EQ(reinterpret_cast<const rte_udp_hdr*>(bytes.data() + 34)->dgram_cksum, 0)
        << "RFC 7348: VXLAN over IPv4 sends UDP checksum 0";
    rte_pktmbuf_free(m);
}

TEST(TapHeader, Tcpv6SuperFrameCrossesWholeAsTunnelGsoTcpv6AndIsTakenAsMerged) {
    const test::ipv6_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                     test::ip6("2001:2::1:1"), test::ip6("2001:2::1:2")};
    rte_mbuf* m = test::tcp6_superframe_mbuf(big_pool(), spec, 20000, 1380);
    ASSERT_NE(m, nullptr);
    ASSERT_TRUE(overlay::encapsulate(m, h1_to_h2, 100, 0, 50001));
    ASSERT_TRUE(overlay::mark_vxlan_superframe(m));
    const tap_header h = tap_header_for(m);
    EXPECT_EQ(h.base.gso_type, VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4 | VIRTIO_NET_HDR_GSO_TCPV6);
    EXPECT_EQ(h.base.gso_size, 1380);
    EXPECT_EQ(h.inner_nh_offset, 64) << "inner IPv6 after UDP, VXLAN and inner Ethernet";
    EXPECT_EQ(h.base.csum_start, 104) << "the inner TCP header, after 40 bytes of IPv6";
    EXPECT_EQ(h.base.csum_offset, tcp_csum_offset);
    EXPECT_EQ(h.base.hdr_len, 124);
    rte_mbuf* received = as_received(m);
    ASSERT_FALSE(take_vxlan_superframe(h, received));
    EXPECT_EQ(received->ol_flags, RTE_MBUF_F_RX_LRO);
    EXPECT_EQ(received->tso_segsz, 1380);
    // A header claiming TCPv4 over the IPv6 bytes describes something else.
    tap_header lying = h;
    lying.base.gso_type = VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4 | VIRTIO_NET_HDR_GSO_TCPV4;
    EXPECT_EQ(take_vxlan_superframe(lying, as_received(m)), drop_reason::uplink_bad_superframe);
    rte_pktmbuf_free(received);
    rte_pktmbuf_free(m);
}

TEST(TapHeader, DatagramsAndOrdinaryFramesKeepThePlainHeaderAndNoOffsets) {
    rte_mbuf* m = rte_pktmbuf_alloc(small_pool());
    ASSERT_NE(rte_pktmbuf_append(m, 1000), nullptr);
    m->ol_flags = RTE_MBUF_F_TX_UDP_SEG;
    m->tso_segsz = 1090;
    m->l2_len = 14;
    m->l3_len = 20;
    m->l4_len = 8;
    tap_header h = tap_header_for(m);
    EXPECT_EQ(h.base.gso_type, VIRTIO_NET_HDR_GSO_UDP_L4);
    EXPECT_EQ(h.base.gso_size, 1090);
    EXPECT_EQ(h.outer_th_offset, 0);
    EXPECT_EQ(h.inner_nh_offset, 0);
    m->ol_flags = 0;
    h = tap_header_for(m);
    EXPECT_EQ(h.base.flags, 0);
    EXPECT_EQ(h.base.gso_type, VIRTIO_NET_HDR_GSO_NONE);
    rte_pktmbuf_free(m);
}

TEST(TapHeader, AnOuterIpv4LengthBeyond16BitsIsLeftToBeCut) {
    // Chained to more than an IPv4 length holds once the 50 bytes of VXLAN are in front.
    rte_mbuf* m = test::tcp_superframe_mbuf(big_pool(), t1_to_t2, 60000, 1400);
    ASSERT_NE(m, nullptr);
    rte_mbuf* more = rte_pktmbuf_alloc(big_pool());
    ASSERT_NE(rte_pktmbuf_append(more, 5500), nullptr);
    ASSERT_EQ(rte_pktmbuf_chain(m, more), 0);
    ASSERT_TRUE(overlay::encapsulate(m, h1_to_h2, 100, 0, 50001));
    const uint64_t flags = m->ol_flags;
    EXPECT_FALSE(overlay::mark_vxlan_superframe(m));
    EXPECT_EQ(m->ol_flags, flags);
    rte_pktmbuf_free(m);
}

struct TunnelReceiveTest : testing::Test {
    rte_mbuf* sent = nullptr;
    tap_header header{};
    void SetUp() override {
        sent = vxlan_superframe(20000, 1400);
        header = tap_header_for(sent);
    }
    void TearDown() override { rte_pktmbuf_free(sent); }
    std::optional<drop_reason> take(const tap_header& h, rte_mbuf* m) {
        const auto dropped = take_vxlan_superframe(h, m);
        if (!dropped) {
            taken = m;
        }
        return dropped;
    }
    rte_mbuf* taken = nullptr;
};

TEST_F(TunnelReceiveTest, SuperFrameFromAJakiroHostIsTakenWholeAsMerged) {
    rte_mbuf* m = as_received(sent);
    ASSERT_FALSE(take(header, m));
    EXPECT_EQ(rte_pktmbuf_pkt_len(m), rte_pktmbuf_pkt_len(sent));
    EXPECT_EQ(m->ol_flags, RTE_MBUF_F_RX_LRO);
    EXPECT_EQ(m->tso_segsz, 1400);
    // GRO leaves it alone: it is merged already.
    overlay::prepare_for_gro(m);
    EXPECT_EQ(m->packet_type, 0u);
    EXPECT_EQ(m->tso_segsz, 1400);
    rte_pktmbuf_free(taken);
}

TEST_F(TunnelReceiveTest, HeadersThatDoNotDescribeTheBytesAreCountedDrops) {
    const auto refused = [&](tap_header h, const char* why, uint32_t head_bytes = 1920) {
        EXPECT_EQ(take(h, as_received(sent, head_bytes)), drop_reason::uplink_bad_superframe)
            << why;
    };
    tap_header h = header;
    h.outer_th_offset = 38;
    refused(h, "outer UDP elsewhere");
    h = header;
    h.inner_nh_offset = 68;
    refused(h, "inner IPv4 elsewhere");
    h = header;
    h.base.flags = 0;
    refused(h, "tunnel GSO without a partial checksum");
    h = header;
    h.base.flags |= VIRTIO_NET_HDR_F_DATA_VALID;
    refused(h, "a flag a tunnel super-frame never has");
    h = header;
    h.base.gso_size = 0;
    refused(h, "segment size 0");
    h = header;
    h.base.gso_size = 200;
    refused(h, "100 segments: more than 64");
    h = header;
    h.base.gso_type = VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4 | VIRTIO_NET_HDR_GSO_UDP_L4;
    refused(h, "UDP inside: the ICRC of RoCE forbids cutting it");
    h = header;
    h.base.csum_start = 86;
    refused(h, "checksum not at TCP's");
    refused(header, "headers not in the first segment", 80);
    EXPECT_EQ(taken, nullptr);
}

TEST_F(TunnelReceiveTest, BytesThatAreNotVxlanTcpAreCountedDrops) {
    const auto refused_after = [&](uint32_t offset, uint8_t value, const char* why) {
        rte_mbuf* m = as_received(sent);
        rte_pktmbuf_mtod(m, uint8_t*)[offset] = value;
        EXPECT_EQ(take(header, m), drop_reason::uplink_bad_superframe) << why;
    };
    refused_after(37, 0xb6, "UDP port 4790, not VXLAN's 4789");
    refused_after(64 + 9, IPPROTO_UDP, "inner UDP");
    refused_after(14, 0x46, "outer IPv4 options");
    refused_after(62, 0x86, "inner IPv6 ethertype");
    EXPECT_EQ(taken, nullptr);
}

TEST_F(TunnelReceiveTest, RandomHeadersAreRefusedOrTakenWithinTheirBytes) {
    std::mt19937 rng(23);
    for (int round = 0; round < 2000; ++round) {
        tap_header h = header;
        auto* raw = reinterpret_cast<uint8_t*>(&h);
        // One to three random bytes of the header changed.
        for (unsigned k = 0; k < 1 + rng() % 3; ++k) {
            raw[rng() % sizeof(h)] = static_cast<uint8_t>(rng());
        }
        rte_mbuf* m = as_received(sent, 64 + rng() % 1900);
        if (take(h, m)) {
            continue;
        }
        EXPECT_GT(m->tso_segsz, 0);
        EXPECT_LE((rte_pktmbuf_pkt_len(m) - 104 + m->tso_segsz - 1) / m->tso_segsz,
                  overlay::max_segments);
        rte_pktmbuf_free(taken);
        taken = nullptr;
    }
}

}  // namespace
}  // namespace jakiro::vnet_face
