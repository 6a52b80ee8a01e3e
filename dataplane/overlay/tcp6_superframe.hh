#pragma once
// TCP/IPv6 super-frames: what rte_gso and rte_gro do for TCP/IPv4 (superframe.hh), which DPDK
// 22.11 does not do for IPv6. A tenant's TCPv6 super-frame (RTE_MBUF_F_TX_TCP_SEG |
// RTE_MBUF_F_TX_IPV6, vnet_face/vnet_header.hh) is cut here into frames, plain or already
// VXLAN-encapsulated, and the fabric's VXLAN/TCPv6 frames of one flow are merged here into one
// chain again. superframe.hh's segment_superframe and merge_burst call these; nothing else
// needs to.
//
// Cutting copies: each frame is one mbuf holding its headers and its share of the payload, so
// its TCP checksum (over the IPv6 pseudo-header, RFC 8200 §8.1) is summed over contiguous
// bytes. Merging chains the frames without copying, as rte_gro does.
//
// Only the fixed IPv6 header then TCP: the pipeline forwards no IPv6 extension header
// (pipeline/egress.cc), so TCP is always at `ip + 1`. Worker side; no allocation beyond the
// pool's mbufs, no locks.

#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>

namespace jakiro::overlay {

// Whether `m` is a TCPv6 super-frame (or a frame cut from one): RTE_MBUF_F_TX_IPV6 set.
inline bool is_ipv6_superframe(const rte_mbuf* m) {
    return (m->ol_flags & RTE_MBUF_F_TX_IPV6) != 0;
}

// Cuts TCPv6 super-frame `m` as segment_superframe does (same arguments and result): each
// frame carries at most `m->tso_segsz` payload bytes and at most `max_frame` bytes in all,
// sequence numbers advanced, FIN and PSH on the last frame only, CWR on the first only, the
// IPv6 payload length and the TCP checksum complete; `tunnelled` frames get their outer
// IPv4/UDP lengths and IPv4 checksum too (UDP checksum 0, RFC 7348). `m` is consumed.
int segment_tcp6_superframe(rte_mbuf* m, bool tunnelled, uint16_t max_frame, rte_mempool* pool,
                            rte_mbuf** out, uint16_t max_out);

// Merges runs of consecutive VXLAN/IPv4 frames in `pkts` that carry consecutive TCPv6
// segments of one flow (same outer and inner headers but the lengths, sequence numbers that
// follow on, ACK alone or ACK|PSH on the run's last, no segment longer than the first) into
// one chain each: outer IPv4/UDP and inner IPv6 lengths right, RTE_MBUF_F_RX_LRO with the
// segment size in tso_segsz, as a tap uplink's ready-made super-frame arrives. Everything else
// stays as it is and where it is. Returns how many frames are left.
uint16_t merge_tcp6_runs(rte_mbuf** pkts, uint16_t count);

// The TCP header length of TCPv6 packet `ip`.
inline uint16_t tcp6_header_len(const rte_ipv6_hdr* ip) {
    return static_cast<uint16_t>((reinterpret_cast<const uint8_t*>(ip + 1)[12] >> 4) * 4);
}

}  // namespace jakiro::overlay
