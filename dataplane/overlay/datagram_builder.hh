#pragma once
// A UDP GSO super-datagram (udp_gso.hh) written in place: the VXLAN frames of one outer flow laid
// end to end in one 64 KB mbuf, each chunk (VXLAN header + inner frame) at a fixed stride, the
// gso_size the kernel cuts at. The RNIC writes each packet straight into its chunk, so a QP's
// run of packets reaches the uplink as one buffer: no mbuf per packet, no chain, no outer
// headers written and stripped again, and one contiguous copy into the kernel instead of one
// per packet (a 60-piece writev into a tap costs twice a one-piece one here).
//
// Full RoCE packets of one QP differ in their extension headers (a WRITE's first packet
// carries a 16-byte RETH its middles do not): a frame up to max_padding_bytes shorter than the
// stride is zero-padded behind its inner IPv4 packet (Ethernet padding: a receiver takes the
// packet's length from its IPv4 header), so a run goes on across messages. One frame shorter
// than that may end the datagram, as the kernel's last segment may be short.
//
// Worker side: no allocation; the caller owns the mbufs.

#include <rte_mbuf.h>

#include <cstdint>

namespace jakiro::overlay {

class datagram_builder {
  public:
    // The largest extension-header difference between two full packets of one QP (a RETH).
    static constexpr uint32_t max_padding_bytes = 16;

    datagram_builder() = default;
    datagram_builder(const datagram_builder&) = delete;
    datagram_builder& operator=(const datagram_builder&) = delete;
    ~datagram_builder() { rte_pktmbuf_free(_m); }

    // Starts a datagram in `m` (an empty mbuf whose data room holds 64 KB) from `first`, one
    // VXLAN frame with its outer headers in one segment, which is copied (and stays the
    // caller's). The stride starts as `first`'s chunk. False (and nothing started) if `m` cannot
    // hold it; `m` is then still the caller's.
    bool start(rte_mbuf* m, const rte_mbuf* first);
    // Bytes each chunk will grow by after the datagram is finished (a sealed overlay's ESP
    // header, trailer and ICV, uplink_sealing::seal_burst): the datagram takes only as many
    // chunks as an IPv4 length and a 64 KB buffer hold once each has grown. Set before start().
    void grow_each_chunk_by(uint32_t bytes) { _chunk_growth = bytes; }
    bool open() const { return _m != nullptr; }
    uint16_t frames() const { return _count; }

    // Where the next inner frame (Ethernet onwards) of `inner_len` bytes is to be written, or
    // nullptr when it cannot join: the datagram closed by a shorter chunk, full (IPv4's
    // length, max_gso_chunks), or the frame more than max_padding_bytes longer than a chunk so
    // far. A longer frame grows the stride when it is committed (a run that began with a
    // WRITE's middle packets meets the next WRITE's first).
    uint8_t* reserve(uint32_t inner_len);
    // Whether the frame written at reserve() belongs to this datagram's outer flow: the inner
    // IPv4 fields the outer headers are made of (TOS, addresses, protocol, ports, fragment
    // offset) are the first frame's. The caller checks the rest (the same vNIC and uplink).
    bool reserved_joins() const;
    // Takes the frame written at reserve() in: the first frame's VXLAN header and inner
    // destination MAC (the route's), zeros behind a frame shorter than the stride (and behind
    // every chunk so far when the stride grew). Returns the zero bytes added (the sender's QoS
    // pays for them).
    uint32_t commit();
    // The frame written at reserve(), for a caller that sends it another way.
    const uint8_t* reserved() const { return _reserved; }
    uint32_t reserved_len() const { return _reserved_len; }
    // Whether another frame may still join (not closed, not full).
    bool takes_more() const;

    // Hands the datagram over, ready for an uplink that takes UDP GSO: outer lengths and IPv4
    // checksum, the UDP pseudo-header sum, RTE_MBUF_F_TX_UDP_SEG with tso_segsz = stride and
    // the outer l2/l3/l4 lengths; a datagram of one frame is an ordinary frame (UDP checksum
    // 0, no flags). nullptr when none is open.
    rte_mbuf* finish();

  private:
    uint8_t* chunk(uint16_t index) const;
    // Moves every chunk to its place at `stride` (larger), zeros between; returns the zeros.
    uint32_t grow_stride(uint32_t stride);

    rte_mbuf* _m = nullptr;
    uint32_t _stride = 0;    // the kernel's gso_size: VXLAN header + the largest inner frame
    uint32_t _smallest = 0;  // the shortest full chunk (each may be padded by at most 16)
    uint32_t _used = 0;      // chunk bytes so far (the last may be short)
    uint16_t _count = 0;
    bool _closed = false;  // a shorter chunk ended it
    uint8_t* _reserved = nullptr;
    uint32_t _reserved_len = 0;
    uint32_t _grow_to = 0;  // the stride the reserved frame needs, when larger
    uint32_t _chunk_growth = 0;
};

}  // namespace jakiro::overlay
