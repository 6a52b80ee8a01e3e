#pragma once
// VXLAN super-datagrams between Jakiro hosts: the frames rte_gso cut from one tenant TCP
// super-frame leave as ONE UDP GSO datagram (virtio-net GSO_UDP_L4) instead of one af_packet
// send each, and a datagram that arrives whole is cut back into its frames for rte_gro.
//
// The datagram is the outer Ethernet/IPv4/UDP header once, then N chunks of `gso_size` bytes
// (the last may be shorter), each chunk an RFC 7348 VXLAN frame without its outer headers:
// [VXLAN | inner Ethernet | inner IPv4 | inner TCP | payload], inner checksums complete. The
// kernel segments it only where it must (a NIC or an interface without tx-udp-segmentation, a
// kernel VTEP's UDP socket): every segment is the frame rte_gso made, with outer IPv4 ids
// counted up and the outer UDP checksum filled in (the kernel refuses GSO_UDP_L4 without
// NEEDS_CSUM, so the super-datagram carries the pseudo-header sum, as CHECKSUM_PARTIAL wants).
// Single frames (ARP, RoCE, a super-frame that fits one frame) keep UDP checksum 0.
//
// Pure mbuf logic: no socket, no EAL state beyond the pool handed in.

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_udp.h>

#include <cstdint>

namespace jakiro::overlay {

// Outer Ethernet + IPv4 (no options) + UDP: what a super-datagram carries once.
constexpr uint32_t gso_outer_bytes = 14 + 20 + 8;  // 42
// The IPv4 total length is 16 bits: a datagram holds at most this many chunk bytes.
constexpr uint32_t max_gso_chunk_bytes = UINT16_MAX - 20 - 8;
// A received super-datagram of more chunks than this is refused (what we send has at most
// overlay::max_segments; the kernel's UDP_MAX_SEGMENTS is larger).
constexpr uint16_t max_gso_chunks = 64;

// The outer Ethernet/IPv4/UDP headers of a frame in its first segment: what a super-datagram
// carries once for all its chunks.
struct outer_headers {
    const rte_ether_hdr* eth;
    const rte_ipv4_hdr* ip;
    const rte_udp_hdr* udp;
};

// `m`'s outer headers when its first segment starts with Ethernet/IPv4 (no options)/UDP.
bool parse_outer_headers(const rte_mbuf* m, outer_headers& o);

// Whether `m` may be a chunk of a super-datagram, and its outer headers if so: one buffer of
// at least `min_len` bytes, no offload asked for, Ethernet/IPv4 without options or fragments/
// UDP to `udp_port`, and an IPv4 length that says where it ends.
bool joinable_frame(const rte_mbuf* m, uint16_t udp_port, uint32_t min_len, outer_headers& o);

// Whether the kernel, copying `head`'s outer headers onto every segment, makes `o`'s frame of
// them: the same Ethernet header, addresses, TTL, TOS, DF and source port. The IPv4 id,
// lengths and checksums it writes itself.
bool same_outer_headers(const outer_headers& head, const outer_headers& o);

// How many chunks of `chunk` bytes one super-datagram holds in an mbuf of `pool`: IPv4's
// length, max_gso_chunks and the mbuf's room bound it (0: not even one fits).
inline uint32_t chunks_per_datagram(uint32_t chunk, rte_mempool* pool) {
    const uint32_t room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
    if (chunk == 0 || room < gso_outer_bytes + chunk) {
        return 0;
    }
    const uint32_t by_length = max_gso_chunk_bytes / chunk;
    const uint32_t by_room = (room - gso_outer_bytes) / chunk;
    const uint32_t fit = by_length < by_room ? by_length : by_room;
    return fit < max_gso_chunks ? fit : max_gso_chunks;
}

// Joins `frames` (`n` VXLAN frames cut from one super-frame by segment_superframe(tunnelled),
// equal sizes but the last) into as few UDP GSO super-datagrams as IPv4's length allows and
// writes them to `out` (room for `n`): each is an mbuf chain marked RTE_MBUF_F_TX_UDP_SEG with
// tso_segsz = chunk bytes and l2/l3/l4 lengths of the outer headers; a datagram of one chunk
// stays an ordinary frame. Returns how many mbufs are in `out`; `frames` are consumed.
uint16_t join_vxlan_frames(rte_mbuf** frames, uint16_t n, rte_mbuf** out);

// The outer IPv4 and UDP lengths of the frame or super-datagram of `len` bytes at `frame`
// (outer Ethernet first), its IPv4 checksum, and its UDP checksum: 0 for an ordinary frame (as
// RFC 7348 sends it), the pseudo-header sum the kernel completes (CHECKSUM_PARTIAL) for a
// super-datagram.
void set_outer_lengths(uint8_t* frame, uint32_t len, bool super_datagram);
// Marks `m` a UDP GSO super-datagram the kernel cuts every `chunk` bytes behind its outer
// headers (RTE_MBUF_F_TX_UDP_SEG, tso_segsz, the outer l2/l3/l4 lengths).
void mark_udp_gso(rte_mbuf* m, uint32_t chunk);

// The bytes `m` (a super-datagram or an ordinary frame) puts on the wire once segmented: its
// outer headers once per chunk. What QoS charges.
uint32_t wire_bytes(const rte_mbuf* m);

// Why a received super-datagram was not cut.
enum class split_verdict : uint8_t {
    ok,
    bad_headers,        // not Ethernet/IPv4 (no options)/UDP, or lengths that cannot be
    bad_gso_size,       // 0, or a chunk larger than an mbuf of the pool holds
    too_many_segments,  // more than max_gso_chunks
    no_mbufs,           // the pool ran dry
};

// Cuts the received super-datagram of `len` bytes (outer Ethernet at the start) into ordinary
// VXLAN frames of `gso_size`-byte chunks, each with the outer headers, its own outer IPv4
// length and checksum, UDP length and UDP checksum 0. Its first `head->data_len` bytes are in
// `head` (which must hold the outer headers and the whole first chunk), the rest in `tail`.
// `head` becomes the first frame; the others are copied into mbufs of `pool`. On success the
// frames are in `out` (room for max_gso_chunks) and `count` says how many; otherwise `head`
// is freed too.
split_verdict split_udp_gso(rte_mbuf* head, const uint8_t* tail, uint32_t len, uint16_t gso_size,
                            rte_mempool* pool, rte_mbuf** out, uint16_t& count);

}  // namespace jakiro::overlay
