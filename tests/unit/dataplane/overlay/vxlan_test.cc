#include "dataplane/overlay/vxlan.hh"

#include <gtest/gtest.h>

#include <set>

#include "tests/unit/frames.hh"

namespace jakiro::overlay {
namespace {

using test::ip;
using test::mac;

const tunnel_endpoints h1_to_h2{mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"),
                                ip("198.18.0.1"), ip("198.18.0.2")};

struct VxlanTest : testing::Test {
    uint8_t frame[256]{};
    uint32_t inner_len = 0;
    // An encapsulated frame as h1 sends it to h2, inner TOS `tos`.
    uint32_t build(uint8_t tos = 0) {
        test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"), mac("02:6a:6b:00:00:01"),
                                   ip("198.19.1.1"), ip("198.19.1.2")};
        spec.tos = tos;
        inner_len = test::write_ipv4_frame(frame + outer_header_bytes, spec);
        write_outer_headers(frame, h1_to_h2, 100, static_cast<uint16_t>(inner_len), tos, 50001);
        return outer_header_bytes + inner_len;
    }
    rte_ipv4_hdr* outer_ip() { return reinterpret_cast<rte_ipv4_hdr*>(frame + 14); }
    rte_udp_hdr* outer_udp() { return reinterpret_cast<rte_udp_hdr*>(frame + 34); }
};

TEST_F(VxlanTest, OuterHeadersFollowRfc7348) {
    build();
    auto* eth = reinterpret_cast<rte_ether_hdr*>(frame);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &h1_to_h2.remote_mac));
    EXPECT_EQ(eth->ether_type, rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4));
    EXPECT_EQ(outer_ip()->src_addr, ip("198.18.0.1"));
    EXPECT_EQ(outer_ip()->dst_addr, ip("198.18.0.2"));
    EXPECT_EQ(rte_be_to_cpu_16(outer_ip()->total_length), 20 + 8 + 8 + inner_len);
    EXPECT_EQ(rte_raw_cksum(outer_ip(), 20), 0xffff) << "outer IPv4 checksum must verify";
    EXPECT_TRUE(rte_be_to_cpu_16(outer_ip()->fragment_offset) & RTE_IPV4_HDR_DF_FLAG);
    EXPECT_EQ(rte_be_to_cpu_16(outer_udp()->dst_port), 4789);
    EXPECT_EQ(rte_be_to_cpu_16(outer_udp()->src_port), 50001);
    EXPECT_EQ(rte_be_to_cpu_16(outer_udp()->dgram_len), 8 + 8 + inner_len);
    const uint8_t* vx = frame + 42;
    EXPECT_EQ(vx[0], 0x08) << "only the I flag";
    EXPECT_EQ((vx[4] << 16) | (vx[5] << 8) | vx[6], 100) << "VNI in bytes 4-6";
    EXPECT_EQ(vx[7], 0);
}

TEST_F(VxlanTest, OuterDscpAndEcnAreCopiedFromInner) {
    build(0xb9);  // DSCP 46 (EF), ECN ECT(1)
    EXPECT_EQ(outer_ip()->type_of_service, 0xb9);
}

TEST_F(VxlanTest, CheckOuterAcceptsWhatWeSend) {
    const uint32_t len = build(0x02);
    const auto result = check_outer(frame, len, ip("198.18.0.2"));
    ASSERT_TRUE(result.ok) << name_of(result.reason);
    EXPECT_EQ(result.view.vni, 100u);
    EXPECT_EQ(result.view.outer_src_ip, ip("198.18.0.1"));
    EXPECT_EQ(result.view.outer_tos, 0x02);
    EXPECT_EQ(result.view.inner_offset, 50u);
    EXPECT_EQ(result.view.inner_len, inner_len);
}

TEST_F(VxlanTest, CheckOuterAcceptsTrailingEthernetPadding) {
    const uint32_t len = build();
    EXPECT_TRUE(check_outer(frame, len + 10, ip("198.18.0.2")).ok);
}

struct corruption {
    const char* what;
    void (*apply)(uint8_t* frame, uint32_t& len);
    drop_reason expected;
};

class VxlanRejects : public VxlanTest, public testing::WithParamInterface<corruption> {};

void refresh_checksum(uint8_t* frame) {
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(frame + 14);
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
}

TEST_P(VxlanRejects, MalformedOuterHeadersWithTheRightReason) {
    uint32_t len = build();
    GetParam().apply(frame, len);
    const auto result = check_outer(frame, len, ip("198.18.0.2"));
    EXPECT_FALSE(result.ok);
    EXPECT_EQ(name_of(result.reason), name_of(GetParam().expected));
}

const corruption corruptions[] = {
    {"truncated", [](uint8_t*, uint32_t& len) { len = 40; }, drop_reason::outer_truncated},
    {"ip_options",
     [](uint8_t* f, uint32_t&) {
         f[14] = 0x46;
         refresh_checksum(f);
     },
     drop_reason::outer_bad_ip_header},
    {"ipv6_version", [](uint8_t* f, uint32_t&) { f[14] = 0x65; }, drop_reason::outer_bad_ip_header},
    {"ip_length_beyond_frame",
     [](uint8_t* f, uint32_t& len) {
         len -= 10;
         (void)f;
     },
     drop_reason::outer_bad_ip_header},
    {"bad_checksum", [](uint8_t* f, uint32_t&) { f[24] ^= 0x55; },
     drop_reason::outer_bad_ip_checksum},
    {"fragment",
     [](uint8_t* f, uint32_t&) {
         f[20] = 0x20;
         refresh_checksum(f);
     },
     drop_reason::outer_fragment},
    {"other_host",
     [](uint8_t* f, uint32_t&) {
         f[33] = 7;
         refresh_checksum(f);
     },
     drop_reason::outer_not_our_ip},
    {"tcp",
     [](uint8_t* f, uint32_t&) {
         f[23] = IPPROTO_TCP;
         refresh_checksum(f);
     },
     drop_reason::outer_not_udp},
    {"geneve_port",
     [](uint8_t* f, uint32_t&) {
         f[36] = 0x17;
         f[37] = 0xc1;
     },
     drop_reason::outer_not_vxlan_port},
    {"udp_length", [](uint8_t* f, uint32_t&) { f[39] += 1; }, drop_reason::outer_bad_udp_length},
    {"no_i_flag", [](uint8_t* f, uint32_t&) { f[42] = 0x00; }, drop_reason::vxlan_bad_flags},
};

INSTANTIATE_TEST_SUITE_P(Corruptions, VxlanRejects, testing::ValuesIn(corruptions),
                         [](const auto& info) { return std::string(info.param.what); });

TEST(VxlanEntropy, SourcePortStaysInDynamicRangeAndFollowsTheFlow) {
    uint8_t frame[128];
    std::set<uint16_t> ports;
    for (uint16_t sport = 1000; sport < 1064; ++sport) {
        test::ipv4_frame_spec spec{test::mac("02:00:00:00:00:01"),
                                   test::mac("02:00:00:00:00:02"),
                                   ip("198.19.1.1"),
                                   ip("198.19.1.2"),
                                   IPPROTO_TCP,
                                   sport,
                                   80};
        const uint32_t len = test::write_ipv4_frame(frame, spec);
        const auto* iph = reinterpret_cast<const rte_ipv4_hdr*>(frame + 14);
        const uint16_t port = flow_entropy_port(iph, len - 14);
        EXPECT_GE(port, 49152);
        EXPECT_EQ(port, flow_entropy_port(iph, len - 14)) << "same flow, same port";
        ports.insert(port);
    }
    EXPECT_GT(ports.size(), 48u) << "64 flows should spread over many ports";
}

TEST(Rfc6040, DecapsulationKeepsTheInnerMarkAddsCeAndDropsCeOnNotEct) {
    constexpr uint8_t not_ect = 0, ect1 = 1, ect0 = 2, ce = 3;
    // Outer not CE: inner unchanged.
    for (uint8_t inner : {not_ect, ect1, ect0, ce}) {
        for (uint8_t outer : {not_ect, ect1, ect0}) {
            EXPECT_EQ(decapsulated_ecn(outer, inner), inner);
        }
    }
    EXPECT_EQ(decapsulated_ecn(ce, ect0), ce);
    EXPECT_EQ(decapsulated_ecn(ce, ect1), ce);
    EXPECT_EQ(decapsulated_ecn(ce, ce), ce);
    EXPECT_EQ(decapsulated_ecn(ce, not_ect), -1) << "CE on Not-ECT must be dropped";
}

TEST(Rfc6040, SettingEcnKeepsTheChecksumValid) {
    uint8_t frame[128];
    test::ipv4_frame_spec spec{test::mac("02:00:00:00:00:01"), test::mac("02:00:00:00:00:02"),
                               ip("198.19.1.1"), ip("198.19.1.2")};
    spec.tos = 0xb8 | 0x02;
    test::write_ipv4_frame(frame, spec);
    auto* iph = reinterpret_cast<rte_ipv4_hdr*>(frame + 14);
    set_ipv4_ecn(iph, 3);
    EXPECT_EQ(iph->type_of_service, 0xbb) << "DSCP kept";
    EXPECT_EQ(rte_raw_cksum(iph, 20), 0xffff);
}

}  // namespace
}  // namespace jakiro::overlay
