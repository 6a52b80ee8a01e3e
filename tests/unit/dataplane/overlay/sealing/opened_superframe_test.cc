#include "dataplane/overlay/sealing/opened_superframe.hh"

#include <gtest/gtest.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <cstring>
#include <vector>

#include "dataplane/overlay/sealing/sealed_datagrams.hh"
#include "dataplane/overlay/sealing/uplink_sealing.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vxlan.hh"
#include "tests/unit/frames.hh"

namespace jakiro::overlay::sealing {
namespace {

using test::ip;
using test::mac;

rte_mempool* big_pool() {
    static rte_mempool* p =
        rte_pktmbuf_pool_create("opened_sf_big", 63, 0, 0, UINT16_MAX, rte_socket_id());
    return p;
}
rte_mempool* pool() {
    static rte_mempool* p = rte_pktmbuf_pool_create("opened_sf_test", 2047, 0, 0,
                                                    RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
    return p;
}

struct host {
    const char* ip_text;
    const char* mac_text;
    host_key_pair keys = generate_key_pair();
};

// Outer headers, VXLAN, inner Ethernet, IPv4 and TCP of an opened frame.
constexpr uint32_t inner_ip_at = 50 + 14;
constexpr uint32_t payload_at = inner_ip_at + 20 + 20;

struct OpenedSuperframeTest : testing::Test {
    host a{"198.18.0.1", "02:00:00:00:00:01"};
    host b{"198.18.0.2", "02:00:00:00:00:02"};
    lcore_counters counters;
    std::vector<rte_mbuf*> owned;
    static constexpr uint32_t now = 1'000'000'000;
    static constexpr uint32_t first_seq = 4'000'000'000u;  // wraps inside the super-frame

    ~OpenedSuperframeTest() override {
        for (rte_mbuf* m : owned) {
            rte_pktmbuf_free(m);
        }
    }

    std::unique_ptr<uplink_sealing> make(const host& self, const host& other) {
        sealing_setup setup;
        setup.policy = encryption_policy::required;
        setup.own = self.keys;
        setup.underlay_ip = rte_be_to_cpu_32(ip(self.ip_text));
        setup.peers.push_back({rte_be_to_cpu_32(ip(other.ip_text)), other.keys.public_key,
                               encryption_policy::required});
        std::string error;
        auto s = uplink_sealing::create(setup, error);
        EXPECT_TRUE(s) << error;
        return s;
    }

    // A tenant's TCP super-frame of `bytes` at `mss`, VXLAN-encapsulated from a to b, ending
    // with PSH, as the egress pipeline hands it to the sealing.
    rte_mbuf* superframe(uint32_t bytes, uint16_t mss) {
        test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                   ip("198.19.1.1"), ip("198.19.2.1")};
        rte_mbuf* m = test::tcp_superframe_mbuf(big_pool(), spec, bytes, mss);
        auto* tcp = rte_pktmbuf_mtod_offset(m, rte_tcp_hdr*, 34);
        tcp->tcp_flags = RTE_TCP_ACK_FLAG | RTE_TCP_PSH_FLAG;
        tcp->sent_seq = rte_cpu_to_be_32(first_seq);
        EXPECT_TRUE(encapsulate(m, {mac(a.mac_text), mac(b.mac_text), ip(a.ip_text), ip(b.ip_text)},
                                100, 0, 50001));
        EXPECT_TRUE(mark_vxlan_superframe(m));
        return m;
    }

    // What `sender` writes to the uplink for `in`: sealed frames joined into super-datagrams.
    std::vector<rte_mbuf*> seal(uplink_sealing& sender, std::vector<rte_mbuf*> in) {
        std::vector<rte_mbuf*> out(max_segments);
        uint16_t taken = 0;
        uint16_t n = sender.seal_burst(in.data(), static_cast<uint16_t>(in.size()), out.data(),
                                       max_segments, taken, false, pool(), counters, now);
        n = join_sealed_frames(out.data(), n);
        out.resize(n);
        owned.insert(owned.end(), out.begin(), out.end());
        return out;
    }

    // What the receiving uplink face makes of `datagram`'s bytes `wire`, opening it where it
    // lies with 64 KB buffers for super-frames.
    std::vector<rte_mbuf*> open(uplink_sealing& receiver, const rte_mbuf* datagram,
                                const std::vector<uint8_t>& wire) {
        std::vector<uint8_t> tail;
        rte_mbuf* head = test::head_and_tail(pool(), wire, tail);
        std::vector<rte_mbuf*> out(max_gso_chunks);
        const uint16_t gso = (datagram->ol_flags & RTE_MBUF_F_TX_UDP_SEG) != 0
                                 ? datagram->tso_segsz
                                 : static_cast<uint16_t>(wire.size() - gso_outer_bytes);
        const auto n = receiver.open_datagram(
            rte_pktmbuf_mtod(head, const uint8_t*), rte_pktmbuf_data_len(head), tail.data(),
            static_cast<uint32_t>(wire.size()), gso, pool(), big_pool(), out.data(), ip(b.ip_text),
            mac(b.mac_text), counters, now);
        rte_pktmbuf_free(head);
        EXPECT_TRUE(n.has_value());
        out.resize(n.value_or(0));
        owned.insert(owned.end(), out.begin(), out.end());
        return out;
    }

    // The tenant payload an opened frame carries, from its first TCP payload byte on.
    static std::vector<uint8_t> payload_of(const rte_mbuf* m) {
        const std::vector<uint8_t> bytes = test::bytes_of(m);
        return {bytes.begin() + payload_at, bytes.end()};
    }
    static std::vector<uint8_t> tenant_payload(uint32_t from, uint32_t to) {
        std::vector<uint8_t> out;
        for (uint32_t i = from; i < to; ++i) {
            out.push_back(static_cast<uint8_t>(i * 13 + 5));
        }
        return out;
    }
    static const rte_tcp_hdr* tcp_of(const rte_mbuf* m) {
        return rte_pktmbuf_mtod_offset(m, const rte_tcp_hdr*, inner_ip_at + 20);
    }
};

TEST_F(OpenedSuperframeTest, EachSealedDatagramOfOneFlowOpensIntoOneMergedSuperFrame) {
    auto at_a = make(a, b);
    auto at_b = make(b, a);
    const auto wire = seal(*at_a, {superframe(64000, 1398)});
    ASSERT_EQ(wire.size(), 2u) << "46 frames of ~1.5 KB: two super-datagrams";
    std::vector<uint8_t> payload;
    uint32_t seq = first_seq;
    for (std::size_t d = 0; d < wire.size(); ++d) {
        const auto opened = open(*at_b, wire[d], test::bytes_of(wire[d]));
        ASSERT_EQ(opened.size(), 1u) << "datagram " << d << ": one super-frame";
        const rte_mbuf* m = opened[0];
        EXPECT_EQ(m->ol_flags, RTE_MBUF_F_RX_LRO | uplink_sealing::opened_mark);
        EXPECT_EQ(m->tso_segsz, 1398);
        const auto* outer = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, 14);
        const auto* udp = rte_pktmbuf_mtod_offset(m, const rte_udp_hdr*, 34);
        const auto* inner = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, inner_ip_at);
        EXPECT_EQ(outer->src_addr, ip(a.ip_text));
        EXPECT_EQ(rte_be_to_cpu_16(outer->total_length), rte_pktmbuf_pkt_len(m) - 14);
        EXPECT_EQ(rte_be_to_cpu_16(udp->dst_port), vxlan_udp_port);
        EXPECT_EQ(rte_be_to_cpu_16(inner->total_length), rte_pktmbuf_pkt_len(m) - inner_ip_at);
        EXPECT_EQ(rte_ipv4_cksum(inner), 0) << "inner IPv4 checksum verifies";
        EXPECT_EQ(rte_be_to_cpu_32(tcp_of(m)->sent_seq), seq);
        EXPECT_EQ(tcp_of(m)->tcp_flags,
                  d + 1 < wire.size() ? RTE_TCP_ACK_FLAG : RTE_TCP_ACK_FLAG | RTE_TCP_PSH_FLAG)
            << "PSH on the super-frame that ends the tenant's";
        const auto bytes = payload_of(m);
        seq += static_cast<uint32_t>(bytes.size());
        payload.insert(payload.end(), bytes.begin(), bytes.end());
    }
    EXPECT_EQ(payload, tenant_payload(0, 64000));
    EXPECT_EQ(at_b->peers()[0].counters.opened.read(), 46u) << "counted per frame opened";
}

TEST_F(OpenedSuperframeTest, ATamperedSegmentIsDroppedAndEndsItsSuperFrame) {
    auto at_a = make(a, b);
    auto at_b = make(b, a);
    const auto wire = seal(*at_a, {superframe(20000, 1398)});  // 15 frames, one datagram
    ASSERT_EQ(wire.size(), 1u);
    std::vector<uint8_t> tampered = test::bytes_of(wire[0]);
    tampered[gso_outer_bytes + 5 * wire[0]->tso_segsz + 200] ^= 0x01;  // the sixth frame
    const auto opened = open(*at_b, wire[0], tampered);
    EXPECT_EQ(counters.drops[static_cast<std::size_t>(drop_reason::auth_failed)].read(), 1u);
    ASSERT_EQ(opened.size(), 2u) << "the five before it, then the nine after it";
    EXPECT_EQ(payload_of(opened[0]), tenant_payload(0, 5 * 1398));
    EXPECT_EQ(payload_of(opened[1]), tenant_payload(6 * 1398, 20000));
    EXPECT_EQ(rte_be_to_cpu_32(tcp_of(opened[1])->sent_seq), first_seq + 6 * 1398);
    // The genuine frames again: all replays but the sixth, which opens alone, as it was sent.
    const auto again = open(*at_b, wire[0], test::bytes_of(wire[0]));
    EXPECT_EQ(counters.drops[static_cast<std::size_t>(drop_reason::replayed)].read(), 14u);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0]->ol_flags, uplink_sealing::opened_mark) << "an ordinary frame";
    EXPECT_EQ(again[0]->nb_segs, 1);
    EXPECT_EQ(payload_of(again[0]), tenant_payload(5 * 1398, 6 * 1398));
    EXPECT_TRUE(test::l4_checksum_ok(rte_pktmbuf_mtod_offset(again[0], rte_ipv4_hdr*, 64)))
        << "its own TCP checksum, as the sender wrote it";
}

TEST_F(OpenedSuperframeTest, FramesThatAreNotTcpSegmentsOpenOneByOneAsTheyWereSent) {
    auto at_a = make(a, b);
    auto at_b = make(b, a);
    std::vector<rte_mbuf*> frames;
    std::vector<std::vector<uint8_t>> sent;
    for (int i = 0; i < 10; ++i) {
        test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                   ip("198.19.1.1"), ip("198.19.2.1")};
        spec.payload = 1200;  // UDP, as RoCE is
        rte_mbuf* m = test::ipv4_mbuf(pool(), spec);
        encapsulate(m, {mac(a.mac_text), mac(b.mac_text), ip(a.ip_text), ip(b.ip_text)}, 100, 0,
                    50000);
        frames.push_back(m);
        sent.push_back(test::bytes_of(m));
    }
    const auto wire = seal(*at_a, frames);
    ASSERT_EQ(wire.size(), 1u);
    const auto opened = open(*at_b, wire[0], test::bytes_of(wire[0]));
    ASSERT_EQ(opened.size(), sent.size());
    for (std::size_t i = 0; i < opened.size(); ++i) {
        EXPECT_EQ(test::bytes_of(opened[i]), sent[i]) << "frame " << i;
    }
}

TEST_F(OpenedSuperframeTest, OnlyTcpSegmentsWithAckOrAckPushMayJoin) {
    uint8_t probe[max_segment_headers] = {};
    probe[20] = 0x08;  // inner Ethernet type IPv4
    probe[22] = 0x45;
    probe[24] = 0;
    probe[25] = 20 + 20 + 100;  // IPv4 length
    probe[31] = IPPROTO_TCP;
    probe[54] = 5 << 4;
    probe[55] = RTE_TCP_ACK_FLAG;
    const uint32_t text_len = 22 + 140 + 2;  // the frame, pad length, next header
    EXPECT_EQ(shape_of(probe, text_len).payload, 100u);
    EXPECT_EQ(shape_of(probe, text_len).headers, probe_bytes);
    probe[55] = RTE_TCP_ACK_FLAG | RTE_TCP_SYN_FLAG;
    EXPECT_EQ(shape_of(probe, text_len).headers, 0u) << "SYN";
    probe[55] = RTE_TCP_ACK_FLAG | RTE_TCP_FIN_FLAG;
    EXPECT_EQ(shape_of(probe, text_len).headers, 0u) << "FIN";
    probe[55] = RTE_TCP_ACK_FLAG | RTE_TCP_PSH_FLAG;
    EXPECT_TRUE(shape_of(probe, text_len).pushed);
    EXPECT_EQ(shape_of(probe, text_len + 4).headers, 0u) << "bytes behind the IPv4 packet";
    probe[25] = 40;
    EXPECT_EQ(shape_of(probe, 22 + 40 + 2).headers, 0u) << "no payload: a pure ACK";
    probe[25] = 140;
    probe[28] = 0x20;  // more fragments
    EXPECT_EQ(shape_of(probe, text_len).headers, 0u) << "a fragment";
    probe[28] = 0x40;  // don't fragment
    EXPECT_NE(shape_of(probe, text_len).headers, 0u);
    probe[22] = 0x46;
    EXPECT_EQ(shape_of(probe, text_len).headers, 0u) << "IPv4 options";
}

}  // namespace
}  // namespace jakiro::overlay::sealing
