#include "dataplane/vnet_face/vnet_header.hh"

#include <gtest/gtest.h>
#include <rte_tcp.h>

#include <random>
#include <vector>

#include "tests/unit/frames.hh"

namespace jakiro::vnet_face {
namespace {

using test::ip;
using test::mac;

// One pool of 64 KB mbufs, as the face receives into.
rte_mempool* big_pool() {
    static rte_mempool* pool =
        rte_pktmbuf_pool_create("vnet_hdr_test", 63, 0, 0, UINT16_MAX, rte_socket_id());
    return pool;
}

struct VnetHeaderTest : testing::Test {
    rte_mbuf* m = nullptr;
    void TearDown() override { rte_pktmbuf_free(m); }

    // An Ethernet/IPv4/TCP or UDP frame of `payload` bytes whose L4 checksum field holds the
    // pseudo-header sum, as a tenant's kernel hands it over with CHECKSUM_PARTIAL.
    void frame(uint8_t proto, uint32_t payload) {
        m = rte_pktmbuf_alloc(big_pool());
        ASSERT_NE(m, nullptr);
        std::vector<uint8_t> bytes(14 + 20 + 20 + payload);
        test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                   ip("198.19.1.1"), ip("198.19.1.2")};
        spec.proto = proto;
        spec.payload = static_cast<uint16_t>(payload);
        const uint32_t len = test::write_ipv4_frame(bytes.data(), spec);
        for (uint32_t i = len - payload; i < len; ++i) {
            bytes[i] = static_cast<uint8_t>(i * 7);
        }
        auto* iph = reinterpret_cast<rte_ipv4_hdr*>(bytes.data() + 14);
        if (proto == IPPROTO_TCP) {
            auto* tcp = reinterpret_cast<rte_tcp_hdr*>(iph + 1);
            tcp->data_off = 5 << 4;
            tcp->tcp_flags = RTE_TCP_ACK_FLAG;
            tcp->cksum = rte_ipv4_phdr_cksum(iph, 0);
        } else {
            reinterpret_cast<rte_udp_hdr*>(iph + 1)->dgram_cksum = rte_ipv4_phdr_cksum(iph, 0);
        }
        std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(len)), bytes.data(), len);
    }
    rte_ipv4_hdr* iph() { return rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, 14); }
    bool l4_checksum_verifies() { return test::l4_checksum_ok(iph()); }

    static virtio_net_hdr tso(uint16_t gso_size) {
        return {VIRTIO_NET_HDR_F_NEEDS_CSUM,
                VIRTIO_NET_HDR_GSO_TCPV4,
                54,
                gso_size,
                34,
                tcp_csum_offset};
    }
};

TEST_F(VnetHeaderTest, GsoTcpv4SuperFrameBecomesATsoMbufWithSegmentSizeAndHeaderLengths) {
    frame(IPPROTO_TCP, 20000);
    ASSERT_EQ(to_mbuf(tso(1448), m), header_verdict::ok);
    EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_TX_TCP_SEG);
    EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_TX_IPV4);
    EXPECT_EQ(m->tso_segsz, 1448);
    EXPECT_EQ(m->l2_len, 14);
    EXPECT_EQ(m->l3_len, 20);
    EXPECT_EQ(m->l4_len, 20);
    EXPECT_EQ(rte_pktmbuf_pkt_len(m), 14u + 40 + 20000) << "the bytes stay as they are";
}

TEST_F(VnetHeaderTest, PartialChecksumWithoutGsoIsCompletedAndTheFrameIsOrdinary) {
    frame(IPPROTO_UDP, 300);
    EXPECT_FALSE(l4_checksum_verifies());
    const virtio_net_hdr hdr{
        VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_NONE, 0, 0, 34, udp_csum_offset};
    ASSERT_EQ(to_mbuf(hdr, m), header_verdict::ok);
    EXPECT_TRUE(l4_checksum_verifies());
    EXPECT_EQ(m->ol_flags, 0u);
}

TEST_F(VnetHeaderTest, GsoFrameOfOneSegmentIsCompletedAndNotMarked) {
    frame(IPPROTO_TCP, 1000);
    ASSERT_EQ(to_mbuf(tso(1448), m), header_verdict::ok);
    EXPECT_EQ(m->ol_flags, 0u);
    EXPECT_TRUE(l4_checksum_verifies());
}

TEST_F(VnetHeaderTest, FrameWithoutFlagsIsLeftAlone) {
    frame(IPPROTO_TCP, 100);
    const auto before = *iph();
    ASSERT_EQ(to_mbuf(virtio_net_hdr{}, m), header_verdict::ok);
    EXPECT_EQ(m->ol_flags, 0u);
    EXPECT_EQ(std::memcmp(&before, iph(), sizeof(before)), 0);
}

TEST_F(VnetHeaderTest, RefusesGsoSizeZeroAndGsoWithoutNeedsCsum) {
    frame(IPPROTO_TCP, 5000);
    EXPECT_EQ(to_mbuf(tso(0), m), header_verdict::bad_gso_size);
    auto no_csum = tso(1448);
    no_csum.flags = 0;
    EXPECT_EQ(to_mbuf(no_csum, m), header_verdict::bad_gso_size);
}

TEST_F(VnetHeaderTest, RefusesGsoTypesOtherThanTcpv4AndTcpv6) {
    frame(IPPROTO_TCP, 5000);
    for (const uint8_t type : {3, 5, 0x80 | 3, 0x7f}) {
        auto hdr = tso(1448);
        hdr.gso_type = type;
        EXPECT_EQ(to_mbuf(hdr, m), header_verdict::bad_gso_type) << int(type);
    }
    virtio_net_hdr ecn_alone{};
    ecn_alone.gso_type = VIRTIO_NET_HDR_GSO_ECN;
    EXPECT_EQ(to_mbuf(ecn_alone, m), header_verdict::bad_gso_type);
}

TEST_F(VnetHeaderTest, RefusesUnknownFlags) {
    frame(IPPROTO_TCP, 5000);
    auto hdr = tso(1448);
    hdr.flags |= 4;  // RSC_INFO: not for packet sockets
    EXPECT_EQ(to_mbuf(hdr, m), header_verdict::bad_flags);
}

TEST_F(VnetHeaderTest, RefusesChecksumOffsetsOutsideTheFrameOrAwayFromTcp) {
    frame(IPPROTO_TCP, 5000);
    auto beyond = tso(1448);
    beyond.csum_start = 60000;
    EXPECT_EQ(to_mbuf(beyond, m), header_verdict::bad_csum_offsets);
    auto in_ethernet = tso(1448);
    in_ethernet.csum_start = 4;
    EXPECT_EQ(to_mbuf(in_ethernet, m), header_verdict::bad_csum_offsets);
    auto wrong_field = tso(1448);
    wrong_field.csum_offset = 6;
    EXPECT_EQ(to_mbuf(wrong_field, m), header_verdict::bad_csum_offsets);
    const virtio_net_hdr partial_past_end{
        VIRTIO_NET_HDR_F_NEEDS_CSUM, 0, 0, 0, static_cast<uint16_t>(rte_pktmbuf_pkt_len(m) - 1), 0};
    EXPECT_EQ(to_mbuf(partial_past_end, m), header_verdict::bad_csum_offsets);
}

TEST_F(VnetHeaderTest, RefusesGsoTcpv4OnAFrameThatIsNotTcpOverIpv4) {
    frame(IPPROTO_UDP, 5000);
    EXPECT_EQ(to_mbuf(tso(1448), m), header_verdict::not_tcp_ipv4);
}

TEST_F(VnetHeaderTest, RefusesGsoWithTruncatedHeadersOrNoPayload) {
    frame(IPPROTO_TCP, 0);
    EXPECT_EQ(to_mbuf(tso(1448), m), header_verdict::truncated);
    rte_pktmbuf_trim(m, 10);  // TCP header cut short
    EXPECT_EQ(to_mbuf(tso(1448), m), header_verdict::bad_csum_offsets);
}

TEST_F(VnetHeaderTest, SuperFrameLeavesAsGsoTcpv4WithNeedsCsum) {
    frame(IPPROTO_TCP, 20000);
    ASSERT_EQ(to_mbuf(tso(1398), m), header_verdict::ok);
    const virtio_net_hdr out = from_mbuf(m);
    EXPECT_EQ(out.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
    EXPECT_EQ(out.gso_type, VIRTIO_NET_HDR_GSO_TCPV4);
    EXPECT_EQ(out.gso_size, 1398);
    EXPECT_EQ(out.hdr_len, 54);
    EXPECT_EQ(out.csum_start, 34);
    EXPECT_EQ(out.csum_offset, 16);
}

TEST_F(VnetHeaderTest, OrdinaryFrameLeavesWithAnEmptyHeader) {
    frame(IPPROTO_TCP, 100);
    const virtio_net_hdr out = from_mbuf(m);
    EXPECT_EQ(out.flags, 0);
    EXPECT_EQ(out.gso_type, 0);
    EXPECT_EQ(out.gso_size, 0);
}

TEST_F(VnetHeaderTest, MarkedMergedFrameCarriesThePseudoHeaderSumTheKernelExpects) {
    frame(IPPROTO_TCP, 30000);
    rte_pktmbuf_mtod_offset(m, rte_tcp_hdr*, 34)->cksum = 0x1234;  // whatever GRO left
    mark_tcp_superframe(m, 1448);
    EXPECT_EQ(rte_pktmbuf_mtod_offset(m, rte_tcp_hdr*, 34)->cksum, rte_ipv4_phdr_cksum(iph(), 0));
    const virtio_net_hdr out = from_mbuf(m);
    EXPECT_EQ(out.gso_type, VIRTIO_NET_HDR_GSO_TCPV4);
    EXPECT_EQ(out.gso_size, 1448);
}

// Hostile headers on hostile bytes: every combination is either refused with a verdict or
// accepted with metadata that stays inside the frame; nothing reads or writes past it.
TEST_F(VnetHeaderTest, RandomHeadersOnRandomFramesAreRefusedOrDescribeTheFrameSafely) {
    std::mt19937 rng(19);
    m = rte_pktmbuf_alloc(big_pool());
    ASSERT_NE(m, nullptr);
    unsigned accepted_super = 0, refused = 0;
    for (int round = 0; round < 20000; ++round) {
        rte_pktmbuf_reset(m);
        const uint16_t len = static_cast<uint16_t>(rng() % (round % 2 ? 200 : 9000));
        uint8_t* data = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, len));
        for (uint16_t i = 0; i < len; ++i) {
            data[i] = static_cast<uint8_t>(rng());
        }
        if (len >= 54 && rng() % 2) {  // plausible headers half of the time
            data[12] = 0x08;
            data[13] = 0x00;
            data[14] = static_cast<uint8_t>(0x45 + rng() % 3);
            data[23] = rng() % 3 ? IPPROTO_TCP : IPPROTO_UDP;
            data[46] = static_cast<uint8_t>((5 + rng() % 4) << 4);
        }
        virtio_net_hdr hdr;
        auto* raw = reinterpret_cast<uint8_t*>(&hdr);
        for (unsigned i = 0; i < sizeof(hdr); ++i) {
            raw[i] = static_cast<uint8_t>(rng());
        }
        if (rng() % 2) {  // mostly sensible fields, one of them off
            hdr.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
            hdr.gso_type = rng() % 4 ? VIRTIO_NET_HDR_GSO_TCPV4 : VIRTIO_NET_HDR_GSO_NONE;
            hdr.csum_start = static_cast<uint16_t>(34 + rng() % 3 * 4);
            hdr.csum_offset = rng() % 4 ? tcp_csum_offset : static_cast<uint16_t>(rng());
            hdr.gso_size = static_cast<uint16_t>(rng() % 3 ? rng() % 2000 : 0);
        }
        if (to_mbuf(hdr, m) != header_verdict::ok) {
            ++refused;
            continue;
        }
        if (m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) {
            ++accepted_super;
            EXPECT_GT(m->tso_segsz, 0);
            EXPECT_LT(static_cast<uint32_t>(m->l2_len + m->l3_len + m->l4_len), len);
            EXPECT_EQ(from_mbuf(m).hdr_len, m->l2_len + m->l3_len + m->l4_len);
        }
    }
    EXPECT_GT(refused, 1000u);
    EXPECT_GT(accepted_super, 10u) << "the generator must reach the accepting path too";
}

// A dual-stack tenant's TCPv6 super-frame, as its kernel hands it over: GSO TCPv6, the partial
// checksum over the IPv6 pseudo-header with the whole length.
rte_mbuf* tcp6_frame(uint32_t payload, uint16_t mss) {
    const test::ipv6_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                     test::ip6("2001:2::1:1"), test::ip6("2001:2::1:2")};
    return test::tcp6_superframe_mbuf(big_pool(), spec, payload, mss);
}

TEST(VnetHeaderTcp6, GsoTcpv6SuperFrameBecomesATsoMbufMarkedIpv6) {
    rte_mbuf* m = tcp6_frame(20000, 1428);
    ASSERT_NE(m, nullptr);
    EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_TX_TCP_SEG);
    EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_TX_IPV6);
    EXPECT_FALSE(m->ol_flags & RTE_MBUF_F_TX_IPV4);
    EXPECT_EQ(m->tso_segsz, 1428);
    EXPECT_EQ(m->l2_len, 14);
    EXPECT_EQ(m->l3_len, 40);
    EXPECT_EQ(m->l4_len, 20);
    EXPECT_EQ(rte_pktmbuf_pkt_len(m), 14u + 60 + 20000) << "the bytes stay as they are";
    const virtio_net_hdr out = from_mbuf(m);
    EXPECT_EQ(out.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
    EXPECT_EQ(out.gso_type, VIRTIO_NET_HDR_GSO_TCPV6) << "leaves as it came";
    EXPECT_EQ(out.gso_size, 1428);
    EXPECT_EQ(out.hdr_len, 74);
    EXPECT_EQ(out.csum_start, 54);
    EXPECT_EQ(out.csum_offset, tcp_csum_offset);
    rte_pktmbuf_free(m);
}

TEST(VnetHeaderTcp6, GsoTcpv6FrameOfOneSegmentGetsAChecksumThatVerifies) {
    rte_mbuf* m = tcp6_frame(1000, 1428);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->ol_flags, 0u);
    EXPECT_TRUE(test::l4_checksum_ok(rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, 14)))
        << "completed over the IPv6 pseudo-header";
    rte_pktmbuf_free(m);
}

TEST(VnetHeaderTcp6, MarkedSuperFrameCarriesThePseudoHeaderSumAKernelCompletes) {
    rte_mbuf* m = tcp6_frame(3000, 1428);
    ASSERT_NE(m, nullptr);
    auto* iph = rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, 14);
    reinterpret_cast<rte_tcp_hdr*>(iph + 1)->cksum = 0x1234;  // whatever the fabric left
    m->ol_flags = 0;
    mark_tcp6_superframe(m, 1000);
    const virtio_net_hdr out = from_mbuf(m);
    EXPECT_EQ(out.gso_type, VIRTIO_NET_HDR_GSO_TCPV6);
    EXPECT_EQ(out.gso_size, 1000);
    // What the tenant's kernel does with NEEDS_CSUM: sum from csum_start, fold, invert.
    complete_partial_checksum(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_pkt_len(m), out.csum_start,
                              out.csum_offset);
    EXPECT_TRUE(test::l4_checksum_ok(iph));
    rte_pktmbuf_free(m);
}

TEST(VnetHeaderTcp6, RefusesGsoTcpv6OnFramesThatAreNotTcpRightAfterTheIpv6Header) {
    rte_mbuf* m = tcp6_frame(5000, 1428);
    ASSERT_NE(m, nullptr);
    virtio_net_hdr hdr{VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_TCPV6, 74, 1428, 54, 16};
    auto* iph = rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, 14);
    iph->proto = 0;  // a hop-by-hop header first
    EXPECT_EQ(to_mbuf(hdr, m), header_verdict::not_tcp_ipv4);
    iph->proto = IPPROTO_TCP;
    iph->payload_len = rte_cpu_to_be_16(1000);  // a length that is not the frame's
    EXPECT_EQ(to_mbuf(hdr, m), header_verdict::not_tcp_ipv4);
    iph->payload_len = rte_cpu_to_be_16(5020);
    EXPECT_EQ(to_mbuf(hdr, m), header_verdict::ok);
    auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);  // GSO_TCPV6 on an IPv4 frame
    EXPECT_EQ(to_mbuf(hdr, m), header_verdict::not_tcp_ipv4);
    rte_pktmbuf_free(m);
}

}  // namespace
}  // namespace jakiro::vnet_face
