#pragma once
// Sealed frames leave as UDP GSO super-datagrams: consecutive sealed frames to one host with
// the same outer headers (the frames cut from one tenant TCP super-frame, the packets of one
// RDMA message) and the same size (the last may be shorter) are chained into ONE datagram the
// kernel cuts every `chunk` bytes (overlay/udp_gso.hh). Each chunk is one whole ESP payload
// with its own header, IV and ICV, so what reaches the wire is exactly the frames that were
// sealed: the kernel only copies the outer headers, counts the IPv4 ids up and fills in the
// UDP checksums, none of which the AAD covers. One tap write and one skb through the bridge
// per run instead of one per frame; the receiving face cuts the datagram back into frames
// (vnet_face/uplink_frames.hh) before anything opens them.
//
// Pure mbuf logic: no allocation, one pass over the burst.

#include <rte_mbuf.h>

#include <cstdint>

namespace jakiro::overlay::sealing {

// Joins, in place, the runs of `pkts` (the first `n`, as seal_burst left them) that may cross
// as one super-datagram; every other frame (ARP, plaintext VXLAN, a chain, a frame with
// offloads asked for) stays as it is and in its place. At most overlay::max_gso_chunks frames
// per datagram (what a receiving Jakiro host cuts). Returns how many of `pkts` are left.
uint16_t join_sealed_frames(rte_mbuf** pkts, uint16_t n);

}  // namespace jakiro::overlay::sealing
