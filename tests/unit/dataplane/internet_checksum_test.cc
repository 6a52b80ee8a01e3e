// The 8-bytes-per-step Internet checksum gives DPDK's answer for every length, alignment and
// mbuf chain, odd segments included.

#include "dataplane/internet_checksum.hh"

#include <gtest/gtest.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_tcp.h>

#include <cstring>
#include <random>
#include <vector>

namespace jakiro {
namespace {

std::vector<uint8_t> random_bytes(std::size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> out(n);
    for (auto& b : out) {
        b = static_cast<uint8_t>(rng());
    }
    return out;
}

rte_mempool* pool() {
    static rte_mempool* p =
        rte_pktmbuf_pool_create("cksum_test", 255, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    return p;
}

TEST(InternetChecksum, TheSumOfAnyLengthAtAnyAlignmentFoldsToDpdks) {
    const auto bytes = random_bytes(4096 + 8, 7);
    for (std::size_t align = 0; align < 8; ++align) {
        for (std::size_t len = 0; len <= 300; ++len) {
            EXPECT_EQ(fold_sum(ones_sum(bytes.data() + align, len)),
                      rte_raw_cksum(bytes.data() + align, len))
                << "len " << len << " align " << align;
        }
        EXPECT_EQ(fold_sum(ones_sum(bytes.data() + align, 4096)),
                  rte_raw_cksum(bytes.data() + align, 4096));
    }
}

TEST(InternetChecksum, AllOnesWordsDoNotLoseTheirCarries) {
    const std::vector<uint8_t> ones(65535, 0xff);
    EXPECT_EQ(fold_sum(ones_sum(ones.data(), ones.size())),
              rte_raw_cksum(ones.data(), ones.size()));
}

TEST(InternetChecksum, AChainOfOddSegmentsSumsLikeTheFlatBytes) {
    ASSERT_NE(pool(), nullptr);
    const auto bytes = random_bytes(3000, 11);
    // Segment lengths with odd ones between even ones, as a header mbuf and payload slices give.
    const std::vector<uint16_t> cuts = {53, 1448, 7, 1, 800, 691};
    rte_mbuf* head = nullptr;
    rte_mbuf* tail = nullptr;
    std::size_t at = 0;
    for (const uint16_t n : cuts) {
        rte_mbuf* m = rte_pktmbuf_alloc(pool());
        ASSERT_NE(m, nullptr);
        std::memcpy(rte_pktmbuf_append(m, n), bytes.data() + at, n);
        at += n;
        if (head == nullptr) {
            head = m;
        } else {
            tail->next = m;
            ++head->nb_segs;
            head->pkt_len += n;
        }
        tail = m;
    }
    for (const uint32_t offset : {0u, 1u, 53u, 54u, 1501u, 1502u}) {
        for (const uint32_t len : {0u, 1u, 2u, 1447u, 1500u, static_cast<uint32_t>(at - offset)}) {
            if (offset + len > at) {
                continue;
            }
            // Against the flat bytes: DPDK 22.11's rte_raw_cksum_mbuf truncates a segment's
            // sum before it swaps the bytes of one at an odd offset, and is wrong there.
            EXPECT_EQ(fold_sum(ones_sum_mbuf(head, offset, len)),
                      rte_raw_cksum(bytes.data() + offset, len))
                << "offset " << offset << " len " << len;
        }
    }
    rte_pktmbuf_free(head);
}

TEST(InternetChecksum, ATcpSegmentChecksumsToWhatAReceiverVerifies) {
    ASSERT_NE(pool(), nullptr);
    rte_mbuf* m = rte_pktmbuf_alloc(pool());
    ASSERT_NE(m, nullptr);
    constexpr uint16_t payload = 1001;  // odd: the pad byte is part of the rule
    const uint16_t total = sizeof(rte_ipv4_hdr) + sizeof(rte_tcp_hdr) + payload;
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(rte_pktmbuf_append(m, total));
    std::memset(ip, 0, total);
    ip->version_ihl = RTE_IPV4_VHL_DEF;
    ip->total_length = rte_cpu_to_be_16(total);
    ip->next_proto_id = IPPROTO_TCP;
    ip->src_addr = rte_cpu_to_be_32(0xC6120101);  // 198.18.1.1
    ip->dst_addr = rte_cpu_to_be_32(0xC6130102);
    const auto body = random_bytes(sizeof(rte_tcp_hdr) + payload, 3);
    std::memcpy(ip + 1, body.data(), body.size());
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(ip + 1);
    tcp->cksum = 0;
    tcp->cksum = ipv4_l4_checksum(m, ip, sizeof(rte_ipv4_hdr));
    // Summed with the checksum in place, an intact segment complements to 0.
    EXPECT_EQ(rte_ipv4_udptcp_cksum(ip, tcp), 0) << "a receiver finds the segment intact";
    rte_pktmbuf_free(m);
}

}  // namespace
}  // namespace jakiro
