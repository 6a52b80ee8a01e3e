#pragma once
// The header a tap uplink (vnet_face.hh, "vnet:tap=NAME") puts in front of every frame: the
// virtio-net header extended with the two offsets of UDP-tunnel GSO (Linux 6.16,
// TUN_F_UDP_TUNNEL_GSO; struct virtio_net_hdr_v1_hash_tunnel, 24 bytes with the unused hash
// fields). AF_PACKET cannot describe a VXLAN super-frame; a tap can. With it one VXLAN frame
// carries a tenant's whole TCP super-frame from jakirod to jakirod, as the kernel's own VXLAN
// device sends: the kernel (or a NIC with VXLAN TSO) cuts it into MTU frames only where a
// receiver needs them, and a veth/bridge fabric and the receiving tap hand it on whole. No
// rte_gso, no inner checksum per frame, no GRO.
//
// Send: a frame marked VXLAN TSO (overlay::mark_vxlan_superframe) leaves as
// GSO_UDP_TUNNEL_IPV4 | GSO_TCPV4 (GSO_TCPV6 for an inner IPv6 super-frame) with NEEDS_CSUM on the
// inner TCP checksum (its field holds the pseudo-header sum, as the tenant's kernel left it) and
// the outer UDP checksum 0 (RFC 7348); anything else with the plain header of vnet_header.hh and
// zero offsets. Receive: take_vxlan_superframe() (uplink_frames.hh) checks one against the bytes.
//
// Pure functions; no socket, no EAL state.

#include <rte_mbuf.h>

#include <cstddef>
#include <cstdint>

#include "dataplane/vnet_face/vnet_header.hh"

namespace jakiro::vnet_face {

struct tap_header {
    virtio_net_hdr base;
    uint16_t num_buffers;      // unused by a tap
    uint32_t hash_value;       // unused: no hash report negotiated
    uint16_t hash_report;      //
    uint16_t hash_padding;     //
    uint16_t outer_th_offset;  // where the outer UDP header starts (tunnel GSO only)
    uint16_t inner_nh_offset;  // where the inner IP header starts (tunnel GSO only)
};
static_assert(sizeof(tap_header) == 24 && offsetof(tap_header, outer_th_offset) == 20);

constexpr uint32_t tap_header_bytes = sizeof(tap_header);
constexpr uint8_t VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4 = 0x20;
// The outer UDP checksum is partial too; we never send it (RFC 7348 checksum 0), a kernel
// VTEP configured with udpcsum does.
constexpr uint8_t VIRTIO_NET_HDR_F_UDP_TUNNEL_CSUM = 8;

// Where the headers of a VXLAN super-frame lie: outer Ethernet and IPv4 without options, then
// UDP, VXLAN and the inner Ethernet header.
constexpr uint16_t tunnel_outer_udp_offset = 14 + 20;
constexpr uint16_t tunnel_inner_ip_offset = tunnel_outer_udp_offset + 8 + 8 + 14;

// The header to write `m` to a tap with.
tap_header tap_header_for(const rte_mbuf* m);

}  // namespace jakiro::vnet_face
