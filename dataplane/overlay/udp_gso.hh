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

#include <algorithm>
#include <cstdint>
#include <utility>

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
// super-datagrams on their way to an uplink that takes UDP GSO. add() keeps consecutive frames of one outer
// flow whose chunks join_vxlan_frames can carry together (equal sizes, at most one shorter one
// last, within IPv4's length and max_gso_chunks); a frame that cannot join hands the run on
// first, joined, to `send(mbuf)`, and flush() hands on the rest (at the end of each burst, so
// no frame waits for the next). Order is kept.
//
// Full-MTU RoCE packets differ by their extension headers: a WRITE's first packet carries a
// 16-byte RETH its middle packets do not, a READ response's first and last an AETH. Equal sizes
// only, a 64-packet WRITE would be three datagrams ([first, middle], 60 middles, [middle,
// last]) and every message would end one. So a frame up to max_padding_bytes shorter than the
// run's largest is padded with zeros behind its inner IPv4 packet (Ethernet padding: a
// receiver takes the inner packet's length from its IPv4 header) and the run goes on across
// messages: about one datagram per message. A padded frame is never larger than the run's
// largest real one. take_padding() says how much was added (QoS charges it).
class datagram_run {
  public:
    // The largest extension-header difference between two full-MTU packets of one QP (RETH).
    static constexpr uint32_t max_padding_bytes = 16;

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
        const uint32_t chunk = rte_pktmbuf_pkt_len(m) - gso_outer_bytes;
        const uint32_t reach = chunk + rte_pktmbuf_tailroom(m);
        if (_count > 0 && !joins(m, chunk, reach)) {
            flush(send);
        }
        if (_count == 0) {
            _chunk = _smallest = chunk;
            _reach = reach;
        } else if (chunk > _chunk) {
            _chunk = chunk;  // joins() made sure every frame before can be padded to it
        } else if (_chunk - chunk > max_padding_bytes || reach < _chunk) {
            _closed = true;  // the shorter last chunk
        }
        if (!_closed) {
            _smallest = std::min(_smallest, chunk);
            _reach = std::min(_reach, reach);
        }
        _frames[_count++] = m;
    }
    template <typename Send>
    void flush(Send&& send) {
        if (_count == 0) {
            return;
        }
        if (_count > 1) {
            pad_to_chunk();
        }
        rte_mbuf* out[max_gso_chunks];
        const uint16_t n = join_vxlan_frames(_frames, _count, out);
        _count = 0;
        _closed = false;
        for (uint16_t i = 0; i < n; ++i) {
            send(out[i]);
        }
    }
    uint16_t size() const { return _count; }
    // Zero bytes added behind frames since the last call.
    uint64_t take_padding() { return std::exchange(_padding, 0); }

  private:
    bool joins(const rte_mbuf* m, uint32_t chunk, uint32_t reach) const {
        if (_closed || _count >= max_gso_chunks || !same_outer_flow(_frames[0], m)) {
            return false;
        }
        if (chunk > _chunk) {  // a larger chunk: every frame so far is padded up to it
            return chunk - _smallest <= max_padding_bytes && chunk <= _reach &&
                   (_count + 1u) * chunk <= max_gso_chunk_bytes;
        }
        const bool full = _chunk - chunk <= max_padding_bytes && reach >= _chunk;
        return full ? (_count + 1u) * _chunk <= max_gso_chunk_bytes
                    : _count * _chunk + chunk <= max_gso_chunk_bytes;
    }
    // Every frame but a shorter last one grows to the run's chunk.
    void pad_to_chunk();

    rte_mbuf* _frames[max_gso_chunks] = {};
    uint16_t _count = 0;
    uint32_t _chunk = 0;     // the largest full chunk: the datagram's gso_size
    uint32_t _smallest = 0;  // of the full chunks
    uint32_t _reach = 0;     // the largest size every full frame's mbuf can be padded to
    bool _closed = false;    // a shorter chunk ended the run
    uint64_t _padding = 0;
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
