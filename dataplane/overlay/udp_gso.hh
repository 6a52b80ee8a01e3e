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

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>

namespace jakiro::overlay {

// Outer Ethernet + IPv4 (no options) + UDP: what a super-datagram carries once.
constexpr uint32_t gso_outer_bytes = 14 + 20 + 8;  // 42
// The IPv4 total length is 16 bits: a datagram holds at most this many chunk bytes.
constexpr uint32_t max_gso_chunk_bytes = UINT16_MAX - 20 - 8;
// A received super-datagram of more chunks than this is refused (what we send has at most
// overlay::max_segments; the kernel's UDP_MAX_SEGMENTS is larger).
constexpr uint16_t max_gso_chunks = 64;

// Joins `frames` (`n` VXLAN frames cut from one super-frame by segment_superframe(tunnelled),
// equal sizes but the last) into as few UDP GSO super-datagrams as IPv4's length allows and
// writes them to `out` (room for `n`): each is an mbuf chain marked RTE_MBUF_F_TX_UDP_SEG with
// tso_segsz = chunk bytes and l2/l3/l4 lengths of the outer headers; a datagram of one chunk
// stays an ordinary frame. Returns how many mbufs are in `out`; `frames` are consumed.
uint16_t join_vxlan_frames(rte_mbuf** frames, uint16_t n, rte_mbuf** out);

// Whether VXLAN frames `a` and `b` (single mbufs, outer headers as encapsulation writes them)
// may travel in one super-datagram: the same outer Ethernet header, the same IPv4 header but
// for its length, id and checksum (no options), the same UDP ports. The kernel gives every
// segment the first one's headers, so nothing else may differ.
bool same_outer_flow(const rte_mbuf* a, const rte_mbuf* b);

// Frames sent one at a time (the RNIC's packets: requests, READ responses, ACKs) gathered into
// super-datagrams on their way to a vnet uplink. add() keeps consecutive frames of one outer
// flow whose chunks join_vxlan_frames can carry together (equal sizes, at most one shorter one
// last, within IPv4's length and max_gso_chunks); a frame that cannot join hands the run on
// first, joined, to `send(mbuf)`, and flush() hands on the rest (at the end of each burst, so
// no frame waits for the next). Order is kept.
class datagram_run {
  public:
    datagram_run() = default;
    datagram_run(const datagram_run&) = delete;
    datagram_run& operator=(const datagram_run&) = delete;
    ~datagram_run() { rte_pktmbuf_free_bulk(_frames, _count); }

    template <typename Send>
    void add(rte_mbuf* m, Send&& send) {
        if (m->nb_segs != 1 || rte_pktmbuf_pkt_len(m) <= gso_outer_bytes) {
            flush(send);  // not a frame a datagram carries: on its own, in order
            send(m);
            return;
        }
        if (_count > 0 && !joins(m)) {
            flush(send);
        }
        const uint32_t chunk = rte_pktmbuf_pkt_len(m) - gso_outer_bytes;
        _closed = _count > 0 && chunk < _chunk;
        if (_count == 0) {
            _chunk = chunk;
        }
        _frames[_count++] = m;
        _bytes += chunk;
    }
    template <typename Send>
    void flush(Send&& send) {
        if (_count == 0) {
            return;
        }
        rte_mbuf* out[max_gso_chunks];
        const uint16_t n = join_vxlan_frames(_frames, _count, out);
        _count = 0;
        _bytes = 0;
        _closed = false;
        for (uint16_t i = 0; i < n; ++i) {
            send(out[i]);
        }
    }
    uint16_t size() const { return _count; }

  private:
    bool joins(const rte_mbuf* m) const {
        const uint32_t len = rte_pktmbuf_pkt_len(m);
        return !_closed && _count < max_gso_chunks && len - gso_outer_bytes <= _chunk &&
               _bytes + (len - gso_outer_bytes) <= max_gso_chunk_bytes &&
               same_outer_flow(_frames[0], m);
    }

    rte_mbuf* _frames[max_gso_chunks] = {};
    uint16_t _count = 0;
    uint32_t _chunk = 0;  // the first frame's: every other must be as large, or the last
    uint32_t _bytes = 0;
    bool _closed = false;  // a shorter frame ended it
};

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
