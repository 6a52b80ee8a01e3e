#include "overlay/udp_gso.hh"

#include <gtest/gtest.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <cstring>
#include <random>
#include <vector>

#include "../../frames.hh"
#include "overlay/superframe.hh"
#include "overlay/vxlan.hh"

namespace jakiro::overlay {
namespace {

using test::bytes_of;
using test::ip;
using test::mac;

const tunnel_endpoints h1_to_h2{mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"),
                                ip("198.18.0.1"), ip("198.18.0.2")};

rte_mempool* big_pool() {
    static rte_mempool* pool =
        rte_pktmbuf_pool_create("gso_test_big", 31, 0, 0, UINT16_MAX, rte_socket_id());
    return pool;
}
rte_mempool* small_pool() {
    static rte_mempool* pool = rte_pktmbuf_pool_create("gso_test_small", 4095, 0, 0,
                                                       RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
    return pool;
}

struct UdpGsoTest : testing::Test {
    std::vector<rte_mbuf*> owned;
    void TearDown() override {
        for (rte_mbuf* m : owned) {
            rte_pktmbuf_free(m);
        }
    }

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

// What the kernel makes of a super-datagram where it must segment it (__udp_gso_segment):
// the outer headers in front of every chunk, lengths per segment.
std::vector<std::vector<uint8_t>> kernel_segments(const std::vector<uint8_t>& datagram,
                                                  uint16_t gso_size) {
    std::vector<std::vector<uint8_t>> out;
    for (size_t at = gso_outer_bytes; at < datagram.size(); at += gso_size) {
        const size_t n = std::min<size_t>(gso_size, datagram.size() - at);
        std::vector<uint8_t> seg(datagram.begin(), datagram.begin() + gso_outer_bytes);
        seg.insert(seg.end(), datagram.begin() + at, datagram.begin() + at + n);
        auto* iph = reinterpret_cast<rte_ipv4_hdr*>(seg.data() + 14);
        iph->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(seg.size() - 14));
        iph->hdr_checksum = 0;
        iph->hdr_checksum = rte_ipv4_cksum(iph);
        reinterpret_cast<rte_udp_hdr*>(seg.data() + 34)->dgram_len =
            rte_cpu_to_be_16(static_cast<uint16_t>(seg.size() - 34));
        out.push_back(std::move(seg));
    }
    return out;
}

// The segment size the kernel cuts `m` at: its GSO size, or the whole of an ordinary frame.
uint16_t gso_size_of(const rte_mbuf* m) {
    return (m->ol_flags & RTE_MBUF_F_TX_UDP_SEG) ? m->tso_segsz : 65535;
}

// A segment the kernel cut is frame `index` as it was before joining, but for what the kernel
// owns: outer IPv4 ids and checksums, which it counts up and fills in.
void expect_same_frame(std::vector<uint8_t> seg, std::vector<uint8_t> want, size_t index) {
    for (auto* v : {&seg, &want}) {
        auto* h = reinterpret_cast<rte_ipv4_hdr*>(v->data() + 14);
        h->packet_id = 0;
        h->hdr_checksum = 0;
        reinterpret_cast<rte_udp_hdr*>(v->data() + 34)->dgram_cksum = 0;
    }
    EXPECT_EQ(seg, want) << "frame " << index;
}

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

// A RoCE-like VXLAN frame of `payload` inner UDP bytes from outer source port `port` (one QP's
// flow), as roce_port has it after encapsulation.
rte_mbuf* flow_frame(uint16_t port, uint16_t payload, uint8_t fill) {
    test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"), ip("198.19.1.1"),
                               ip("198.19.1.2")};
    spec.dst_port = 4791;
    spec.payload = payload;
    spec.tos = 0x02;  // ECT(0), copied outward
    rte_mbuf* m = test::ipv4_mbuf(small_pool(), spec);
    EXPECT_NE(m, nullptr);
    rte_pktmbuf_mtod_offset(m, uint8_t*, rte_pktmbuf_pkt_len(m) - 1)[0] = fill;
    EXPECT_TRUE(encapsulate(m, h1_to_h2, 100, spec.tos, port));
    return m;
}

TEST_F(UdpGsoTest, ARunOfOneFlowsFramesLeavesAsDatagramsAndEveryOtherFrameInOrder) {
    datagram_run run;
    std::vector<rte_mbuf*> sent;
    std::vector<std::vector<uint8_t>> expected;  // every frame, in the order it was added
    auto send = [&](rte_mbuf* m) {
        sent.push_back(m);
        owned.push_back(m);
    };
    auto add = [&](rte_mbuf* m) {
        expected.push_back(bytes_of(m));
        run.add(m, send);
    };
    // Flow A: ten full frames and a shorter last one (one message of 11 chunks); then flow B
    // (another QP: another source port), three frames; then A again, larger than before.
    for (int i = 0; i < 10; ++i) {
        add(flow_frame(50001, 1024, static_cast<uint8_t>(i)));
    }
    add(flow_frame(50001, 300, 10));
    EXPECT_EQ(sent.size(), 0u) << "held until something cannot join";
    add(flow_frame(50001, 1024, 11));  // after the shorter one: a new run
    EXPECT_EQ(sent.size(), 1u);
    add(flow_frame(50002, 1024, 12));
    add(flow_frame(50002, 1024, 13));
    add(flow_frame(50002, 1024, 14));
    add(flow_frame(50001, 1400, 15));
    run.flush(send);
    EXPECT_EQ(run.size(), 0u);
    ASSERT_EQ(sent.size(), 4u) << "A x11, A x1, B x3, A x1";
    EXPECT_EQ(sent[0]->tso_segsz, expected[0].size() - gso_outer_bytes);
    EXPECT_TRUE(sent[0]->ol_flags & RTE_MBUF_F_TX_UDP_SEG);
    EXPECT_FALSE(sent[1]->ol_flags & RTE_MBUF_F_TX_UDP_SEG) << "one frame stays a frame";
    EXPECT_TRUE(sent[2]->ol_flags & RTE_MBUF_F_TX_UDP_SEG);
    EXPECT_FALSE(sent[3]->ol_flags & RTE_MBUF_F_TX_UDP_SEG);
    // What the kernel cuts them into is every frame, in order, byte for byte.
    size_t next = 0;
    for (rte_mbuf* m : sent) {
        for (auto& seg : kernel_segments(bytes_of(m), gso_size_of(m))) {
            ASSERT_LT(next, expected.size());
            expect_same_frame(seg, expected[next], next);
            ++next;
        }
    }
    EXPECT_EQ(next, expected.size());
}

TEST_F(UdpGsoTest, ARunStopsAtWhatOneDatagramMayHold) {
    datagram_run run;
    std::vector<rte_mbuf*> sent;
    auto send = [&](rte_mbuf* m) {
        sent.push_back(m);
        owned.push_back(m);
    };
    // 1450-byte chunks (1400 bytes of payload): an IPv4 datagram holds 45 of them, fewer
    // than max_gso_chunks; 100 frames are three datagrams.
    uint32_t chunk = 0;
    for (int i = 0; i < 100; ++i) {
        rte_mbuf* m = flow_frame(50001, 1400, static_cast<uint8_t>(i));
        chunk = rte_pktmbuf_pkt_len(m) - gso_outer_bytes;
        run.add(m, send);
    }
    ASSERT_EQ(max_gso_chunk_bytes / chunk, 45u);
    run.flush(send);
    uint32_t chunks = 0;
    for (rte_mbuf* m : sent) {
        ASSERT_LE(rte_pktmbuf_pkt_len(m) - 14, 65535u);
        const uint32_t n = (m->ol_flags & RTE_MBUF_F_TX_UDP_SEG)
                               ? (rte_pktmbuf_pkt_len(m) - gso_outer_bytes) / m->tso_segsz
                               : 1;
        EXPECT_LE(n, max_gso_chunks);
        chunks += n;
    }
    EXPECT_EQ(chunks, 100u);
    EXPECT_EQ(sent.size(), 3u) << "45 + 45 + 10";
}

// A segment the kernel cut from a padded run is frame `index` followed by zeros: the inner
// packet and its headers as they were, the outer lengths grown by the padding. Returns how
// many bytes of padding it carried.
size_t expect_padded_frame(std::vector<uint8_t> seg, const std::vector<uint8_t>& want,
                           size_t index) {
    EXPECT_GE(seg.size(), want.size()) << "frame " << index;
    if (seg.size() < want.size()) {
        return 0;
    }
    const size_t padding = seg.size() - want.size();
    EXPECT_LE(padding, datagram_run::max_padding_bytes) << "frame " << index;
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

TEST_F(UdpGsoTest, AQpsFullPacketsOfDifferentHeadersShareDatagramsAcrossMessages) {
    // Three 64-packet WRITEs of one QP: a first packet 16 bytes (a RETH) larger than the 62
    // middle and the last. Equal sizes only, that is three datagrams a message; padded to one
    // size, 192 chunks of 1106 bytes are four (59 fit in an IPv4 datagram).
    datagram_run run;
    std::vector<rte_mbuf*> sent;
    std::vector<std::vector<uint8_t>> expected;
    auto send = [&](rte_mbuf* m) {
        sent.push_back(m);
        owned.push_back(m);
    };
    for (int message = 0; message < 3; ++message) {
        for (int k = 0; k < 64; ++k) {
            rte_mbuf* m = flow_frame(50001, k == 0 ? 1056 : 1040, static_cast<uint8_t>(k));
            expected.push_back(bytes_of(m));
            run.add(m, send);
        }
    }
    run.flush(send);
    EXPECT_EQ(sent.size(), 4u);
    size_t next = 0;
    uint64_t padding = 0;
    for (rte_mbuf* m : sent) {
        EXPECT_TRUE(m->ol_flags & RTE_MBUF_F_TX_UDP_SEG);
        for (auto& seg : kernel_segments(bytes_of(m), gso_size_of(m))) {
            ASSERT_LT(next, expected.size());
            padding += expect_padded_frame(seg, expected[next], next);
            ++next;
        }
    }
    EXPECT_EQ(next, expected.size()) << "every frame once, in order";
    EXPECT_GT(padding, 0u);
    EXPECT_EQ(run.take_padding(), padding) << "what QoS is charged is what went on the wire";
    EXPECT_EQ(run.take_padding(), 0u);
}

TEST_F(UdpGsoTest, AFrameIsPaddedOnlyWithinItsOwnMbufAndByLittle) {
    datagram_run run;
    std::vector<rte_mbuf*> sent;
    auto send = [&](rte_mbuf* m) {
        sent.push_back(m);
        owned.push_back(m);
    };
    // 17 bytes shorter than the frame before: not padded, it ends the run as its last chunk.
    run.add(flow_frame(50001, 1057, 1), send);
    run.add(flow_frame(50001, 1040, 2), send);
    run.add(flow_frame(50001, 1057, 3), send);
    run.flush(send);
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(run.take_padding(), 0u);
    // A frame whose mbuf has no room behind it cannot grow: a larger one after it starts anew.
    sent.clear();
    rte_mbuf* full = flow_frame(50001, 1040, 4);
    const uint16_t at_the_end = static_cast<uint16_t>(full->buf_len - rte_pktmbuf_data_len(full));
    std::memmove(static_cast<uint8_t*>(full->buf_addr) + at_the_end, rte_pktmbuf_mtod(full, void*),
                 rte_pktmbuf_data_len(full));
    full->data_off = at_the_end;
    ASSERT_EQ(rte_pktmbuf_tailroom(full), 0u);
    run.add(full, send);
    run.add(flow_frame(50001, 1056, 5), send);
    run.flush(send);
    EXPECT_EQ(sent.size(), 2u);
    EXPECT_EQ(run.take_padding(), 0u);
}

TEST_F(UdpGsoTest, FramesThatDifferInAnyHeaderTheKernelCopiesNeverShareADatagram) {
    rte_mbuf* a = flow_frame(50001, 1024, 1);
    owned.push_back(a);
    auto differs = [&](auto change) {
        rte_mbuf* b = flow_frame(50001, 1024, 2);
        owned.push_back(b);
        EXPECT_TRUE(same_outer_flow(a, b));
        change(rte_pktmbuf_mtod(b, uint8_t*));
        return !same_outer_flow(a, b);
    };
    EXPECT_TRUE(differs([](uint8_t* f) { f[0] ^= 1; })) << "outer destination MAC";
    EXPECT_TRUE(differs([](uint8_t* f) { f[14 + 1] ^= 0x03; })) << "outer ECN";
    EXPECT_TRUE(differs([](uint8_t* f) { f[14 + 8] ^= 1; })) << "TTL";
    EXPECT_TRUE(differs([](uint8_t* f) { f[14 + 19] ^= 1; })) << "outer destination IPv4";
    EXPECT_TRUE(differs([](uint8_t* f) { f[34 + 1] ^= 1; })) << "UDP source port";
    EXPECT_FALSE(differs([](uint8_t* f) { f[14 + 5] ^= 1; })) << "the IPv4 id may differ";
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
