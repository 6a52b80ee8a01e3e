#include "dataplane/overlay/sealing/sealed_datagrams.hh"

#include <gtest/gtest.h>
#include <rte_udp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dataplane/overlay/sealing/uplink_sealing.hh"
#include "dataplane/overlay/udp_gso.hh"
#include "tests/unit/frames.hh"

namespace jakiro::overlay::sealing {
namespace {

using test::ip;
using test::mac;

rte_mempool* pool() {
    static rte_mempool* p = rte_pktmbuf_pool_create("sealed_dgram_test", 1023, 0, 0,
                                                    RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
    return p;
}

rte_mempool* big_pool() {
    static rte_mempool* p =
        rte_pktmbuf_pool_create("sealed_dgram_big", 15, 0, 0, UINT16_MAX, rte_socket_id());
    return p;
}

struct host {
    const char* ip_text;
    const char* mac_text;
    host_key_pair keys = generate_key_pair();
};

struct SealedDatagramsTest : testing::Test {
    host a{"198.18.0.1", "02:00:00:00:00:01"};
    host b{"198.18.0.2", "02:00:00:00:00:02"};
    host c{"198.18.0.3", "02:00:00:00:00:03"};
    lcore_counters counters;
    std::vector<rte_mbuf*> owned;

    ~SealedDatagramsTest() override {
        for (rte_mbuf* m : owned) {
            rte_pktmbuf_free(m);
        }
    }

    std::unique_ptr<uplink_sealing> make(const host& self, std::vector<const host*> others) {
        sealing_setup setup;
        setup.policy = encryption_policy::required;
        setup.own = self.keys;
        setup.underlay_ip = rte_be_to_cpu_32(ip(self.ip_text));
        for (const host* o : others) {
            setup.peers.push_back({rte_be_to_cpu_32(ip(o->ip_text)), o->keys.public_key,
                                   encryption_policy::required});
        }
        std::string error;
        auto s = uplink_sealing::create(setup, error);
        EXPECT_TRUE(s) << error;
        return s;
    }

    // A VXLAN frame from `from` to `to` carrying a tenant UDP datagram of `payload` bytes;
    // `entropy` is the outer UDP source port (one per inner flow).
    rte_mbuf* vxlan_frame(const host& from, const host& to, uint16_t payload,
                          uint16_t entropy = 50000) {
        test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                   ip("198.19.1.1"), ip("198.19.2.1")};
        spec.payload = payload;
        rte_mbuf* m = test::ipv4_mbuf(pool(), spec);
        overlay::encapsulate(
            m, {mac(from.mac_text), mac(to.mac_text), ip(from.ip_text), ip(to.ip_text)}, 100, 0,
            entropy);
        return m;
    }

    // Seals `frames` at `sender` and joins them; returns what would be written to the uplink.
    std::vector<rte_mbuf*> seal_and_join(uplink_sealing& sender, std::vector<rte_mbuf*> frames) {
        std::vector<rte_mbuf*> out(frames.size());
        uint16_t taken = 0;
        auto n = sender.seal_burst(frames.data(), static_cast<uint16_t>(frames.size()), out.data(),
                                   static_cast<uint16_t>(out.size()), taken, false, pool(),
                                   counters, 1'000'000'000);
        n = join_sealed_frames(out.data(), n);
        out.resize(n);
        return out;
    }

    // What the receiving Jakiro host makes of `datagram`: the kernel hands it over whole, the
    // uplink face cuts it (uplink_frames.hh), the sealing opens every frame.
    std::vector<rte_mbuf*> receive(uplink_sealing& receiver, const host& self, rte_mbuf* datagram) {
        const std::vector<uint8_t> bytes = test::bytes_of(datagram);
        const uint16_t gso = (datagram->ol_flags & RTE_MBUF_F_TX_UDP_SEG) != 0
                                 ? datagram->tso_segsz
                                 : static_cast<uint16_t>(bytes.size() - gso_outer_bytes);
        std::vector<uint8_t> tail;
        rte_mbuf* head = test::head_and_tail(pool(), bytes, tail);
        std::vector<rte_mbuf*> cut(max_gso_chunks);
        uint16_t count = 0;
        EXPECT_EQ(split_udp_gso(head, tail.data(), static_cast<uint32_t>(bytes.size()), gso, pool(),
                                cut.data(), count),
                  split_verdict::ok);
        count = receiver.open_burst(cut.data(), count, ip(self.ip_text), mac(self.mac_text),
                                    counters, 1'000'000'000);
        cut.resize(count);
        return cut;
    }
};

bool is_super_datagram(const rte_mbuf* m) {
    return (m->ol_flags & RTE_MBUF_F_TX_UDP_SEG) != 0;
}

TEST_F(SealedDatagramsTest, OneFlowsSealedFramesLeaveAsOneDatagramThatOpensIntoTheSameFrames) {
    auto at_a = make(a, {&b});
    auto at_b = make(b, {&a});
    std::vector<rte_mbuf*> frames;
    std::vector<std::vector<uint8_t>> sent;
    for (int i = 0; i < 20; ++i) {
        frames.push_back(vxlan_frame(a, b, i < 19 ? 1400 : 333));  // a super-frame's cut
        sent.push_back(test::bytes_of(frames.back()));
    }
    const auto out = seal_and_join(*at_a, frames);
    ASSERT_EQ(out.size(), 1u) << "20 frames of one flow: one tap write";
    owned.push_back(out[0]);
    ASSERT_TRUE(is_super_datagram(out[0]));
    EXPECT_EQ(rte_be_to_cpu_16(rte_pktmbuf_mtod_offset(out[0], rte_udp_hdr*, 34)->dst_port),
              esp_udp_port);
    const auto opened = receive(*at_b, b, out[0]);
    ASSERT_EQ(opened.size(), sent.size());
    for (std::size_t i = 0; i < opened.size(); ++i) {
        owned.push_back(opened[i]);
        EXPECT_EQ(test::bytes_of(opened[i]), sent[i]) << "frame " << i;
    }
    EXPECT_EQ(at_b->peers()[0].counters.opened.read(), 20u);
}

TEST_F(SealedDatagramsTest, ADatagramEndsWhereTheHostTheFlowOrTheSizeChanges) {
    auto at_a = make(a, {&b, &c});
    // Datagrams: b's two frames; c's two; c's other flow; b's short frame (a longer one
    // cannot follow it); b's three.
    std::vector<rte_mbuf*> frames = {
        vxlan_frame(a, b, 1000), vxlan_frame(a, b, 1000),        vxlan_frame(a, c, 1000),
        vxlan_frame(a, c, 1000), vxlan_frame(a, c, 1000, 50001), vxlan_frame(a, b, 500),
        vxlan_frame(a, b, 1000), vxlan_frame(a, b, 1000),        vxlan_frame(a, b, 1000),
    };
    const auto out = seal_and_join(*at_a, frames);
    ASSERT_EQ(out.size(), 5u);
    const std::vector<uint32_t> chunks = {2, 2, 1, 1, 3};
    for (std::size_t i = 0; i < out.size(); ++i) {
        owned.push_back(out[i]);
        const uint32_t chunk =
            is_super_datagram(out[i]) ? out[i]->tso_segsz : rte_pktmbuf_pkt_len(out[i]) - 42;
        EXPECT_EQ((rte_pktmbuf_pkt_len(out[i]) - 42 + chunk - 1) / chunk, chunks[i])
            << "datagram " << i;
        EXPECT_EQ(is_super_datagram(out[i]), chunks[i] > 1) << "datagram " << i;
    }
    EXPECT_EQ(rte_pktmbuf_mtod_offset(out[1], rte_ipv4_hdr*, 14)->dst_addr, ip(c.ip_text));
}

TEST_F(SealedDatagramsTest, WhatIsNotSealedStaysInItsPlace) {
    auto at_a = make(a, {&b});
    rte_mbuf* arp = test::arp_request_mbuf(pool(), mac(a.mac_text), ip(a.ip_text), ip(b.ip_text));
    std::vector<rte_mbuf*> frames = {vxlan_frame(a, b, 1000), arp, vxlan_frame(a, b, 1000),
                                     vxlan_frame(a, b, 1000)};
    const auto out = seal_and_join(*at_a, frames);
    ASSERT_EQ(out.size(), 3u);
    for (rte_mbuf* m : out) {
        owned.push_back(m);
    }
    EXPECT_FALSE(is_super_datagram(out[0])) << "a lone frame stays an ordinary frame";
    EXPECT_EQ(out[1], arp);
    EXPECT_TRUE(is_super_datagram(out[2]));
    rte_mbuf* again[2] = {out[2], out[2]};
    EXPECT_EQ(join_sealed_frames(again, 1), 1) << "a datagram is never joined again";
    EXPECT_EQ(again[0], out[2]);
}

TEST_F(SealedDatagramsTest, ADatagramCarriesNoMoreFramesThanAReceiverCuts) {
    auto at_a = make(a, {&b});
    std::vector<rte_mbuf*> frames;
    for (int i = 0; i < 150; ++i) {
        frames.push_back(vxlan_frame(a, b, 200));
    }
    const auto out = seal_and_join(*at_a, frames);
    ASSERT_EQ(out.size(), 3u);
    for (rte_mbuf* m : out) {
        owned.push_back(m);
        EXPECT_LE((rte_pktmbuf_pkt_len(m) - 42) / m->tso_segsz, max_gso_chunks);
    }
}

// What the uplink face makes of `datagram` when it opens sealed datagrams itself: each frame
// decrypted from where it lies in the message (uplink_sealing::open_datagram).
std::vector<rte_mbuf*> open_where_they_lie(SealedDatagramsTest& t, uplink_sealing& receiver,
                                           const host& self, rte_mbuf* datagram,
                                           std::vector<uint8_t>* wire = nullptr) {
    std::vector<uint8_t> bytes = wire != nullptr ? *wire : test::bytes_of(datagram);
    std::vector<uint8_t> tail;
    rte_mbuf* head = test::head_and_tail(pool(), bytes, tail);
    std::vector<rte_mbuf*> out(max_gso_chunks);
    const auto n = receiver.open_datagram(
        rte_pktmbuf_mtod(head, const uint8_t*), rte_pktmbuf_data_len(head), tail.data(),
        static_cast<uint32_t>(bytes.size()), datagram->tso_segsz, pool(), nullptr, out.data(),
        ip(self.ip_text), mac(self.mac_text), t.counters, 1'000'000'000);
    rte_pktmbuf_free(head);
    EXPECT_TRUE(n.has_value());
    out.resize(n.value_or(0));
    for (rte_mbuf* m : out) {
        t.owned.push_back(m);
    }
    return out;
}

TEST_F(SealedDatagramsTest, ADatagramOpensWhereItLiesIntoTheFramesThatWereSealed) {
    auto at_a = make(a, {&b});
    auto at_b = make(b, {&a});
    std::vector<rte_mbuf*> frames;
    std::vector<std::vector<uint8_t>> sent;
    for (int i = 0; i < 20; ++i) {
        frames.push_back(vxlan_frame(a, b, i < 19 ? 1400 : 333));
        sent.push_back(test::bytes_of(frames.back()));
    }
    const auto out = seal_and_join(*at_a, frames);
    ASSERT_EQ(out.size(), 1u);
    owned.push_back(out[0]);
    const auto opened = open_where_they_lie(*this, *at_b, b, out[0]);
    ASSERT_EQ(opened.size(), sent.size());
    for (std::size_t i = 0; i < opened.size(); ++i) {
        EXPECT_EQ(test::bytes_of(opened[i]), sent[i]) << "frame " << i;
    }
    // open_burst passes what was opened already, unchanged.
    std::vector<rte_mbuf*> burst = opened;
    EXPECT_EQ(at_b->open_burst(burst.data(), static_cast<uint16_t>(burst.size()), ip(b.ip_text),
                               mac(b.mac_text), counters, 1'000'000'000),
              opened.size());
    EXPECT_EQ(at_b->peers()[0].counters.opened.read(), 20u);
}

TEST_F(SealedDatagramsTest, ATamperedFrameInADatagramIsDroppedAloneAndAReplayedOneEntirely) {
    auto at_a = make(a, {&b});
    auto at_b = make(b, {&a});
    std::vector<rte_mbuf*> frames;
    for (int i = 0; i < 5; ++i) {
        frames.push_back(vxlan_frame(a, b, 1000));
    }
    const auto out = seal_and_join(*at_a, frames);
    ASSERT_EQ(out.size(), 1u);
    owned.push_back(out[0]);
    std::vector<uint8_t> wire = test::bytes_of(out[0]);
    std::vector<uint8_t> tampered = wire;
    tampered[gso_outer_bytes + 2 * out[0]->tso_segsz + 100] ^= 0x20;  // the third frame
    EXPECT_EQ(open_where_they_lie(*this, *at_b, b, out[0], &tampered).size(), 4u);
    EXPECT_EQ(counters.drops[static_cast<std::size_t>(drop_reason::auth_failed)].read(), 1u);
    // The genuine datagram again: the four that opened are replays, the third opens now.
    EXPECT_EQ(open_where_they_lie(*this, *at_b, b, out[0], &wire).size(), 1u);
    EXPECT_EQ(counters.drops[static_cast<std::size_t>(drop_reason::replayed)].read(), 4u);
}

TEST_F(SealedDatagramsTest, ADatagramForAnotherHostIsLeftForTheIngressChecks) {
    auto at_a = make(a, {&b});
    auto at_c = make(c, {&a});
    std::vector<rte_mbuf*> frames = {vxlan_frame(a, b, 1000), vxlan_frame(a, b, 1000)};
    const auto out = seal_and_join(*at_a, frames);
    ASSERT_EQ(out.size(), 1u);
    owned.push_back(out[0]);
    std::vector<uint8_t> bytes = test::bytes_of(out[0]);
    std::vector<uint8_t> tail;
    rte_mbuf* head = test::head_and_tail(pool(), bytes, tail);
    rte_mbuf* cut[max_gso_chunks];
    EXPECT_FALSE(at_c->open_datagram(rte_pktmbuf_mtod(head, const uint8_t*),
                                     rte_pktmbuf_data_len(head), tail.data(),
                                     static_cast<uint32_t>(bytes.size()), out[0]->tso_segsz, pool(),
                                     nullptr, cut, ip(c.ip_text), mac(c.mac_text), counters,
                                     1'000'000'000)
                     .has_value());
    rte_pktmbuf_free(head);
}

TEST_F(SealedDatagramsTest, APlaintextDatagramIsSealedChunkByChunkIntoDatagramsOfEspFrames) {
    auto at_a = make(a, {&b});
    auto at_b = make(b, {&a});
    at_a->seal_into_datagrams(big_pool());
    // One QP's packets as the RoCE port writes them: one buffer, the outer headers once.
    constexpr uint32_t frames = 64;  // chunks of 1 020 bytes, the last shorter
    std::vector<std::vector<uint8_t>> sent;
    rte_mbuf* datagram = rte_pktmbuf_alloc(big_pool());
    for (uint32_t i = 0; i < frames; ++i) {
        rte_mbuf* f = vxlan_frame(a, b, i + 1 < frames ? 970 : 700);
        sent.push_back(test::bytes_of(f));
        const uint32_t from = i == 0 ? 0 : gso_outer_bytes;
        std::memcpy(rte_pktmbuf_append(datagram, static_cast<uint16_t>(sent.back().size() - from)),
                    sent.back().data() + from, sent.back().size() - from);
        rte_pktmbuf_free(f);
    }
    const uint32_t chunk = static_cast<uint32_t>(sent[0].size()) - gso_outer_bytes;
    set_outer_lengths(rte_pktmbuf_mtod(datagram, uint8_t*), rte_pktmbuf_pkt_len(datagram), true);
    mark_udp_gso(datagram, chunk);
    std::vector<rte_mbuf*> out(4);
    uint16_t taken = 0;
    const uint16_t n = at_a->seal_burst(&datagram, 1, out.data(), 4, taken, false, pool(), counters,
                                        1'000'000'000);
    EXPECT_EQ(taken, 1);
    ASSERT_EQ(n, 2u) << "64 sealed chunks of 1 056 bytes: a 64 KB buffer holds 61";
    std::vector<rte_mbuf*> opened;
    for (uint16_t i = 0; i < n; ++i) {
        owned.push_back(out[i]);
        EXPECT_EQ(out[i]->nb_segs, 1);
        ASSERT_TRUE(is_super_datagram(out[i]));
        EXPECT_EQ(rte_be_to_cpu_16(rte_pktmbuf_mtod_offset(out[i], rte_udp_hdr*, 34)->dst_port),
                  esp_udp_port);
        const auto some = open_where_they_lie(*this, *at_b, b, out[i]);
        opened.insert(opened.end(), some.begin(), some.end());
    }
    ASSERT_EQ(opened.size(), sent.size());
    // Each datagram's outer IPv4 id is its first frame's number (the kernel counts up from it).
    auto but_outer_id = [](std::vector<uint8_t> bytes) {
        std::fill(bytes.begin() + 18, bytes.begin() + 20, 0);  // identification
        std::fill(bytes.begin() + 24, bytes.begin() + 26, 0);  // header checksum
        return bytes;
    };
    for (std::size_t i = 0; i < opened.size(); ++i) {
        EXPECT_EQ(but_outer_id(test::bytes_of(opened[i])), but_outer_id(sent[i])) << "frame " << i;
    }
    EXPECT_EQ(at_a->peers()[0].counters.sealed.read(), frames);
}

}  // namespace
}  // namespace jakiro::overlay::sealing
