#pragma once
// What the UDP GSO tests share: pools, RoCE-like VXLAN frames, and what the kernel makes of a
// super-datagram (its segments), to compare with the frames that went in.

#include <gtest/gtest.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <algorithm>
#include <vector>

#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vxlan.hh"
#include "tests/unit/frames.hh"

namespace jakiro::overlay::gso_test {

using test::bytes_of;
using test::ip;
using test::mac;

inline const tunnel_endpoints h1_to_h2{mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"),
                                       ip("198.18.0.1"), ip("198.18.0.2")};

inline rte_mempool* big_pool() {
    static rte_mempool* pool =
        rte_pktmbuf_pool_create("gso_test_big", 31, 0, 0, UINT16_MAX, rte_socket_id());
    return pool;
}
inline rte_mempool* small_pool() {
    static rte_mempool* pool = rte_pktmbuf_pool_create("gso_test_small", 4095, 0, 0,
                                                       RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
    return pool;
}

// A test that frees, at its end, the mbufs it put in `owned`.
struct owning_mbufs : testing::Test {
    std::vector<rte_mbuf*> owned;
    void TearDown() override {
        for (rte_mbuf* m : owned) {
            rte_pktmbuf_free(m);
        }
        owned.clear();
    }
};

// What the kernel makes of a super-datagram where it must segment it (__udp_gso_segment):
// the outer headers in front of every chunk, lengths per segment.
inline std::vector<std::vector<uint8_t>> kernel_segments(const std::vector<uint8_t>& datagram,
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
inline uint16_t gso_size_of(const rte_mbuf* m) {
    return (m->ol_flags & RTE_MBUF_F_TX_UDP_SEG) ? m->tso_segsz : 65535;
}

// A segment the kernel cut is frame `index` as it was before joining, but for what the kernel
// owns: outer IPv4 ids and checksums, which it counts up and fills in.
inline void expect_same_frame(std::vector<uint8_t> seg, std::vector<uint8_t> want, size_t index) {
    for (auto* v : {&seg, &want}) {
        auto* h = reinterpret_cast<rte_ipv4_hdr*>(v->data() + 14);
        h->packet_id = 0;
        h->hdr_checksum = 0;
        reinterpret_cast<rte_udp_hdr*>(v->data() + 34)->dgram_cksum = 0;
    }
    EXPECT_EQ(seg, want) << "frame " << index;
}

}  // namespace jakiro::overlay::gso_test
