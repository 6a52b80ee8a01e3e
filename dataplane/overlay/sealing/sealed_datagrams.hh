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
// Pure mbuf logic: one pass over the burst, no allocation but the sealed datagrams' mbufs.

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>

#include "dataplane/overlay/sealing/gcm_burst.hh"
#include "dataplane/overlay/sealing/peer_sa.hh"

namespace jakiro::overlay::sealing {

// Joins, in place, the runs of `pkts` (the first `n`, as seal_burst left them) that may cross
// as one super-datagram; every other frame (ARP, plaintext VXLAN, a chain, a frame with
// offloads asked for) stays as it is and in its place. At most overlay::max_gso_chunks frames
// per datagram (what a receiving Jakiro host cuts). Returns how many of `pkts` are left.
uint16_t join_sealed_frames(rte_mbuf** pkts, uint16_t n);

// A plaintext VXLAN UDP GSO super-datagram (overlay/udp_gso.hh: one QP's RoCE packets as
// overlay::datagram_builder wrote them) to a host that seals: every chunk becomes one ESP
// frame, sealed out of place straight into a super-datagram of ESP frames in a 64 KB mbuf of
// `pool` (the encryption's write is the only copy; no mbuf per frame). How many such
// datagrams `m` becomes (IPv4's length and the mbuf bound each); 0 when it is not one this
// seals (a chain, no chunk size).
uint16_t sealed_datagram_count(const rte_mbuf* m, rte_mempool* pool);
// Seals `m` into `count` (sealed_datagram_count) datagrams in `out` for `peer` under its
// current sending key, and frees `m`. False when `pool` has not `count` mbufs: then nothing was
// sealed and `m` is the caller's still.
bool seal_datagram(rte_mbuf* m, uint16_t count, peer_sa& peer, gcm_burst& gcm, rte_mempool* pool,
                   rte_mbuf** out);

}  // namespace jakiro::overlay::sealing
