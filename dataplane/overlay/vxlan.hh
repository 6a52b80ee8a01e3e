#pragma once
// VXLAN (RFC 7348) encapsulation and outer-header validation, with ECN handled per RFC 6040.
// Pure functions over bytes and mbufs; no tables, so they can be tested and benchmarked alone.

#include <rte_byteorder.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>
#include <rte_vxlan.h>

#include <cstdint>

#include "dataplane/drops.hh"

namespace jakiro::overlay {

constexpr uint16_t vxlan_udp_port = 4789;  // IANA port for VXLAN
constexpr uint32_t outer_header_bytes =
    sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr) + sizeof(rte_vxlan_hdr);
static_assert(outer_header_bytes == 50);
constexpr uint8_t vxlan_flag_vni_valid = 0x08;  // the "I" flag, first byte of the header
constexpr uint8_t outer_ttl = 64;

// The sending side of a tunnel: this host's underlay identity and one remote host.
struct tunnel_endpoints {
    rte_ether_addr local_mac;
    rte_ether_addr remote_mac;
    rte_be32_t local_ip;
    rte_be32_t remote_ip;
};

// UDP source port for the outer header: a hash of the inner flow folded into the dynamic range
// 49152-65535 (RFC 7348 §5), so underlay ECMP spreads flows but keeps each flow on one path.
uint16_t flow_entropy_port(const rte_ipv4_hdr* inner_ip, uint32_t bytes_after_ip);

// Writes the 50 outer bytes at `out` for an inner frame of `inner_frame_len` bytes whose IPv4
// TOS is `inner_tos`. DSCP and ECN are copied from the inner header (RFC 6040 normal mode).
void write_outer_headers(uint8_t* out, const tunnel_endpoints& ends, uint32_t vni,
                         uint16_t inner_frame_len, uint8_t inner_tos, uint16_t source_port);

// Prepends the outer headers to `m` (an inner Ethernet frame). Returns false when the mbuf has
// no headroom left, in which case `m` is unchanged.
bool encapsulate(rte_mbuf* m, const tunnel_endpoints& ends, uint32_t vni, uint8_t inner_tos,
                 uint16_t source_port);

// What the outer headers of a received frame said, once they passed every check.
struct outer_view {
    uint32_t vni;
    rte_be32_t outer_src_ip;
    uint8_t outer_tos;
    uint32_t inner_offset;  // where the inner Ethernet header starts
    uint32_t inner_len;     // inner frame length as bounded by the outer UDP length
};

struct outer_check {
    bool ok;
    drop_reason reason;  // meaningful when !ok
    outer_view view;
};

// Validates an underlay frame that is already known to be IPv4 addressed to our MAC. `len` is
// the number of contiguous bytes at `frame`.
outer_check check_outer(const uint8_t* frame, uint32_t len, rte_be32_t local_ip);

// RFC 6040 §4.2 decapsulation: combines outer and inner ECN. Returns the new inner ECN field, or
// -1 when the packet must be dropped (outer CE on a Not-ECT inner packet).
int decapsulated_ecn(uint8_t outer_tos, uint8_t inner_tos);

// Sets the ECN field of an IPv4 header and fixes its checksum.
void set_ipv4_ecn(rte_ipv4_hdr* ip, uint8_t ecn);

}  // namespace jakiro::overlay
