#include "dataplane/overlay/datagram_builder.hh"

#include <gtest/gtest.h>
#include <rte_udp.h>

#include <cstring>
#include <vector>

#include "tests/unit/dataplane/overlay/gso_test_support.hh"

namespace jakiro::overlay {
namespace {

using namespace gso_test;

constexpr size_t outer_and_vxlan = outer_header_bytes;  // 50: Ethernet, IPv4, UDP, VXLAN

// A RoCE-like VXLAN frame of `payload` inner UDP bytes from inner UDP source port `port` (one
// QP's flow), as roce_port has it after encapsulation.
rte_mbuf* flow_frame(uint16_t port, uint16_t payload, uint8_t fill) {
    test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"), ip("198.19.1.1"),
                               ip("198.19.1.2")};
    spec.src_port = port;
    spec.dst_port = 4791;
    spec.payload = payload;
    spec.tos = 0x02;  // ECT(0), copied outward
    rte_mbuf* m = test::ipv4_mbuf(small_pool(), spec);
    EXPECT_NE(m, nullptr);
    rte_pktmbuf_mtod_offset(m, uint8_t*, rte_pktmbuf_pkt_len(m) - 1)[0] = fill;
    const auto* inner = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, 14);
    const uint16_t entropy = flow_entropy_port(inner, rte_pktmbuf_pkt_len(m) - 14);
    EXPECT_TRUE(encapsulate(m, h1_to_h2, 100, spec.tos, entropy));
    return m;
}

// A segment the kernel cut from a padded run is frame `index` followed by zeros: the inner
// packet and its headers as they were, the outer lengths grown by the padding. Returns how
// many bytes of padding it carried.
// At most `max_padding` zero bytes.
size_t expect_padded_frame(std::vector<uint8_t> seg, const std::vector<uint8_t>& want, size_t index,
                           size_t max_padding) {
    EXPECT_GE(seg.size(), want.size()) << "frame " << index;
    if (seg.size() < want.size()) {
        return 0;
    }
    const size_t padding = seg.size() - want.size();
    EXPECT_LE(padding, max_padding) << "frame " << index;
    for (size_t i = want.size(); i < seg.size(); ++i) {
        EXPECT_EQ(seg[i], 0) << "frame " << index << " padding byte " << i - want.size();
    }
    seg.resize(want.size());
    auto* iph = reinterpret_cast<rte_ipv4_hdr*>(seg.data() + 14);
    iph->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(seg.size() - 14));
    reinterpret_cast<rte_udp_hdr*>(seg.data() + 34)->dgram_len =
        rte_cpu_to_be_16(static_cast<uint16_t>(seg.size() - 34));
    expect_same_frame(seg, want, index);
    return padding;
}

struct DatagramBuilderTest : testing::Test {
    datagram_builder builder;
    std::vector<rte_mbuf*> owned;
    std::vector<std::vector<uint8_t>> expected;  // every frame written, as encapsulation has it
    std::vector<rte_mbuf*> datagrams;
    uint64_t padding = 0;

    void TearDown() override {
        for (rte_mbuf* m : owned) {
            rte_pktmbuf_free(m);
        }
    }
    rte_mbuf* keep(rte_mbuf* m) {
        owned.push_back(m);
        return m;
    }
    // A 64 KB mbuf that held other bytes before (padding must never show them).
    rte_mbuf* used_big_mbuf() {
        rte_mbuf* m = rte_pktmbuf_alloc(big_pool());
        EXPECT_NE(m, nullptr);
        std::memset(rte_pktmbuf_mtod(m, void*), 0xAA, rte_pktmbuf_tailroom(m));
        return m;
    }
    void start_with(rte_mbuf* frame) {
        expected.push_back(bytes_of(frame));
        rte_mbuf* big = used_big_mbuf();
        ASSERT_TRUE(builder.start(big, frame));
        rte_pktmbuf_free(frame);
    }
    // Writes `frame`'s inner frame where the builder says, as the RNIC does (destination MAC
    // left zero: the route's comes from the first frame). False if it did not join.
    bool write(rte_mbuf* frame) {
        auto bytes = bytes_of(frame);
        const std::vector<uint8_t> inner(bytes.begin() + outer_and_vxlan, bytes.end());
        uint8_t* at = builder.reserve(static_cast<uint32_t>(inner.size()));
        if (at == nullptr) {
            return false;
        }
        std::memcpy(at, inner.data(), inner.size());
        std::memset(at, 0, RTE_ETHER_ADDR_LEN);
        if (!builder.reserved_joins()) {
            return false;
        }
        padding += builder.commit();
        expected.push_back(bytes);
        rte_pktmbuf_free(frame);
        return true;
    }
    // Sends `frame` the way roce_port does: into the open datagram, or it ends that one and
    // starts the next.
    void send(rte_mbuf* frame) {
        if (builder.open() && write(frame)) {
            return;
        }
        finish();
        start_with(frame);
    }
    void finish() {
        if (rte_mbuf* m = builder.finish()) {
            datagrams.push_back(keep(m));
        }
    }
    // Whatever the kernel cuts the datagrams into is every frame, in order, padded with zeros
    // at most by `max_padding`; returns the padding seen.
    uint64_t expect_every_frame_in_order(size_t max_padding) {
        size_t next = 0;
        uint64_t seen = 0;
        for (rte_mbuf* m : datagrams) {
            for (auto& seg : kernel_segments(bytes_of(m), gso_size_of(m))) {
                EXPECT_LT(next, expected.size());
                if (next >= expected.size()) {
                    return seen;
                }
                seen += expect_padded_frame(seg, expected[next], next, max_padding);
                ++next;
            }
        }
        EXPECT_EQ(next, expected.size()) << "every frame once";
        return seen;
    }
};

TEST_F(DatagramBuilderTest,
       AQpsPacketsWrittenInPlaceLeaveAsDatagramsTheKernelCutsIntoTheSameFrames) {
    // Three 64-packet WRITEs of one QP at path MTU 1024: each first packet 16 bytes (a RETH)
    // larger than its 63 others. 1106-byte chunks: 59 fit one IPv4 datagram, so the second
    // datagram starts with the first WRITE's last five packets and grows its stride when the
    // second WRITE's first packet comes.
    for (int message = 0; message < 3; ++message) {
        for (int k = 0; k < 64; ++k) {
            send(flow_frame(50001, k == 0 ? 1056 : 1040, static_cast<uint8_t>(message * 64 + k)));
        }
    }
    finish();
    ASSERT_EQ(datagrams.size(), 4u) << "192 chunks: 59 + 59 + 59 + 15";
    for (size_t d = 0; d < datagrams.size(); ++d) {
        rte_mbuf* m = datagrams[d];
        const auto bytes = bytes_of(m);
        const auto* iph = reinterpret_cast<const rte_ipv4_hdr*>(bytes.data() + 14);
        const auto* udp = reinterpret_cast<const rte_udp_hdr*>(bytes.data() + 34);
        ASSERT_TRUE(m->ol_flags & RTE_MBUF_F_TX_UDP_SEG);
        // The last one holds the third WRITE's last 15 packets only: no RETH among them.
        EXPECT_EQ(m->tso_segsz, d < 3 ? 1106 : 1090) << "its largest chunk";
        EXPECT_EQ(m->l2_len + m->l3_len + m->l4_len, gso_outer_bytes);
        EXPECT_EQ(rte_be_to_cpu_16(iph->total_length), bytes.size() - 14);
        EXPECT_EQ(rte_raw_cksum(iph, 20), 0xffff);
        EXPECT_EQ(rte_be_to_cpu_16(udp->dgram_len), bytes.size() - 34);
        EXPECT_EQ(udp->dgram_cksum, rte_ipv4_phdr_cksum(iph, 0));
        EXPECT_EQ(m->nb_segs, 1) << "one buffer, one copy into the kernel";
    }
    const uint64_t seen = expect_every_frame_in_order(datagram_builder::max_padding_bytes);
    EXPECT_EQ(seen, (3u * 63 - 15) * 16) << "a RETH behind every packet that shares a first's";
    EXPECT_EQ(padding, seen) << "what QoS is charged is what went on the wire";
}

TEST_F(DatagramBuilderTest, AFrameOfAnotherFlowOrMuchLongerThanTheOthersDoesNotJoin) {
    start_with(flow_frame(50001, 1040, 1));
    EXPECT_FALSE(write(keep(flow_frame(50001, 1057, 2)))) << "17 bytes longer than a chunk";
    EXPECT_FALSE(write(keep(flow_frame(50002, 1040, 3)))) << "another QP: another source port";
    rte_mbuf* other_tos = keep(flow_frame(50001, 1040, 4));
    rte_pktmbuf_mtod_offset(other_tos, uint8_t*, outer_and_vxlan + 14 + 1)[0] = 0x03;  // CE
    EXPECT_FALSE(write(other_tos)) << "the outer ECN is copied from the inner";
    rte_mbuf* other_id = flow_frame(50001, 1040, 5);
    rte_pktmbuf_mtod_offset(other_id, uint8_t*, outer_and_vxlan + 14 + 5)[0] ^= 1;
    EXPECT_TRUE(write(other_id)) << "the inner IPv4 id is no part of the outer headers";
    EXPECT_TRUE(write(flow_frame(50001, 1056, 6))) << "16 bytes longer: the others are padded";
    EXPECT_EQ(builder.frames(), 3u);
    finish();
    EXPECT_EQ(padding, 2u * 16);
    EXPECT_EQ(expect_every_frame_in_order(16), 2u * 16);
}

TEST_F(DatagramBuilderTest, AFrameMoreThanARethShorterIsTheLastChunk) {
    start_with(flow_frame(50001, 1057, 1));
    ASSERT_TRUE(write(flow_frame(50001, 1041, 2))) << "16 bytes shorter: padded";
    ASSERT_TRUE(write(flow_frame(50001, 1040, 3))) << "17 bytes shorter: the short last chunk";
    EXPECT_FALSE(builder.takes_more());
    EXPECT_EQ(builder.reserve(1040), nullptr) << "nothing may follow a short chunk";
    finish();
    ASSERT_EQ(datagrams.size(), 1u);
    EXPECT_EQ(padding, 16u);
    EXPECT_EQ(expect_every_frame_in_order(16), 16u);
}

TEST_F(DatagramBuilderTest, ADatagramHoldsWhatAnIPv4LengthAllows) {
    // 1450-byte chunks (1400 bytes of payload): 45 fit.
    for (int i = 0; i < 100; ++i) {
        send(flow_frame(50001, 1400, static_cast<uint8_t>(i)));
    }
    finish();
    ASSERT_EQ(datagrams.size(), 3u) << "45 + 45 + 10";
    for (rte_mbuf* m : datagrams) {
        EXPECT_LE(rte_pktmbuf_pkt_len(m) - 14, 65535u);
    }
    expect_every_frame_in_order(0);
}

TEST_F(DatagramBuilderTest, ForASealedUplinkEachChunkKeepsRoomForItsEspBytes) {
    // 1450-byte chunks that each grow by an ESP header, trailer and ICV (37 bytes at most) when
    // sealed: 43 of 1487 bytes fit a 64 KB buffer behind the outer headers, not 45.
    builder.grow_each_chunk_by(37);
    for (int i = 0; i < 100; ++i) {
        send(flow_frame(50001, 1400, static_cast<uint8_t>(i)));
    }
    finish();
    ASSERT_EQ(datagrams.size(), 3u) << "43 + 43 + 14";
    for (rte_mbuf* m : datagrams) {
        const uint32_t chunks = (rte_pktmbuf_pkt_len(m) - gso_outer_bytes) / 1450;
        EXPECT_LE(gso_outer_bytes + chunks * (1450 + 37),
                  rte_pktmbuf_data_room_size(big_pool()) - RTE_PKTMBUF_HEADROOM);
    }
    expect_every_frame_in_order(0);
}

TEST_F(DatagramBuilderTest, OneFrameStaysAnOrdinaryFrameWithUdpChecksumZero) {
    start_with(flow_frame(50001, 300, 1));
    finish();
    ASSERT_EQ(datagrams.size(), 1u);
    rte_mbuf* m = datagrams[0];
    EXPECT_EQ(m->ol_flags & RTE_MBUF_F_TX_UDP_SEG, 0u);
    EXPECT_EQ(rte_pktmbuf_mtod_offset(m, rte_udp_hdr*, 34)->dgram_cksum, 0);
    const auto check =
        check_outer(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_pkt_len(m), ip("198.18.0.2"));
    EXPECT_TRUE(check.ok) << "an RFC 7348 frame a receiver takes as it is";
    EXPECT_EQ(bytes_of(m), expected[0]);
}

}  // namespace
}  // namespace jakiro::overlay
