#pragma once
// What the uplink face makes of one message read from the fabric with its vnet header: an
// ordinary frame (ARP, RoCE, a kernel VTEP's VXLAN) goes on as it is, with a partial checksum
// completed; a UDP GSO super-datagram from another Jakiro host (overlay/udp_gso.hh) is cut
// into its VXLAN frames, which rte_gro then merges back into TCP super-frames. Everything off
// the wire is hostile: a header the kernel should never give, or one that does not describe
// the bytes, is a counted drop.
//
// Pure function of the header, the bytes and a pool; the face (vnet_face.cc) owns the socket.

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>
#include <optional>

#include "dataplane/drops.hh"
#include "dataplane/vnet_face/tap_header.hh"
#include "dataplane/vnet_face/vnet_header.hh"

namespace jakiro::vnet_face {

// The message of `len` bytes whose first `head->data_len` are in `head` and the rest in `tail`
// (null when there is none), with header `hdr`. On success its frames are in `out` (room for
// overlay::max_gso_chunks) and `count` says how many; otherwise the reason it was dropped
// (`head` is freed).
std::optional<drop_reason> take_uplink_message(const virtio_net_hdr& hdr, rte_mbuf* head,
                                               const uint8_t* tail, uint32_t len, rte_mempool* pool,
                                               rte_mbuf** out, uint16_t& count);

// A message from a tap uplink whose header says UDP-tunnel GSO (tap_header.hh): one VXLAN
// frame carrying a whole TCP super-frame, `m` (a chain, every header in its first segment).
// Checks the header against the bytes: outer Ethernet/IPv4 without options, UDP, VXLAN, inner
// Ethernet/IPv4/TCP or Ethernet/IPv6/TCP (GSO_TCPV6, TCP right after the fixed header), the
// offsets and the partial checksum where those headers put them, a
// segment size that is not 0 and at most overlay::max_segments segments. Then `m` is marked
// as a frame that arrived merged (RTE_MBUF_F_RX_LRO, tso_segsz = the segment size) and the
// outer checks and the ingress pipeline take it like one rte_gro merged. Otherwise the reason
// it was dropped (`m` is freed).
std::optional<drop_reason> take_vxlan_superframe(const tap_header& hdr, rte_mbuf* m);

}  // namespace jakiro::vnet_face
