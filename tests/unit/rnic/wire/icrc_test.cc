#include "rnic/wire/icrc.hh"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "rnic/wire/headers.hh"
#include "tests/unit/rnic/wire/icrc_vectors.hh"

namespace jakiro::rnic {
namespace {

std::vector<uint8_t> bytes_of(const test::icrc_vector& v) {
    return {v.packet, v.packet + v.len};
}

size_t ihl_of(const std::vector<uint8_t>& pkt) {
    return size_t{pkt[0] & 0x0Fu} * 4;
}

TEST(Icrc, MatchesScapyVectors) {
    for (const auto& v : test::icrc_vectors) {
        SCOPED_TRACE(v.name);
        EXPECT_EQ(compute_icrc(v.packet, v.len - 4), v.icrc);
        EXPECT_EQ(compute_icrc_slice8(v.packet, v.len - 4), v.icrc);
        EXPECT_TRUE(verify_icrc(v.packet, v.len));
        EXPECT_EQ(load_icrc(v.packet + v.len - 4), v.icrc);
        uint8_t stored[4];
        store_icrc(stored, v.icrc);
        EXPECT_TRUE(std::equal(stored, stored + 4, v.packet + v.len - 4));  // LSB first
    }
}

TEST(Icrc, LeavesThePacketUntouched) {
    const auto& v = test::icrc_vectors[1];
    auto pkt = bytes_of(v);
    const auto before = pkt;
    EXPECT_TRUE(verify_icrc(pkt.data(), pkt.size()));
    EXPECT_EQ(pkt, before);
}

TEST(Icrc, IgnoresTheVariantFields) {
    for (const auto& v : test::icrc_vectors) {
        SCOPED_TRACE(v.name);
        auto pkt = bytes_of(v);
        const size_t ihl = ihl_of(pkt);
        pkt[1] ^= 0x03;     // ECN, as the overlay's RFC 6040 handling may rewrite it
        pkt[1] ^= 0xFC;     // DSCP
        pkt[8] -= 1;        // TTL
        pkt[10] ^= 0x5A;    // IPv4 checksum
        pkt[ihl + 6] ^= 1;  // UDP checksum
        pkt[ihl + 7] ^= 1;
        pkt[ihl + 8 + 4] = 0xC0;  // FECN/BECN/reserved
        EXPECT_TRUE(verify_icrc(pkt.data(), pkt.size()));
    }
}

TEST(Icrc, CatchesAnyChangeToInvariantBytes) {
    const auto& v = test::icrc_vectors[4];  // IPv4 options, DETH, ImmDt, payload
    const auto pristine = bytes_of(v);
    const size_t ihl = ihl_of(pristine);
    const std::vector<size_t> variant = {1, 8, 10, 11, ihl + 6, ihl + 7, ihl + 8 + 4};
    for (size_t i = 0; i < pristine.size(); ++i) {
        if (std::find(variant.begin(), variant.end(), i) != variant.end()) {
            continue;
        }
        auto pkt = pristine;
        pkt[i] ^= 0x01;
        EXPECT_FALSE(verify_icrc(pkt.data(), pkt.size())) << "byte " << i;
    }
}

TEST(Icrc, SplitBuffersGiveTheSameCrc) {
    for (const auto& v : test::icrc_vectors) {
        SCOPED_TRACE(v.name);
        const auto pkt = bytes_of(v);
        const size_t covered = pkt.size() - 4;
        const size_t first = ihl_of(pkt) + 8 + 12;
        for (size_t cut = first; cut <= covered; ++cut) {
            const std::span<const uint8_t> head(pkt.data(), cut);
            const std::span<const uint8_t> rest(pkt.data() + cut, covered - cut);
            ASSERT_EQ(compute_icrc(head, rest), v.icrc) << "cut " << cut;
        }
    }
}

TEST(Icrc, RejectsWhatIsNotIpv4UdpBth) {
    auto pkt = bytes_of(test::icrc_vectors[0]);
    EXPECT_FALSE(compute_icrc(pkt.data(), 39).has_value());  // shorter than IPv4+UDP+BTH
    EXPECT_TRUE(compute_icrc(pkt.data(), 40).has_value());
    EXPECT_FALSE(verify_icrc(pkt.data(), 3));
    auto v6 = pkt;
    v6[0] = 0x65;
    EXPECT_FALSE(compute_icrc(v6.data(), v6.size() - 4).has_value());
    auto short_ihl = pkt;
    short_ihl[0] = 0x44;
    EXPECT_FALSE(compute_icrc(short_ihl.data(), short_ihl.size() - 4).has_value());
    auto long_ihl = pkt;
    long_ihl[0] = 0x4F;  // 60-byte IPv4 header: the packet is too short for it
    EXPECT_FALSE(compute_icrc(long_ihl.data(), long_ihl.size() - 4).has_value());
    EXPECT_FALSE(compute_icrc(std::span<const uint8_t>(pkt.data(), 39), {}).has_value());
}

TEST(Icrc, MatchesScapyVectorsOverIpv6) {
    for (const auto& v : test::icrc_vectors_ipv6) {
        SCOPED_TRACE(v.name);
        EXPECT_EQ(compute_icrc(v.packet, v.len - 4), v.icrc);
        EXPECT_EQ(compute_icrc_slice8(v.packet, v.len - 4), v.icrc);
        EXPECT_TRUE(verify_icrc(v.packet, v.len));
    }
}

TEST(Icrc, IgnoresTrafficClassFlowLabelAndHopLimitOverIpv6) {
    for (const auto& v : test::icrc_vectors_ipv6) {
        SCOPED_TRACE(v.name);
        auto pkt = bytes_of(v);
        pkt[0] ^= 0x0F;  // traffic class, high nibble
        pkt[1] ^= 0xF0;  // traffic class, low nibble (ECN, as the overlay may rewrite it)
        pkt[1] ^= 0x0F;  // flow label
        pkt[2] ^= 0xA5;
        pkt[3] ^= 0x5A;
        pkt[7] -= 1;       // hop limit
        pkt[40 + 6] ^= 1;  // UDP checksum
        pkt[40 + 7] ^= 1;
        pkt[40 + 8 + 4] = 0xC0;  // FECN/BECN/reserved
        EXPECT_TRUE(verify_icrc(pkt.data(), pkt.size()));
    }
}

TEST(Icrc, CatchesAnyChangeToInvariantBytesOverIpv6) {
    const auto& v = test::icrc_vectors_ipv6[4];  // DETH, ImmDt, payload
    const auto pristine = bytes_of(v);
    const std::vector<size_t> variant = {1, 2, 3, 7, 40 + 6, 40 + 7, 40 + 8 + 4};
    for (size_t i = 0; i < pristine.size(); ++i) {
        if (std::find(variant.begin(), variant.end(), i) != variant.end()) {
            continue;
        }
        auto pkt = pristine;
        // Byte 0 holds the version (checked) and the top of the traffic class (masked): its
        // version bits are the invariant part.
        pkt[i] ^= i == 0 ? 0x10 : 0x01;
        EXPECT_FALSE(verify_icrc(pkt.data(), pkt.size())) << "byte " << i;
    }
}

TEST(Icrc, SplitBuffersGiveTheSameCrcOverIpv6) {
    for (const auto& v : test::icrc_vectors_ipv6) {
        SCOPED_TRACE(v.name);
        const auto pkt = bytes_of(v);
        const size_t covered = pkt.size() - 4;
        for (size_t cut = 40 + 8 + 12; cut <= covered; ++cut) {
            const std::span<const uint8_t> head(pkt.data(), cut);
            const std::span<const uint8_t> rest(pkt.data() + cut, covered - cut);
            ASSERT_EQ(compute_icrc(head, rest), v.icrc) << "cut " << cut;
        }
    }
}

// RoCEv2 puts UDP right after the IPv6 header; a chain of extension headers is not RoCE.
TEST(Icrc, RejectsIpv6WithExtensionHeadersOrTooShort) {
    auto pkt = bytes_of(test::icrc_vectors_ipv6[0]);
    EXPECT_FALSE(compute_icrc(pkt.data(), 59).has_value());  // shorter than IPv6+UDP+BTH
    EXPECT_TRUE(compute_icrc(pkt.data(), 60).has_value());
    auto hop_by_hop = pkt;
    hop_by_hop[6] = 0;  // next header: Hop-by-Hop Options
    EXPECT_FALSE(compute_icrc(hop_by_hop.data(), hop_by_hop.size() - 4).has_value());
    EXPECT_FALSE(compute_icrc_slice8(hop_by_hop.data(), hop_by_hop.size() - 4).has_value());
    auto fragment = pkt;
    fragment[6] = 44;  // next header: Fragment
    EXPECT_FALSE(verify_icrc(fragment.data(), fragment.size()));
}

TEST(Icrc, IpsecMbPathAgreesWithSlice8OnRandomIpv6Packets) {
    std::mt19937 rng(23);
    std::vector<uint8_t> pkt(40 + 8 + 12 + 9000);
    for (int i = 0; i < 2000; ++i) {
        for (auto& b : pkt) {
            b = static_cast<uint8_t>(rng());
        }
        pkt[0] = static_cast<uint8_t>(0x60 | (pkt[0] & 0x0F));
        pkt[6] = 17;
        const size_t len = 40 + 8 + 12 + rng() % 9000;
        ASSERT_EQ(compute_icrc(pkt.data(), len), compute_icrc_slice8(pkt.data(), len)) << len;
    }
}

TEST(Icrc, IpsecMbPathAgreesWithSlice8OnRandomPackets) {
    std::mt19937 rng(17);
    std::vector<uint8_t> pkt(60 + 8 + 12 + 9000);
    for (int i = 0; i < 2000; ++i) {
        for (auto& b : pkt) {
            b = static_cast<uint8_t>(rng());
        }
        const size_t ihl = 20 + 4 * (rng() % 11);
        pkt[0] = static_cast<uint8_t>(0x40 | (ihl / 4));
        const size_t len = ihl + 8 + 12 + rng() % 9000;
        ASSERT_EQ(compute_icrc(pkt.data(), len), compute_icrc_slice8(pkt.data(), len)) << len;
    }
}

}  // namespace
}  // namespace jakiro::rnic
