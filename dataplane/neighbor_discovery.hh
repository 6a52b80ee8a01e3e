#pragma once
// IPv6 Neighbor Discovery (RFC 4861) towards tenants: parsing a tenant's Neighbor Solicitation
// and answering it in place with a Neighbor Advertisement. jakirod answers ND for the VPC's
// IPv6 addresses itself, as it answers ARP for the IPv4 ones (arp.hh): every such address is
// reached through jakirod, so the answer is always the gateway MAC.

#include <rte_ether.h>
#include <rte_ip.h>

#include <array>
#include <cstdint>
#include <optional>

namespace jakiro {

using ipv6_bytes = std::array<uint8_t, 16>;  // network order, as on the wire

// ICMPv6 types of Neighbor Discovery (RFC 4861 §4).
constexpr uint8_t icmp6_router_solicitation = 133;
constexpr uint8_t icmp6_router_advertisement = 134;
constexpr uint8_t icmp6_neighbor_solicitation = 135;
constexpr uint8_t icmp6_neighbor_advertisement = 136;
constexpr uint8_t icmp6_redirect = 137;
constexpr uint8_t ipproto_icmpv6 = 58;

// Ethernet + IPv6 + NA (type, code, checksum, flags, target) + target link-layer address option.
constexpr uint32_t neighbor_advertisement_bytes =
    sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) + 24 + 8;  // 86

struct neighbor_solicitation {
    ipv6_bytes source;  // the IPv6 source: an address of the tenant, or :: (a DAD probe)
    ipv6_bytes target;  // whose link-layer address is asked for
};

// Whether the Ethernet/IPv6 frame is a Neighbor Discovery message: ICMPv6 of types 133..137
// right after the IPv6 header (ND never carries extension headers, RFC 4861 §6.1.1/§7.1.1).
bool is_neighbor_discovery(const uint8_t* frame, uint32_t len);

// A Neighbor Solicitation as RFC 4861 §7.1.1 validates it: hop limit 255, code 0, ICMPv6 length
// at least 24, a right checksum, a unicast target, options of nonzero length that fit, and no
// source link-layer option from the unspecified address; nullopt for anything else.
std::optional<neighbor_solicitation> parse_neighbor_solicitation(const uint8_t* frame,
                                                                 uint32_t len);

// Rewrites the solicitation at `frame` (at least neighbor_advertisement_bytes of room) into the
// solicited advertisement "target is at answer_mac" (flags S and O, not R: jakirod answers for
// the neighbour, it is no router), from the target to the solicitation's source, checksummed.
// Returns the advertisement's length, neighbor_advertisement_bytes.
uint32_t make_neighbor_advertisement(uint8_t* frame, const rte_ether_addr& answer_mac,
                                     const ipv6_bytes& target);

// Whether the ICMPv6 message right after `ip` (payload_len bytes, no extension headers) has a
// right checksum over it and the pseudo-header (RFC 8200 §8.1).
bool icmpv6_checksum_ok(const rte_ipv6_hdr* ip, const uint8_t* icmp);

// fe80::/10.
inline bool is_link_local(const uint8_t* address) {
    return address[0] == 0xfe && (address[1] & 0xc0) == 0x80;
}

}  // namespace jakiro
