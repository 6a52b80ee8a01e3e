#include "dataplane/vnet_face/uplink_frames.hh"

#include <gtest/gtest.h>
#include <rte_udp.h>

#include <random>
#include <vector>

#include "dataplane/overlay/udp_gso.hh"
#include "tests/unit/frames.hh"

namespace jakiro::vnet_face {
namespace {

using test::ip;
using test::mac;

rte_mempool* pool() {
    static rte_mempool* p = rte_pktmbuf_pool_create("uplink_frames_test", 2047, 0, 0,
                                                    RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
    return p;
}

// An Ethernet/IPv4/UDP frame of `len` bytes from the fabric; its first bytes in a fresh mbuf
// (as many as fit), the rest in `tail`. The UDP checksum field holds the pseudo-header sum.
rte_mbuf* from_fabric(uint32_t len, std::vector<uint8_t>& tail) {
    std::vector<uint8_t> bytes(len);
    for (uint32_t i = 0; i < len; ++i) {
        bytes[i] = static_cast<uint8_t>(i * 7);
    }
    test::ipv4_frame_spec spec{mac("02:00:00:00:00:02"), mac("02:00:00:00:00:01"), ip("198.18.0.1"),
                               ip("198.18.0.2")};
    spec.proto = IPPROTO_UDP;
    spec.payload = static_cast<uint16_t>(std::min<uint32_t>(len - 42, 1400));
    test::write_ipv4_frame(bytes.data(), spec);
    auto* iph = reinterpret_cast<rte_ipv4_hdr*>(bytes.data() + 14);
    reinterpret_cast<rte_udp_hdr*>(iph + 1)->dgram_cksum = rte_ipv4_phdr_cksum(iph, 0);
    return test::head_and_tail(pool(), bytes, tail);
}

struct UplinkFramesTest : testing::Test {
    std::vector<uint8_t> tail;
    rte_mbuf* out[overlay::max_gso_chunks] = {};
    uint16_t count = 0;
    void TearDown() override { rte_pktmbuf_free_bulk(out, count); }

    std::optional<drop_reason> take(const virtio_net_hdr& hdr, uint32_t len) {
        rte_mbuf* head = from_fabric(len, tail);
        return take_uplink_message(hdr, head, tail.empty() ? nullptr : tail.data(), len, pool(),
                                   out, count);
    }
};

constexpr virtio_net_hdr no_offload{};
constexpr virtio_net_hdr partial_udp{
    VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_NONE, 0, 0, 34, udp_csum_offset};
virtio_net_hdr udp_gso(uint16_t gso_size) {
    return {
        VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_UDP_L4, 42, gso_size, 34, udp_csum_offset};
}

TEST_F(UplinkFramesTest, OrdinaryFrameGoesOnAsItIs) {
    ASSERT_FALSE(take(no_offload, 1442));
    ASSERT_EQ(count, 1);
    EXPECT_EQ(rte_pktmbuf_pkt_len(out[0]), 1442u);
}

TEST_F(UplinkFramesTest, PartialChecksumOfASoftwareSegmentedFrameIsCompleted) {
    ASSERT_FALSE(take(partial_udp, 1442));
    ASSERT_EQ(count, 1);
    EXPECT_TRUE(test::l4_checksum_ok(rte_pktmbuf_mtod_offset(out[0], rte_ipv4_hdr*, 14)));
}

TEST_F(UplinkFramesTest, UdpGsoDatagramIsCutIntoItsFrames) {
    ASSERT_FALSE(take(udp_gso(1472), 42 + 10 * 1472));
    EXPECT_EQ(count, 10);
}

TEST_F(UplinkFramesTest, HeadersTheKernelNeverGivesAreCountedDrops) {
    virtio_net_hdr tcp = udp_gso(1400);
    tcp.gso_type = VIRTIO_NET_HDR_GSO_TCPV4;
    EXPECT_EQ(take(tcp, 9000), drop_reason::uplink_bad_vnet_header) << "TCP GSO from the fabric";
    virtio_net_hdr no_csum = udp_gso(1400);
    no_csum.flags = 0;
    EXPECT_EQ(take(no_csum, 9000), drop_reason::uplink_bad_vnet_header);
    virtio_net_hdr elsewhere = udp_gso(1400);
    elsewhere.csum_start = 40;
    EXPECT_EQ(take(elsewhere, 9000), drop_reason::uplink_bad_vnet_header);
    virtio_net_hdr offsets = partial_udp;
    offsets.csum_start = 1500;
    EXPECT_EQ(take(offsets, 1442), drop_reason::uplink_bad_vnet_header);
    virtio_net_hdr flags = no_offload;
    flags.flags = 0x40;
    EXPECT_EQ(take(flags, 1442), drop_reason::uplink_bad_vnet_header);
    EXPECT_EQ(take(no_offload, 9000), drop_reason::uplink_frame_too_big)
        << "more than an mbuf without GSO";
    EXPECT_EQ(take(udp_gso(0), 9000), drop_reason::uplink_gso_bad_size);
    EXPECT_EQ(take(udp_gso(64), 60000), drop_reason::uplink_gso_too_many_segments);
    EXPECT_EQ(count, 0);
}

TEST_F(UplinkFramesTest, RandomHeadersOnRandomFramesAreRefusedOrCutWithinTheirBytes) {
    std::mt19937 rng(19);
    for (int round = 0; round < 3000; ++round) {
        virtio_net_hdr hdr;
        auto* raw = reinterpret_cast<uint8_t*>(&hdr);
        for (size_t i = 0; i < sizeof(hdr); ++i) {
            raw[i] = static_cast<uint8_t>(rng());
        }
        if (rng() % 2) {  // half of them near the truth
            hdr = rng() % 2 ? udp_gso(static_cast<uint16_t>(rng() % 2048)) : partial_udp;
            hdr.csum_start = static_cast<uint16_t>(hdr.csum_start + (rng() % 3) - 1);
        }
        const uint32_t len = 43 + rng() % 65400;
        const auto dropped = take(hdr, len);
        if (dropped) {
            EXPECT_EQ(count, 0);
            continue;
        }
        uint32_t total = 0;
        for (uint16_t i = 0; i < count; ++i) {
            EXPECT_LE(rte_pktmbuf_pkt_len(out[i]), RTE_MBUF_DEFAULT_DATAROOM);
            total += rte_pktmbuf_pkt_len(out[i]) - (count > 1 ? 42 : 0);
        }
        EXPECT_EQ(total, count > 1 ? len - 42 : len);
        rte_pktmbuf_free_bulk(out, count);
        count = 0;
    }
}

}  // namespace
}  // namespace jakiro::vnet_face
