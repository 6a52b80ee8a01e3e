#pragma once
// The virtio-net header that AF_PACKET (PACKET_VNET_HDR) puts in front of every frame, turned
// into mbuf offload metadata on receive and back on send. It is how a super-frame (one 64 KB
// TCP segment the tenant's kernel did not cut up) says what it is: GSO type, segment size, and
// where the partial checksum lives.
//
// Receive (tenant -> jakirod): a GSO TCPv4 or TCPv6 super-frame keeps its bytes as they are and
// gets RTE_MBUF_F_TX_TCP_SEG (and RTE_MBUF_F_TX_IPV4 or _IPV6) with tso_segsz and l2/l3/l4 lengths,
// its TCP checksum field holding the pseudo-header sum (CHECKSUM_PARTIAL); a frame that is not
// really more than one segment, and any other frame with a partial checksum, gets its checksum
// completed here, so everything downstream that is not a super-frame is an ordinary, complete
// frame.
//
// Send (jakirod -> tenant): a frame still marked RTE_MBUF_F_TX_TCP_SEG leaves as GSO_TCPV4 (or
// GSO_TCPV6 when marked RTE_MBUF_F_TX_IPV6) with
// NEEDS_CSUM (the receiver's kernel trusts a partial checksum, as it does for a frame that
// crossed a veth); anything else leaves with no flags and is checked by the tenant's kernel.
// (jakirod -> fabric): one marked RTE_MBUF_F_TX_UDP_SEG leaves as GSO_UDP_L4 with NEEDS_CSUM
// on the outer UDP checksum (overlay/udp_gso.hh).
//
// Pure functions of the header and the frame bytes; no socket, no EAL state.

#include <rte_mbuf.h>

#include <cstddef>
#include <cstdint>

namespace jakiro::vnet_face {

// struct virtio_net_hdr (linux/virtio_net.h, which C++ cannot include: a member is named
// `class`), in host byte order as AF_PACKET uses it. The layout is kernel ABI.
struct virtio_net_hdr {
    uint8_t flags;
    uint8_t gso_type;
    uint16_t hdr_len;      // Ethernet + IP + TCP headers
    uint16_t gso_size;     // payload bytes per segment
    uint16_t csum_start;   // where the checksum sum starts
    uint16_t csum_offset;  // where, after csum_start, the checksum goes
};
static_assert(sizeof(virtio_net_hdr) == 10 && offsetof(virtio_net_hdr, csum_offset) == 8);

constexpr uint8_t VIRTIO_NET_HDR_F_NEEDS_CSUM = 1;
constexpr uint8_t VIRTIO_NET_HDR_F_DATA_VALID = 2;
constexpr uint8_t VIRTIO_NET_HDR_GSO_NONE = 0;
constexpr uint8_t VIRTIO_NET_HDR_GSO_TCPV4 = 1;
constexpr uint8_t VIRTIO_NET_HDR_GSO_TCPV6 = 4;
constexpr uint8_t VIRTIO_NET_HDR_GSO_UDP_L4 = 5;  // the uplink's VXLAN super-datagrams only
constexpr uint8_t VIRTIO_NET_HDR_GSO_ECN = 0x80;

constexpr uint32_t header_bytes = sizeof(virtio_net_hdr);  // 10: PACKET_VNET_HDR's default size

// Why a received header was refused; each is a counted drop of the face.
enum class header_verdict : uint8_t {
    ok,
    bad_flags,         // flags other than NEEDS_CSUM / DATA_VALID
    bad_gso_type,      // GSO other than TCPv4 and TCPv6: off on tenants' interfaces (cni/links.cc)
    bad_gso_size,      // gso_size 0, or GSO without NEEDS_CSUM
    bad_csum_offsets,  // csum_start/offset outside the frame or not where TCP's checksum is
    not_tcp_ipv4,      // GSO_TCPV4 (GSO_TCPV6) on a frame whose headers are not Ethernet/IPv4/TCP
                       // (Ethernet/IPv6/TCP, TCP right after the fixed header, exact length)
    truncated,         // headers longer than the frame, or GSO with no payload
};

// Describes the received frame in `m` (one segment, data at its start) by `hdr`.
header_verdict to_mbuf(const virtio_net_hdr& hdr, rte_mbuf* m);

// The header to send `m` with.
virtio_net_hdr from_mbuf(const rte_mbuf* m);

// Marks `m` (Ethernet/IPv4/TCP, headers in the first segment) as a super-frame of `mss`-byte
// segments for from_mbuf, with the pseudo-header sum its partial checksum needs. Used for
// frames merged by GRO before they go to a tenant.
void mark_tcp_superframe(rte_mbuf* m, uint16_t mss);
// The same for Ethernet/IPv6/TCP (TCP right after the fixed header): GSO_TCPV6 for from_mbuf.
void mark_tcp6_superframe(rte_mbuf* m, uint16_t mss);

// The TCP GSO type of a frame marked RTE_MBUF_F_TX_TCP_SEG.
inline uint8_t tcp_gso_type(const rte_mbuf* m) {
    return (m->ol_flags & RTE_MBUF_F_TX_IPV6) != 0 ? VIRTIO_NET_HDR_GSO_TCPV6
                                                   : VIRTIO_NET_HDR_GSO_TCPV4;
}

// Completes a partial checksum: the field at `start` + `offset` already holds the
// pseudo-header sum (CHECKSUM_PARTIAL), so the sum from `start` to the end of the `len`-byte
// frame, folded and inverted, is the final value. The caller checked the offsets.
void complete_partial_checksum(uint8_t* frame, uint32_t len, uint16_t start, uint16_t offset);

// Byte offset of the TCP checksum field when the header says NEEDS_CSUM on TCP.
constexpr uint16_t tcp_csum_offset = 16;
constexpr uint16_t udp_csum_offset = 6;

}  // namespace jakiro::vnet_face
