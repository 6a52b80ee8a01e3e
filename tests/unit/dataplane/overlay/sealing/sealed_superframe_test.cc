#include "dataplane/overlay/sealing/sealed_superframe.hh"

#include <gtest/gtest.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dataplane/overlay/sealing/sealed_datagrams.hh"
#include "dataplane/overlay/sealing/uplink_sealing.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vnic_mark.hh"
#include "dataplane/overlay/vxlan.hh"
#include "tests/unit/frames.hh"

namespace jakiro::overlay::sealing {
namespace {

using test::ip;
using test::mac;

rte_mempool* big_pool() {
    static rte_mempool* p =
        rte_pktmbuf_pool_create("sealed_sf_big", 63, 0, 0, UINT16_MAX, rte_socket_id());
    return p;
}
rte_mempool* pool() {
    static rte_mempool* p = rte_pktmbuf_pool_create("sealed_sf_test", 2047, 0, 0,
                                                    RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
    return p;
}

struct host {
    const char* ip_text;
    const char* mac_text;
    host_key_pair keys = generate_key_pair();
};

struct SealedSuperframeTest : testing::Test {
    host a{"198.18.0.1", "02:00:00:00:00:01"};
    host b{"198.18.0.2", "02:00:00:00:00:02"};
    lcore_counters counters;
    std::vector<rte_mbuf*> owned;
    static constexpr uint32_t now = 1'000'000'000;

    ~SealedSuperframeTest() override {
        for (rte_mbuf* m : owned) {
            rte_pktmbuf_free(m);
        }
    }

    std::unique_ptr<uplink_sealing> make(const host& self, const host& other,
                                         encryption_policy policy = encryption_policy::required) {
        sealing_setup setup;
        setup.policy = policy;
        setup.own = self.keys;
        setup.underlay_ip = rte_be_to_cpu_32(ip(self.ip_text));
        setup.peers.push_back({rte_be_to_cpu_32(ip(other.ip_text)), other.keys.public_key, policy});
        std::string error;
        auto s = uplink_sealing::create(setup, error);
        EXPECT_TRUE(s) << error;
        return s;
    }

    // A tenant's TCP super-frame of `bytes` at segment size `mss`, VXLAN-encapsulated from a to
    // b; with `head_bytes`, a chain whose first segment ends there (as a vnet face reads one).
    rte_mbuf* superframe(uint32_t bytes, uint16_t mss, uint32_t head_bytes = 0) {
        test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                   ip("198.19.1.1"), ip("198.19.2.1")};
        rte_mbuf* m = test::tcp_superframe_mbuf(big_pool(), spec, bytes, mss);
        auto* tcp = rte_pktmbuf_mtod_offset(m, rte_tcp_hdr*, 34);
        tcp->tcp_flags = RTE_TCP_ACK_FLAG | RTE_TCP_PSH_FLAG;  // PSH: the last frame's alone
        tcp->sent_seq = rte_cpu_to_be_32(4'000'000'000u);      // wraps inside the super-frame
        EXPECT_TRUE(encapsulate(m, {mac(a.mac_text), mac(b.mac_text), ip(a.ip_text), ip(b.ip_text)},
                                100, 0, 50001));
        EXPECT_TRUE(mark_vxlan_superframe(m));  // as the egress pipeline leaves it
        if (head_bytes == 0) {
            return m;
        }
        rte_mbuf* head = rte_pktmbuf_alloc(big_pool());
        rte_mbuf* tail = rte_pktmbuf_alloc(big_pool());
        const uint32_t len = rte_pktmbuf_pkt_len(m);
        std::memcpy(rte_pktmbuf_append(head, static_cast<uint16_t>(head_bytes)),
                    rte_pktmbuf_mtod(m, const uint8_t*), head_bytes);
        std::memcpy(rte_pktmbuf_append(tail, static_cast<uint16_t>(len - head_bytes)),
                    rte_pktmbuf_mtod_offset(m, const uint8_t*, head_bytes), len - head_bytes);
        EXPECT_EQ(rte_pktmbuf_chain(head, tail), 0);
        head->ol_flags = m->ol_flags;
        head->outer_l2_len = m->outer_l2_len;
        head->outer_l3_len = m->outer_l3_len;
        head->l2_len = m->l2_len;
        head->l3_len = m->l3_len;
        head->l4_len = m->l4_len;
        head->tso_segsz = m->tso_segsz;
        rte_pktmbuf_free(m);
        return head;
    }

    // The frames the software cut makes of the same super-frame (what a plaintext overlay
    // sends), as bytes.
    std::vector<std::vector<uint8_t>> software_cut(uint32_t bytes, uint16_t mss) {
        rte_mbuf* frames[max_segments];
        const int n = segment_superframe(superframe(bytes, mss), true, UINT16_MAX, pool(), frames,
                                         max_segments);
        EXPECT_GT(n, 0);
        std::vector<std::vector<uint8_t>> out;
        for (int i = 0; i < n; ++i) {
            out.push_back(test::bytes_of(frames[i]));
            rte_pktmbuf_free(frames[i]);
        }
        return out;
    }

    // What `sender` puts on the uplink for `in`: sealed frames, and with `join` the
    // super-datagrams they are joined into.
    std::vector<rte_mbuf*> seal(uplink_sealing& sender, std::vector<rte_mbuf*> in, uint16_t room,
                                bool join = false, uint16_t* taken = nullptr) {
        std::vector<rte_mbuf*> out(room);
        uint16_t consumed = 0;
        uint16_t n = sender.seal_burst(in.data(), static_cast<uint16_t>(in.size()), out.data(),
                                       room, consumed, false, pool(), counters, now);
        if (join) {
            n = join_sealed_frames(out.data(), n);
        }
        if (taken != nullptr) {
            *taken = consumed;
        }
        out.resize(n);
        return out;
    }

    std::vector<rte_mbuf*> open(uplink_sealing& receiver, std::vector<rte_mbuf*> frames) {
        const uint16_t n = receiver.open_burst(frames.data(), static_cast<uint16_t>(frames.size()),
                                               ip(b.ip_text), mac(b.mac_text), counters, now);
        frames.resize(n);
        return frames;
    }
};

// Cutting and sealing a vNIC's super-frame is that vNIC's work: each frame sealed, and its
// plaintext bytes, are charged to it (and to no other vNIC).
TEST_F(SealedSuperframeTest, EveryFrameSealedFromAVnicsSuperFrameIsChargedToIt) {
    auto at_a = make(a, b);
    rte_mbuf* m = superframe(20000, 1398);
    mark_vnic(m, 4);  // as the egress pipeline leaves it
    const auto wire = seal(*at_a, {m}, 64);
    owned.insert(owned.end(), wire.begin(), wire.end());
    const auto& peer = at_a->peers()[0].counters;
    ASSERT_EQ(wire.size(), 15u);
    EXPECT_EQ(counters.vnics[4].sealed_frames.read(), 15u);
    EXPECT_EQ(counters.vnics[4].sealed_bytes.read(), peer.sealed_bytes.read());
    EXPECT_GT(counters.vnics[4].sealed_bytes.read(), 20000u);
    for (uint16_t slot = 0; slot < max_vnics; ++slot) {
        if (slot != 4) {
            EXPECT_EQ(counters.vnics[slot].sealed_frames.read(), 0u) << slot;
        }
    }
}

TEST_F(SealedSuperframeTest, ASealedSuperFrameOpensIntoTheFramesTheSoftwareCutMakes) {
    auto at_a = make(a, b);
    auto at_b = make(b, a);
    const auto expected = software_cut(20000, 1398);
    const auto wire = seal(*at_a, {superframe(20000, 1398)}, 64);
    ASSERT_EQ(wire.size(), expected.size());
    for (rte_mbuf* m : wire) {
        EXPECT_EQ(rte_be_to_cpu_16(rte_pktmbuf_mtod_offset(m, rte_udp_hdr*, 34)->dst_port),
                  esp_udp_port);
    }
    const auto opened = open(*at_b, wire);
    ASSERT_EQ(opened.size(), expected.size());
    for (std::size_t i = 0; i < opened.size(); ++i) {
        owned.push_back(opened[i]);
        EXPECT_EQ(test::bytes_of(opened[i]), expected[i]) << "frame " << i;
    }
    EXPECT_EQ(at_a->peers()[0].counters.sealed.read(), expected.size());
}

TEST_F(SealedSuperframeTest, APayloadSplitAcrossAChainAtAnOddByteOpensIntact) {
    auto at_a = make(a, b);
    auto at_b = make(b, a);
    const auto expected = software_cut(9001, 1000);
    // Headers (50 + 14 + 20 + 20) and 1 777 bytes of payload in the first segment: the second
    // frame's payload starts in one segment and ends in the other, at an odd byte.
    const auto wire = seal(*at_a, {superframe(9001, 1000, 104 + 1777)}, 64);
    const auto opened = open(*at_b, wire);
    ASSERT_EQ(opened.size(), expected.size());
    for (std::size_t i = 0; i < opened.size(); ++i) {
        owned.push_back(opened[i]);
        EXPECT_EQ(test::bytes_of(opened[i]), expected[i]) << "frame " << i;
        auto* inner = rte_pktmbuf_mtod_offset(opened[i], rte_ipv4_hdr*, 64);
        EXPECT_TRUE(test::l4_checksum_ok(inner)) << "inner TCP checksum, frame " << i;
    }
}

TEST_F(SealedSuperframeTest, ASealedSuperFrameLeavesAsDatagramsThatOpenIntoItsFrames) {
    auto at_a = make(a, b);
    auto at_b = make(b, a);
    const auto expected = software_cut(60000, 1398);
    const auto wire = seal(*at_a, {superframe(60000, 1398)}, 64, true);
    ASSERT_LE(wire.size(), 2u) << "43 frames of ~1.5 KB: two super-datagrams at most";
    std::vector<rte_mbuf*> received;
    for (rte_mbuf* d : wire) {
        const std::vector<uint8_t> bytes = test::bytes_of(d);
        const uint16_t gso = (d->ol_flags & RTE_MBUF_F_TX_UDP_SEG) != 0
                                 ? d->tso_segsz
                                 : static_cast<uint16_t>(bytes.size() - gso_outer_bytes);
        rte_pktmbuf_free(d);
        std::vector<uint8_t> tail;
        rte_mbuf* head = test::head_and_tail(pool(), bytes, tail);
        rte_mbuf* cut[max_gso_chunks];
        uint16_t count = 0;
        ASSERT_EQ(split_udp_gso(head, tail.data(), static_cast<uint32_t>(bytes.size()), gso, pool(),
                                cut, count),
                  split_verdict::ok);
        received.insert(received.end(), cut, cut + count);
    }
    const auto opened = open(*at_b, received);
    ASSERT_EQ(opened.size(), expected.size());
    // The kernel numbers a datagram's outer IPv4 ids itself (on the test bed's veths the
    // receiver gets the datagram whole, the first frame's id on every frame).
    auto but_outer_id = [](std::vector<uint8_t> bytes) {
        std::fill(bytes.begin() + 18, bytes.begin() + 20, 0);  // identification
        std::fill(bytes.begin() + 24, bytes.begin() + 26, 0);  // header checksum
        return bytes;
    };
    for (std::size_t i = 0; i < opened.size(); ++i) {
        owned.push_back(opened[i]);
        EXPECT_EQ(but_outer_id(test::bytes_of(opened[i])), but_outer_id(expected[i]))
            << "frame " << i;
    }
}

TEST_F(SealedSuperframeTest, SealedStraightIntoDatagramsTheWireIsThatOfTheJoinedFrames) {
    // Two senders with the same keys and sequence numbers: one joins frame mbufs into
    // datagrams, the other writes the datagrams straight into 64 KB buffers.
    auto joining = make(a, b);
    auto writing = make(a, b);
    writing->seal_into_datagrams(big_pool());
    const auto joined = seal(*joining, {superframe(64000, 1398)}, 64, true);
    const auto written = seal(*writing, {superframe(64000, 1398)}, 64);
    ASSERT_EQ(written.size(), 2u) << "46 frames of ~1.5 KB: two super-datagrams";
    ASSERT_EQ(joined.size(), written.size());
    for (std::size_t i = 0; i < written.size(); ++i) {
        owned.push_back(joined[i]);
        owned.push_back(written[i]);
        EXPECT_EQ(written[i]->nb_segs, 1) << "one buffer, one piece for the kernel";
        EXPECT_EQ(written[i]->ol_flags, joined[i]->ol_flags);
        EXPECT_EQ(written[i]->tso_segsz, joined[i]->tso_segsz);
        EXPECT_EQ(test::bytes_of(written[i]), test::bytes_of(joined[i])) << "datagram " << i;
    }
    EXPECT_EQ(writing->peers()[0].counters.sealed.read(), 46u);
}

TEST_F(SealedSuperframeTest, ASuperFrameWaitsUntilAllItsFramesHaveRoom) {
    auto at_a = make(a, b);
    rte_mbuf* m = superframe(20000, 1398);  // 15 frames
    uint16_t taken = 99;
    auto wire = seal(*at_a, {m}, 14, false, &taken);
    EXPECT_EQ(taken, 0);
    EXPECT_TRUE(wire.empty());
    EXPECT_EQ(at_a->peers()[0].counters.sealed.read(), 0u) << "no sequence number spent";
    wire = seal(*at_a, {m}, 15, false, &taken);
    EXPECT_EQ(taken, 1);
    EXPECT_EQ(wire.size(), 15u);
    owned.insert(owned.end(), wire.begin(), wire.end());
}

TEST_F(SealedSuperframeTest, APlaintextSuperFrameIsCutOnlyWhereTheUplinkWantsFrames) {
    auto at_a = make(a, b, encryption_policy::off);
    rte_mbuf* whole = superframe(20000, 1398);
    std::vector<rte_mbuf*> in = {whole};
    std::vector<rte_mbuf*> out(64);
    uint16_t taken = 0;
    EXPECT_EQ(at_a->seal_burst(in.data(), 1, out.data(), 64, taken, true, pool(), counters, now),
              1);
    EXPECT_EQ(out[0], whole) << "a tap uplink takes it whole";
    const auto expected = software_cut(20000, 1398);
    const uint16_t n =
        at_a->seal_burst(in.data(), 1, out.data(), 64, taken, false, pool(), counters, now);
    ASSERT_EQ(n, expected.size());
    for (uint16_t i = 0; i < n; ++i) {
        owned.push_back(out[i]);
        EXPECT_EQ(test::bytes_of(out[i]), expected[i]) << "frame " << i;
    }
}

}  // namespace
}  // namespace jakiro::overlay::sealing
