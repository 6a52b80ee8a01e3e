#include "dataplane/overlay/sealing/uplink_sealing.hh"

#include <gtest/gtest.h>

#include <vector>

#include "dataplane/overlay/vnic_mark.hh"
#include "tests/unit/frames.hh"

namespace jakiro::overlay::sealing {
namespace {

using test::ip;
using test::mac;

rte_mempool* test_pool() {
    static rte_mempool* pool = rte_pktmbuf_pool_create(
        "sealing_test", 1023, 0, 0, 10240 + RTE_PKTMBUF_HEADROOM, rte_socket_id());
    return pool;
}

struct host {
    const char* ip_text;
    const char* mac_text;
    host_key_pair keys = generate_key_pair();
};

uint64_t drops(const lcore_counters& c, drop_reason r) {
    return c.drops[static_cast<std::size_t>(r)].read();
}

struct UplinkSealingTest : testing::Test {
    host a{"198.18.0.1", "02:00:00:00:00:01"};
    host b{"198.18.0.2", "02:00:00:00:00:02"};
    host c{"198.18.0.3", "02:00:00:00:00:03"};
    lcore_counters counters_a;
    lcore_counters counters_b;
    uint64_t now = 1'000'000'000;

    // `self`'s sealing towards `others`, every one of them keyed, policy `policy`.
    std::unique_ptr<uplink_sealing> make(const host& self, std::vector<const host*> others,
                                         encryption_policy policy = encryption_policy::required,
                                         uint32_t first_epoch = 1000,
                                         uint64_t rekey_bytes = uint64_t{1} << 36) {
        sealing_setup setup;
        setup.policy = policy;
        setup.own = self.keys;
        setup.underlay_ip = rte_be_to_cpu_32(ip(self.ip_text));
        setup.first_epoch = first_epoch;
        setup.rekey_bytes = rekey_bytes;
        for (const host* o : others) {
            setup.peers.push_back({rte_be_to_cpu_32(ip(o->ip_text)), o->keys.public_key, policy});
        }
        std::string error;
        auto s = uplink_sealing::create(setup, error);
        EXPECT_TRUE(s) << error;
        return s;
    }

    // A VXLAN frame from `from` to `to` carrying a tenant's UDP datagram of `payload` bytes.
    rte_mbuf* vxlan_frame(const host& from, const host& to, uint16_t payload = 100,
                          uint32_t vni = 100) {
        test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                   ip("198.19.1.1"), ip("198.19.2.1")};
        spec.payload = payload;
        rte_mbuf* m = test::ipv4_mbuf(test_pool(), spec);
        test::vxlan_wrap(
            m, {mac(from.mac_text), mac(to.mac_text), ip(from.ip_text), ip(to.ip_text)}, vni);
        return m;
    }

    // Seals `pkts` (no super-frame among them) into `pkts`.
    uint16_t seal(uplink_sealing& s, rte_mbuf** pkts, uint16_t n) {
        std::vector<rte_mbuf*> in(pkts, pkts + n);
        uint16_t taken = 0;
        const uint16_t made =
            s.seal_burst(in.data(), n, pkts, n, taken, false, test_pool(), counters_a, now);
        EXPECT_EQ(taken, n);
        return made;
    }
    uint16_t open_at(uplink_sealing& s, const host& self, rte_mbuf** pkts, uint16_t n) {
        return s.open_burst(pkts, n, ip(self.ip_text), mac(self.mac_text), counters_b, now);
    }
    static uint16_t udp_dst(const rte_mbuf* m) {
        return rte_be_to_cpu_16(rte_pktmbuf_mtod_offset(m, const rte_udp_hdr*, 34)->dst_port);
    }
    void free_all(rte_mbuf** pkts, uint16_t n) { rte_pktmbuf_free_bulk(pkts, n); }
};

TEST_F(UplinkSealingTest, AFrameCrossesSealedAndArrivesAsItWasSent) {
    auto at_a = make(a, {&b});
    auto at_b = make(b, {&a});
    rte_mbuf* m = vxlan_frame(a, b, 1000);
    const std::vector<uint8_t> sent = test::bytes_of(m);
    ASSERT_EQ(seal(*at_a, &m, 1), 1);
    EXPECT_EQ(udp_dst(m), esp_udp_port);
    const std::vector<uint8_t> wire = test::bytes_of(m);
    // The tenant's bytes are not on the wire.
    EXPECT_EQ(std::search(wire.begin(), wire.end(), sent.begin() + 90, sent.begin() + 150),
              wire.end());
    ASSERT_EQ(open_at(*at_b, b, &m, 1), 1);
    EXPECT_EQ(test::bytes_of(m), sent);
    EXPECT_EQ(at_b->peers()[0].counters.opened.read(), 1u);
    free_all(&m, 1);
}

// Sealing is the work of the vNIC whose frame it is: each vNIC is charged its own frames and
// their plaintext bytes, jakirod's own frames no vNIC, and a frame that leaves in plaintext
// nothing.
TEST_F(UplinkSealingTest, EachVnicIsChargedTheFramesSealedForIt) {
    auto at_a = make(a, {&b});
    rte_mbuf* pkts[4] = {vxlan_frame(a, b, 1000), vxlan_frame(a, b, 200), vxlan_frame(a, b, 500),
                         vxlan_frame(a, b, 300)};
    mark_vnic(pkts[0], 3);
    mark_vnic(pkts[2], 5);
    mark_vnic(pkts[3], 3);
    // The plaintext a frame seals: all but its outer Ethernet, IPv4 and UDP headers.
    auto plaintext = [](const rte_mbuf* m) { return rte_pktmbuf_pkt_len(m) - 42u; };
    const uint64_t of_3 = plaintext(pkts[0]) + plaintext(pkts[3]);
    const uint64_t of_5 = plaintext(pkts[2]);
    ASSERT_EQ(seal(*at_a, pkts, 4), 4);
    EXPECT_EQ(counters_a.vnics[3].sealed_frames.read(), 2u);
    EXPECT_EQ(counters_a.vnics[3].sealed_bytes.read(), of_3);
    EXPECT_EQ(counters_a.vnics[5].sealed_frames.read(), 1u);
    EXPECT_EQ(counters_a.vnics[5].sealed_bytes.read(), of_5);
    EXPECT_EQ(at_a->peers()[0].counters.sealed.read(), 4u) << "the unmarked one is sealed too";
    free_all(pkts, 4);

    // The control: the same vNIC's frame to a host it does not seal for costs it nothing.
    auto plain = make(a, {&b}, encryption_policy::off);
    rte_mbuf* m = vxlan_frame(a, b, 1000);
    mark_vnic(m, 3);
    ASSERT_EQ(seal(*plain, &m, 1), 1);
    EXPECT_EQ(counters_a.vnics[3].sealed_frames.read(), 2u);
    free_all(&m, 1);
}

TEST_F(UplinkSealingTest, AHostsKeyLearnedWhileRunningMakesItsFramesSealed) {
    auto at_a = make(a, {});  // required, and no host listed: b is unknown
    auto at_b = make(b, {&a});
    rte_mbuf* before = vxlan_frame(a, b);
    EXPECT_EQ(seal(*at_a, &before, 1), 0);
    EXPECT_EQ(drops(counters_a, drop_reason::unsealed_no_key), 1u);
    ASSERT_TRUE(at_a->offer_key(rte_be_to_cpu_32(ip(b.ip_text)), b.keys.public_key));
    // Its own key, as its etcd record carries it, is not a peer.
    ASSERT_TRUE(at_a->offer_key(rte_be_to_cpu_32(ip(a.ip_text)), a.keys.public_key));
    rte_mbuf* m = vxlan_frame(a, b, 500);
    const std::vector<uint8_t> sent = test::bytes_of(m);
    ASSERT_EQ(seal(*at_a, &m, 1), 1);
    EXPECT_EQ(udp_dst(m), esp_udp_port);
    ASSERT_EQ(at_a->peers().size(), 1u);
    EXPECT_TRUE(at_a->peers()[0].seals());
    ASSERT_EQ(open_at(*at_b, b, &m, 1), 1);
    EXPECT_EQ(test::bytes_of(m), sent);
    free_all(&m, 1);
    // And what b seals for a opens at a: the learned SA holds the receiving keys too.
    auto at_b_sender = make(b, {&a});
    rte_mbuf* back = vxlan_frame(b, a);
    std::vector<rte_mbuf*> in = {back};
    uint16_t taken = 0;
    ASSERT_EQ(
        at_b_sender->seal_burst(in.data(), 1, &back, 1, taken, false, test_pool(), counters_b, now),
        1);
    ASSERT_EQ(at_a->open_burst(&back, 1, ip(a.ip_text), mac(a.mac_text), counters_a, now), 1);
    free_all(&back, 1);
}

TEST_F(UplinkSealingTest, AReplayedFrameIsDroppedAsReplayed) {
    auto at_a = make(a, {&b});
    auto at_b = make(b, {&a});
    rte_mbuf* m = vxlan_frame(a, b);
    ASSERT_EQ(seal(*at_a, &m, 1), 1);
    rte_mbuf* copy = test::mbuf_from(test_pool(), test::bytes_of(m).data(), rte_pktmbuf_pkt_len(m));
    rte_mbuf* burst[] = {m, copy};
    ASSERT_EQ(open_at(*at_b, b, burst, 2), 1);
    EXPECT_EQ(drops(counters_b, drop_reason::replayed), 1u);
    free_all(burst, 1);
}

TEST_F(UplinkSealingTest, AFlippedBitIsDroppedAsAuthFailed) {
    auto at_a = make(a, {&b});
    auto at_b = make(b, {&a});
    rte_mbuf* m = vxlan_frame(a, b);
    ASSERT_EQ(seal(*at_a, &m, 1), 1);
    rte_pktmbuf_mtod(m, uint8_t*)[100] ^= 0x01;
    EXPECT_EQ(open_at(*at_b, b, &m, 1), 0);
    EXPECT_EQ(drops(counters_b, drop_reason::auth_failed), 1u);
    // The genuine next frame still opens: the forgery moved no window, no epoch.
    rte_mbuf* next = vxlan_frame(a, b);
    ASSERT_EQ(seal(*at_a, &next, 1), 1);
    ASSERT_EQ(open_at(*at_b, b, &next, 1), 1);
    free_all(&next, 1);
}

TEST_F(UplinkSealingTest, AFrameUnderAnotherPairsKeyIsDroppedAsAuthFailed) {
    // C seals for B with its own pair key but puts A's address as the outer source.
    auto at_c = make(c, {&b});
    auto at_b = make(b, {&a, &c});
    rte_mbuf* m = vxlan_frame(c, b);
    ASSERT_EQ(seal(*at_c, &m, 1), 1);
    rte_mbuf* forged =
        test::mbuf_from(test_pool(), test::bytes_of(m).data(), rte_pktmbuf_pkt_len(m));
    auto* outer = rte_pktmbuf_mtod_offset(forged, rte_ipv4_hdr*, 14);
    outer->src_addr = ip(a.ip_text);
    outer->hdr_checksum = 0;
    outer->hdr_checksum = rte_ipv4_cksum(outer);
    EXPECT_EQ(open_at(*at_b, b, &forged, 1), 0);
    EXPECT_EQ(drops(counters_b, drop_reason::auth_failed), 1u);
    // Control: the same frame in C's own name opens.
    ASSERT_EQ(open_at(*at_b, b, &m, 1), 1);
    free_all(&m, 1);
}

TEST_F(UplinkSealingTest, PlaintextFromAHostThatMustSealIsRefused) {
    auto at_b = make(b, {&a});
    rte_mbuf* m = vxlan_frame(a, b);  // a forged plain VXLAN frame in A's name
    EXPECT_EQ(open_at(*at_b, b, &m, 1), 0);
    EXPECT_EQ(drops(counters_b, drop_reason::plaintext_refused), 1u);
    // Optional: plaintext from A passes for the ingress pipeline to judge.
    auto lenient = make(b, {&a}, encryption_policy::optional);
    rte_mbuf* plain = vxlan_frame(a, b);
    EXPECT_EQ(open_at(*lenient, b, &plain, 1), 1);
    free_all(&plain, 1);
}

TEST_F(UplinkSealingTest, AnUnkeyedHostThatMustSealGetsNothing) {
    sealing_setup setup;
    setup.policy = encryption_policy::required;
    setup.own = a.keys;
    setup.underlay_ip = rte_be_to_cpu_32(ip(a.ip_text));
    std::string error;
    auto at_a = uplink_sealing::create(setup, error);
    ASSERT_TRUE(at_a);
    rte_mbuf* m = vxlan_frame(a, b);
    EXPECT_EQ(seal(*at_a, &m, 1), 0);
    EXPECT_EQ(drops(counters_a, drop_reason::unsealed_no_key), 1u);
}

TEST_F(UplinkSealingTest, APeerWithEncryptionOffStaysPlaintext) {
    sealing_setup setup;
    setup.policy = encryption_policy::required;
    setup.own = a.keys;
    setup.underlay_ip = rte_be_to_cpu_32(ip(a.ip_text));
    setup.peers.push_back({rte_be_to_cpu_32(ip(b.ip_text)), std::nullopt, encryption_policy::off});
    std::string error;
    auto at_a = uplink_sealing::create(setup, error);
    rte_mbuf* m = vxlan_frame(a, b);
    ASSERT_EQ(seal(*at_a, &m, 1), 1);
    EXPECT_EQ(udp_dst(m), overlay::vxlan_udp_port);
    free_all(&m, 1);
}

// A rekey mid-stream: frames sealed under the old epoch that arrive after the first frame of
// the new one still open, each exactly once; once a third epoch is seen the first is over.
TEST_F(UplinkSealingTest, ARekeyLosesNoFrameSealedBeforeIt) {
    auto at_a = make(a, {&b}, encryption_policy::required, 1000, 4000);
    auto at_b = make(b, {&a});
    auto sealed = [&] {
        rte_mbuf* m = vxlan_frame(a, b, 1000);
        EXPECT_EQ(seal(*at_a, &m, 1), 1);
        return m;
    };
    auto opens = [&](rte_mbuf* m) { return open_at(*at_b, b, &m, 1) == 1; };
    auto copy_of = [&](rte_mbuf* m) {
        return test::mbuf_from(test_pool(), test::bytes_of(m).data(), rte_pktmbuf_pkt_len(m));
    };
    std::vector<rte_mbuf*> old_epoch;
    for (int i = 0; i < 5; ++i) {
        old_epoch.push_back(sealed());  // 5 kB: past the byte budget, not past the time floor
    }
    ASSERT_EQ(at_a->peers()[0].tx_epoch, 1000u);
    ASSERT_TRUE(opens(old_epoch[0]));
    now += uplink_sealing::min_epoch_ns;
    rte_mbuf* first_new = sealed();
    ASSERT_EQ(at_a->peers()[0].tx_epoch, 1001u);
    EXPECT_EQ(at_a->peers()[0].counters.tx_rekeys.read(), 1u);
    ASSERT_TRUE(opens(first_new));
    EXPECT_EQ(at_b->peers()[0].rx[0].epoch, 1001u);
    // The old epoch's frames, late and in reverse: every one opens once, then is a replay.
    std::vector<rte_mbuf*> copies;
    for (int i = 4; i >= 1; --i) {
        copies.push_back(copy_of(old_epoch[i]));
        EXPECT_TRUE(opens(old_epoch[i])) << i;
    }
    EXPECT_EQ(drops(counters_b, drop_reason::auth_failed), 0u);
    EXPECT_EQ(open_at(*at_b, b, copies.data(), static_cast<uint16_t>(copies.size())), 0);
    EXPECT_EQ(drops(counters_b, drop_reason::replayed), copies.size());
    // A third epoch: the first one is over, and its frames are replays whatever their number.
    rte_mbuf* stale = vxlan_frame(a, b);
    at_a = make(a, {&b}, encryption_policy::required, 1000);  // a sender that reuses epoch 1000
    ASSERT_EQ(seal(*at_a, &stale, 1), 1);
    now += uplink_sealing::min_epoch_ns;
    auto later = make(a, {&b}, encryption_policy::required, 1002);
    rte_mbuf* third = vxlan_frame(a, b);
    ASSERT_EQ(seal(*later, &third, 1), 1);
    ASSERT_TRUE(opens(third));
    EXPECT_FALSE(opens(stale));
    EXPECT_EQ(drops(counters_b, drop_reason::replayed), copies.size() + 1);
}

// The byte budget runs out in the middle of a burst: the frames before the rekey are sealed
// under the epoch their SPI names, those after it under the new one, and all of them open.
TEST_F(UplinkSealingTest, ARekeyInsideABurstSealsEachFrameUnderTheEpochItNames) {
    auto at_a = make(a, {&b}, encryption_policy::required, 1000, 4000);
    auto at_b = make(b, {&a});
    rte_mbuf* first = vxlan_frame(a, b, 1000);
    ASSERT_EQ(seal(*at_a, &first, 1), 1);  // starts the epoch's clock
    ASSERT_EQ(open_at(*at_b, b, &first, 1), 1);
    now += uplink_sealing::min_epoch_ns;
    rte_mbuf* burst[8];
    for (auto& m : burst) {
        m = vxlan_frame(a, b, 1000);
    }
    ASSERT_EQ(seal(*at_a, burst, 8), 8);
    ASSERT_EQ(at_a->peers()[0].tx_epoch, 1001u);
    EXPECT_EQ(open_at(*at_b, b, burst, 8), 8);
    EXPECT_EQ(drops(counters_b, drop_reason::auth_failed), 0u);
    free_all(&first, 1);
    free_all(burst, 8);
}

// A fabric attacker sends frames in a's name with the SPI of a far epoch, one per derive
// interval, so the candidate slot holds a key of no use whenever a's real rekey comes. The
// rekey still opens at once (the epoch after the current one is derived ahead), and the
// forgery is one auth_failed drop.
TEST_F(UplinkSealingTest, ForgedFutureSpisInTheCandidateSlotDoNotDelayARealRekey) {
    auto at_a = make(a, {&b}, encryption_policy::required, 1000, 4000);
    auto at_b = make(b, {&a});
    rte_mbuf* old_epoch[5];
    for (auto& m : old_epoch) {
        m = vxlan_frame(a, b, 1000);  // 5 kB: past the byte budget
    }
    ASSERT_EQ(seal(*at_a, old_epoch, 5), 5);
    ASSERT_EQ(open_at(*at_b, b, old_epoch, 1), 1);
    now += uplink_sealing::min_epoch_ns;
    rte_mbuf* rekeyed = vxlan_frame(a, b, 1000);
    ASSERT_EQ(seal(*at_a, &rekeyed, 1), 1);
    ASSERT_EQ(at_a->peers()[0].tx_epoch, 1001u);

    rte_mbuf* forged = old_epoch[1];
    uint8_t* spi = rte_pktmbuf_mtod_offset(forged, uint8_t*, 42);
    const uint32_t far = 2001;  // a's epoch is 1001
    const rte_be32_t far_be = rte_cpu_to_be_32(far);
    std::memcpy(spi, &far_be, sizeof(far_be));
    EXPECT_EQ(open_at(*at_b, b, &forged, 1), 0);
    now += uplink_sealing::derive_interval_ns / 2;  // the attacker's slot is still fresh
    EXPECT_EQ(open_at(*at_b, b, &rekeyed, 1), 1) << "the real rekey waited for the slot";
    EXPECT_EQ(at_b->peers()[0].rx[0].epoch, 1001u);
    EXPECT_EQ(drops(counters_b, drop_reason::auth_failed), 1u);
    free_all(&rekeyed, 1);
    free_all(old_epoch, 1);
    free_all(old_epoch + 2, 3);
}

TEST_F(UplinkSealingTest, FramesForAnotherHostOrNotOverlayPassUntouched) {
    auto at_b = make(b, {&a});
    rte_mbuf* arp =
        test::arp_request_mbuf(test_pool(), mac(a.mac_text), ip(a.ip_text), ip(b.ip_text));
    const auto before = test::bytes_of(arp);
    EXPECT_EQ(open_at(*at_b, b, &arp, 1), 1);
    EXPECT_EQ(test::bytes_of(arp), before);
    free_all(&arp, 1);
}

}  // namespace
}  // namespace jakiro::overlay::sealing
