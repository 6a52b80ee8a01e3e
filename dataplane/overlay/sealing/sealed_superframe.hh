#pragma once
// A tenant's TCP super-frame to a host that seals is cut and sealed in one pass: each wire
// frame is written once, straight into its own mbuf: the outer headers copied, the inner
// headers copied and completed (lengths, IPv4 id, sequence number, flags, checksums), and the
// frame's slice of the super-frame's payload encrypted from where it lies into the bytes behind
// them (gcm_burst::seal_gathered). No indirect mbufs, no copy of a cut frame into a writable
// buffer before it is sealed: the encryption's read of the payload is the cut's only one.
//
// The frames are those overlay::segment_superframe cuts (the same headers, ids counted up from
// the super-frame's, FIN and PSH on the last frame only), each then sealed as
// uplink_sealing seals a frame (esp_format.hh).
//
// Uplink worker only (the peer's sending SA and the job manager are its alone). No allocation
// beyond the frames' mbufs.

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>

#include "dataplane/overlay/sealing/gcm_burst.hh"
#include "dataplane/overlay/sealing/peer_sa.hh"

namespace jakiro::overlay::sealing {

// Whether `m` is marked a VXLAN TCP super-frame (overlay::mark_vxlan_superframe).
bool is_vxlan_superframe(const rte_mbuf* m);

// How many frames VXLAN super-frame `m` is cut into; 0 when it is not one this file cuts: a
// header beyond its first segment, no segment size, more than overlay::max_segments frames,
// a sealed frame larger than an mbuf of `pool`, a chain of more than max_chain segments.
uint16_t superframe_cut_count(const rte_mbuf* m, rte_mempool* pool);

// At most this many segments in a super-frame's chain (a vnet face's is two: the headers and
// the first bytes, then the rest): a frame's payload is at most this many pieces.
constexpr uint16_t max_chain = 8;

// Cuts super-frame `m` (superframe_cut_count gave `count`) into `count` ESP frames for `peer`
// under its current sending key, in `out`, and frees `m`. False when `pool` has not `count`
// mbufs: then nothing was sealed and `m` is the caller's still.
bool seal_superframe(rte_mbuf* m, uint16_t count, peer_sa& peer, gcm_burst& gcm, rte_mempool* pool,
                     rte_mbuf** out);

// The same frames written straight into UDP GSO super-datagrams (sealed_datagrams.hh) for an
// uplink that takes them: the outer headers once, then each frame's ESP payload, in as many
// mbufs of `pool` (64 KB) as superframe_datagram_count says (0: they do not fit one). One
// contiguous buffer per datagram, so its write into the kernel is one piece, not a piece per
// frame, and no mbuf per frame. A datagram of one frame is an ordinary frame. False when `pool`
// has not `datagrams` mbufs: then nothing was sealed and `m` is the caller's still.
uint16_t superframe_datagram_count(const rte_mbuf* m, uint16_t count, rte_mempool* pool);
bool seal_superframe_datagrams(rte_mbuf* m, uint16_t count, uint16_t datagrams, peer_sa& peer,
                               gcm_burst& gcm, rte_mempool* pool, rte_mbuf** out);

}  // namespace jakiro::overlay::sealing
