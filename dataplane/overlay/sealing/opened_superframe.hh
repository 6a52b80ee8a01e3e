#pragma once
// The TCP segments of one flow in a sealed super-datagram are opened into ONE super-frame: the
// first segment's headers once, every segment's payload decrypted straight behind the one
// before it in one 64 KB buffer. The receiving host then hands its tenant the super-frame the
// sender cut (as a plaintext tap uplink does, where the kernel never cuts it), instead of one
// mbuf per segment for rte_gro to chain again and a socket write of as many pieces.
//
// A segment joins only what rte_gro or the kernel's GRO would merge it with: the same outer
// and inner headers but lengths, IPv4 id, checksums, sequence number and flags; inner IPv4
// without options or fragments; flags ACK, or ACK|PSH on the last; a sequence number that
// follows on; some payload, none longer than the first's. The super-frame is marked as merged
// (RTE_MBUF_F_RX_LRO, the first segment's payload as segment size), which the outer checks and
// the ingress pipeline take as they take a tap's.
//
// Header bytes here are a sealed frame's plaintext: VXLAN header, inner Ethernet, IPv4, TCP.
// Uplink worker only; no allocation beyond the caller's mbufs.

#include <rte_mbuf.h>

#include <cstdint>

namespace jakiro::overlay::sealing {

// VXLAN header + inner Ethernet + IPv4 without options + TCP without options: what is
// decrypted first to see whether a frame may join a run.
constexpr uint32_t probe_bytes = 8 + 14 + 20 + 20;
// The most header bytes of a segment that joins (TCP options at most 40).
constexpr uint32_t max_segment_headers = probe_bytes + 40;

// What the first probe_bytes of a frame say about it, `text_len` being its ciphertext's length
// (plaintext and ESP trailer): headers = 0 when it may not join a run.
struct segment_shape {
    uint32_t headers = 0;  // VXLAN header to the end of the TCP options
    uint32_t payload = 0;
    uint32_t seq = 0;
    bool pushed = false;  // PSH: the run ends with it
};
segment_shape shape_of(const uint8_t* probe, uint32_t text_len);

// A super-frame being opened: `head` holds the outer headers and the first segment's headers,
// `payload` (a 64 KB mbuf) every segment's payload back to back.
class opened_run {
  public:
    bool open() const { return _head != nullptr; }
    uint16_t segments() const { return _segments; }

    // Starts a run in `head` (an empty mbuf) and `payload` (an empty mbuf that holds 64 KB)
    // for a frame of `shape`: its `outer` clear bytes and decrypted `headers` are copied in.
    void start(rte_mbuf* head, rte_mbuf* payload, const uint8_t* outer, uint32_t outer_len,
               const uint8_t* headers, const segment_shape& shape);
    // Whether a segment of `shape` whose decrypted headers are `headers` comes next in this
    // run (before its payload is decrypted).
    bool continues(const uint8_t* headers, const segment_shape& shape) const;
    // Where the payload of the segment being opened is to be decrypted.
    uint8_t* payload_at() const;
    // The segment being opened authenticated: its payload stays.
    void commit(const segment_shape& shape);
    // The first segment did not authenticate: the run is given up, its mbufs freed.
    void abandon();
    // The frame the run becomes, its outer source `outer_src_be` and destination port VXLAN's:
    // a super-frame marked merged and `extra_flags`, or, of one segment, the ordinary frame it
    // carried. Then the run is closed.
    rte_mbuf* finish(uint32_t outer_src_be, uint64_t extra_flags);

  private:
    rte_mbuf* _head = nullptr;
    rte_mbuf* _payload = nullptr;
    uint32_t _outer_len = 0;
    uint32_t _headers = 0;
    uint32_t _mss = 0;
    uint32_t _bytes = 0;  // payload so far
    uint32_t _next_seq = 0;
    uint16_t _segments = 0;
    bool _closed = false;  // a PSH or a short segment ended it
    bool _pushed = false;
};

}  // namespace jakiro::overlay::sealing
