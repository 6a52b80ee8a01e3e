#pragma once
// TCP super-frames on the overlay: a tenant's 64 KB GSO frame is judged once and cut into
// underlay-MTU VXLAN frames only on the way out (rte_gso), and the fabric's frames of one flow
// are merged again per burst (rte_gro) before they go to a tenant whole.
//
// A super-frame is an mbuf with RTE_MBUF_F_TX_TCP_SEG and tso_segsz (vnet_face/vnet_header.hh
// sets them). Frames merged by GRO carry their segment size in tso_segsz with no offload
// flags, until the ingress pipeline knows where they go.

#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>

namespace jakiro::overlay {

// At most this many wire frames per super-frame: a 64 KB frame cut at a normal MSS is 45-47; a
// tenant asking for more (a tiny gso_size) is refused rather than served with thousands.
constexpr uint16_t max_segments = 64;

// At most this many frames merged into one by merge_burst (rte_gro's burst limit).
constexpr uint16_t max_merged = 128;

// Bytes QoS charges for the inner IPv4 packet `ip` once it is on the underlay: every frame it
// becomes (cut at `mss` payload bytes; 0: it is one frame) with its own headers and 50 bytes
// of VXLAN.
uint32_t charged_wire_bytes(const rte_ipv4_hdr* ip, uint16_t mss);
// The same for the inner IPv6 packet `ip` (a TCPv6 super-frame, tcp6_superframe.hh).
uint32_t charged_wire_bytes(const rte_ipv6_hdr* ip, uint16_t mss);
// How many frames that is.
uint32_t frames_of(const rte_ipv4_hdr* ip, uint16_t mss);
uint32_t frames_of(const rte_ipv6_hdr* ip, uint16_t mss);

// Whether every frame cut from super-frame `m` (inner Ethernet at its start) fits an IPv4 MTU
// of `mtu` and the cut stays within max_segments.
bool superframe_fits(const rte_mbuf* m, uint32_t mtu);

// Cuts super-frame `m` into frames of at most `max_frame` bytes (Ethernet included), each with
// complete IPv4 and TCP checksums. `tunnelled`: `m` is already VXLAN-encapsulated (outer
// headers written by encapsulate(), inner lengths in m's l2/l3/l4 fields), and the outer
// IPv4 headers are completed too; UDP checksums stay 0 (RFC 7348). Returns the number of frames
// in `out`, or -1 when the pool ran dry. `m` itself is consumed either way. A TCPv6
// super-frame (RTE_MBUF_F_TX_IPV6) is cut by segment_tcp6_superframe, the same way.
int segment_superframe(rte_mbuf* m, bool tunnelled, uint16_t max_frame, rte_mempool* pool,
                       rte_mbuf** out, uint16_t max_out);

// Leaves super-frame `m`, already VXLAN-encapsulated by encapsulate(), whole for an uplink
// that cuts it itself (a tap with UDP-tunnel GSO, vnet_face/tap_header.hh): marks it as DPDK
// describes VXLAN TSO (RTE_MBUF_F_TX_TUNNEL_VXLAN | RTE_MBUF_F_TX_TCP_SEG, outer and inner
// header lengths), segment size unchanged. False, and `m` untouched, when its outer IPv4
// length would not fit 16 bits (an inner frame of more than 65 499 bytes): segment_superframe
// cuts that one instead.
bool mark_vxlan_superframe(rte_mbuf* m);

// Merges the VXLAN/IPv4/TCP frames of one flow in `pkts` (at most max_merged) into chains with
// rte_gro and completes them (prepare_for_gro, finish_gro), and runs of VXLAN/IPv6/TCP frames
// with merge_tcp6_runs; returns how many frames are left.
// Frames rte_gro passes by come back untouched; every frame keeps its place in its flow.
uint16_t merge_burst(rte_mbuf** pkts, uint16_t count);

// Sets what rte_gro needs (packet type, header lengths) on an underlay frame that is a
// VXLAN/IPv4/TCP segment rte_gro can merge (flags ACK alone, some payload), and clears
// tso_segsz; others get packet type 0, which GRO passes untouched.
// A frame that arrived whole as a super-frame (RTE_MBUF_F_RX_LRO, its segment size in
// tso_segsz: a tap uplink's) is one of the others: it is merged already.
void prepare_for_gro(rte_mbuf* m);

// After rte_gro: a merged frame (a chain) gets its outer and inner IPv4 lengths, outer UDP
// length and IPv4 checksums right and its segment size in tso_segsz.
void finish_gro(rte_mbuf* m);

}  // namespace jakiro::overlay
