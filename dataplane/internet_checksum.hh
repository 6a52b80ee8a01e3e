#pragma once
// The Internet checksum (RFC 1071) over a frame's bytes, 8 bytes per step. Every frame cut from
// a tenant's super-frame needs its inner TCP checksum over the whole payload (the tenant left it
// partial, and a UDP GSO super-datagram cannot carry a partial inner checksum), and DPDK 22.11's
// rte_raw_cksum adds 2 bytes per step: it was 8 % of all samples of a one-stream TCP run.

#include <rte_ip.h>
#include <rte_mbuf.h>

#include <cstddef>
#include <cstdint>

namespace jakiro {

// The ones' complement sum of `len` bytes, not folded and not complemented: as rte_raw_cksum's
// sum, it can be added to other such sums and folded once (fold_sum).
uint64_t ones_sum(const void* buf, std::size_t len);

uint16_t fold_sum(uint64_t sum);

// The ones' complement sum of `len` bytes from `offset` of a chained mbuf (segments of any
// length, odd ones included); the bytes must be there (the caller checked the packet's length).
uint64_t ones_sum_mbuf(const rte_mbuf* m, uint32_t offset, uint32_t len);

// The TCP/UDP checksum of an IPv4 packet whose L4 header starts at `l4_offset` of `m`, with the
// header's checksum field zero: what rte_ipv4_udptcp_cksum_mbuf returns.
uint16_t ipv4_l4_checksum(const rte_mbuf* m, const rte_ipv4_hdr* ip, uint32_t l4_offset);

}  // namespace jakiro
