#pragma once
// RoCE v2 names a port by a GID that is one of its IP addresses (annex A17): an IPv4 address as
// the IPv4-mapped IPv6 address ::ffff:a.b.c.d, an IPv6 address as itself. The engine keeps an
// IPv4 peer as a 32-bit address (its hot path, the VLT key) and an IPv6 peer as 16 bytes.

#include <array>
#include <cstdint>
#include <cstring>

namespace jakiro::rnic {

using ipv6_address = std::array<uint8_t, 16>;  // network order

inline bool gid_is_ipv4_mapped(const uint8_t* gid) {
    static constexpr uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(gid, prefix, sizeof(prefix)) == 0;
}

inline bool is_unspecified(const ipv6_address& a) {
    return a == ipv6_address{};
}

// An IPv6 address a RoCE v2 peer can have: unicast beyond the link (global or unique local).
// Not the unspecified or loopback address, an IPv4-mapped or -compatible one (those name IPv4
// peers), multicast (ff00::/8) or link-local (fe80::/10, which needs an interface to mean
// anything). RFC 4291 §2.4.
inline bool gid_is_routable_ipv6(const uint8_t* gid) {
    if (gid[0] == 0 || gid[0] == 0xff || (gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80)) {
        return false;  // ::/8 (unspecified, loopback, IPv4-mapped), multicast, link-local
    }
    return true;
}

}  // namespace jakiro::rnic
