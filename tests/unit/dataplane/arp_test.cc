#include "dataplane/arp.hh"

#include <gtest/gtest.h>

#include "tests/unit/frames.hh"

namespace jakiro {
namespace {

using test::ip;
using test::mac;

TEST(Arp, RequestParsesBack) {
    uint8_t frame[64];
    const uint32_t len =
        write_arp_request(frame, mac("02:00:c6:13:01:01"), ip("198.19.1.1"), ip("198.19.1.2"));
    EXPECT_EQ(len, 60u) << "padded to the Ethernet minimum";
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    EXPECT_TRUE(rte_is_broadcast_ether_addr(&eth->dst_addr));
    const auto arp = parse_arp(frame, len);
    ASSERT_TRUE(arp);
    EXPECT_EQ(arp->opcode, RTE_ARP_OP_REQUEST);
    EXPECT_EQ(arp->sender_ip, ip("198.19.1.1"));
    EXPECT_EQ(arp->target_ip, ip("198.19.1.2"));
}

TEST(Arp, ReplyAnswersTheRequesterWithTheGivenMac) {
    uint8_t frame[64];
    const auto requester = mac("02:00:c6:13:01:01");
    const auto gateway = mac("02:6a:6b:00:00:01");
    write_arp_request(frame, requester, ip("198.19.1.1"), ip("198.19.1.2"));
    make_arp_reply(frame, gateway, ip("198.19.1.2"));
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &requester));
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->src_addr, &gateway));
    const auto arp = parse_arp(frame, 60);
    ASSERT_TRUE(arp);
    EXPECT_EQ(arp->opcode, RTE_ARP_OP_REPLY);
    EXPECT_TRUE(rte_is_same_ether_addr(&arp->sender_mac, &gateway));
    EXPECT_EQ(arp->sender_ip, ip("198.19.1.2"));
    EXPECT_EQ(arp->target_ip, ip("198.19.1.1"));
    const auto* hdr = reinterpret_cast<const rte_arp_hdr*>(eth + 1);
    EXPECT_TRUE(rte_is_same_ether_addr(&hdr->arp_data.arp_tha, &requester));
}

TEST(Arp, RejectsShortAndNonIpv4Arp) {
    uint8_t frame[64];
    write_arp_request(frame, mac("02:00:c6:13:01:01"), ip("198.19.1.1"), ip("198.19.1.2"));
    EXPECT_FALSE(parse_arp(frame, 41));
    frame[14 + 2] = 0x86;  // protocol type IPv6
    frame[14 + 3] = 0xdd;
    EXPECT_FALSE(parse_arp(frame, 60));
}

}  // namespace
}  // namespace jakiro
