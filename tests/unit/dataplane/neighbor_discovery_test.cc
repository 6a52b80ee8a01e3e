#include "dataplane/neighbor_discovery.hh"

#include <gtest/gtest.h>

#include "tests/unit/frames.hh"

namespace jakiro {
namespace {

using test::ip6;
using test::mac;
using test::neighbor_solicitation_spec;
using test::write_neighbor_solicitation;

const auto t1_mac = mac("02:00:c6:13:01:01");
const auto gateway = mac("02:6a:6b:00:00:01");

neighbor_solicitation_spec t1_asks_for_t2() {
    return {t1_mac, ip6("2001:2::1:1"), ip6("2001:2::1:2")};
}

TEST(NeighborDiscovery, ASolicitationParsesWithItsSourceAndTarget) {
    uint8_t frame[128];
    const uint32_t len = write_neighbor_solicitation(frame, t1_asks_for_t2());
    EXPECT_EQ(len, 86u);
    EXPECT_TRUE(is_neighbor_discovery(frame, len));
    const auto ns = parse_neighbor_solicitation(frame, len);
    ASSERT_TRUE(ns);
    EXPECT_EQ(ns->source, ip6("2001:2::1:1"));
    EXPECT_EQ(ns->target, ip6("2001:2::1:2"));
}

TEST(NeighborDiscovery, AnAdvertisementAnswersTheSolicitorWithTheGivenMac) {
    uint8_t frame[128];
    write_neighbor_solicitation(frame, t1_asks_for_t2());
    const uint32_t len = make_neighbor_advertisement(frame, gateway, ip6("2001:2::1:2"));
    ASSERT_EQ(len, neighbor_advertisement_bytes);
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &t1_mac));
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->src_addr, &gateway));
    const auto* iph = reinterpret_cast<const rte_ipv6_hdr*>(eth + 1);
    EXPECT_EQ(iph->hop_limits, 255);
    EXPECT_EQ(rte_be_to_cpu_16(iph->payload_len), 32);
    EXPECT_EQ(0, std::memcmp(iph->src_addr, ip6("2001:2::1:2").data(), 16));
    EXPECT_EQ(0, std::memcmp(iph->dst_addr, ip6("2001:2::1:1").data(), 16));
    const uint8_t* icmp = reinterpret_cast<const uint8_t*>(iph + 1);
    EXPECT_EQ(icmp[0], icmp6_neighbor_advertisement);
    EXPECT_EQ(icmp[4], 0x60) << "solicited and override, not router";
    EXPECT_EQ(0, std::memcmp(icmp + 8, ip6("2001:2::1:2").data(), 16));
    EXPECT_EQ(icmp[24], 2) << "target link-layer address option";
    EXPECT_EQ(0, std::memcmp(icmp + 26, gateway.addr_bytes, 6));
    EXPECT_TRUE(icmpv6_checksum_ok(iph, icmp)) << "checksum";
}

TEST(NeighborDiscovery, ASolicitationAsADadProbeOrToTheTargetItselfParses) {
    uint8_t frame[128];
    auto dad = t1_asks_for_t2();
    dad.src_ip = {};
    dad.source_option = false;
    ASSERT_TRUE(parse_neighbor_solicitation(frame, write_neighbor_solicitation(frame, dad)));
    auto unicast = t1_asks_for_t2();
    unicast.multicast = false;
    ASSERT_TRUE(parse_neighbor_solicitation(frame, write_neighbor_solicitation(frame, unicast)));
}

TEST(NeighborDiscovery, SolicitationsRfc4861RefusesAreRefused) {
    uint8_t frame[128];
    auto routed = t1_asks_for_t2();
    routed.hop_limit = 64;  // crossed a router
    EXPECT_FALSE(parse_neighbor_solicitation(frame, write_neighbor_solicitation(frame, routed)));

    auto multicast_target = t1_asks_for_t2();
    multicast_target.target = ip6("ff02::1");
    EXPECT_FALSE(
        parse_neighbor_solicitation(frame, write_neighbor_solicitation(frame, multicast_target)));

    auto dad_with_option = t1_asks_for_t2();
    dad_with_option.src_ip = {};
    EXPECT_FALSE(
        parse_neighbor_solicitation(frame, write_neighbor_solicitation(frame, dad_with_option)));

    uint32_t len = write_neighbor_solicitation(frame, t1_asks_for_t2());
    frame[14 + 40 + 2] ^= 0x01;  // checksum
    EXPECT_FALSE(parse_neighbor_solicitation(frame, len));

    len = write_neighbor_solicitation(frame, t1_asks_for_t2());
    EXPECT_FALSE(parse_neighbor_solicitation(frame, len - 1)) << "shorter than its IPv6 length";
    EXPECT_FALSE(parse_neighbor_solicitation(frame, 14 + 40 + 23));
}

TEST(NeighborDiscovery, AnOptionOfLengthZeroOrBeyondTheMessageIsRefused) {
    uint8_t frame[128];
    for (const uint8_t option_length : {0, 2}) {
        const uint32_t len = write_neighbor_solicitation(frame, t1_asks_for_t2());
        auto* iph = reinterpret_cast<rte_ipv6_hdr*>(frame + 14);
        uint8_t* icmp = frame + 14 + 40;
        icmp[25] = option_length;
        icmp[2] = icmp[3] = 0;
        const uint16_t checksum = rte_ipv6_udptcp_cksum(iph, icmp);
        std::memcpy(icmp + 2, &checksum, 2);
        EXPECT_FALSE(parse_neighbor_solicitation(frame, len)) << int{option_length};
    }
}

TEST(NeighborDiscovery, OnlyIcmpv6TypesOfNeighborDiscoveryAreNeighborDiscovery) {
    uint8_t frame[128];
    const uint32_t len = write_neighbor_solicitation(frame, t1_asks_for_t2());
    uint8_t* icmp = frame + 14 + 40;
    for (const uint8_t type : {133, 134, 135, 136, 137}) {
        icmp[0] = type;
        EXPECT_TRUE(is_neighbor_discovery(frame, len)) << int{type};
    }
    for (const uint8_t type : {128, 129, 143, 138}) {  // echo, MLDv2 report, renumbering
        icmp[0] = type;
        EXPECT_FALSE(is_neighbor_discovery(frame, len)) << int{type};
    }
    icmp[0] = icmp6_neighbor_solicitation;
    frame[14 + 6] = 0;  // next header: hop-by-hop options
    EXPECT_FALSE(is_neighbor_discovery(frame, len));
    EXPECT_FALSE(parse_neighbor_solicitation(frame, len));
}

}  // namespace
}  // namespace jakiro
