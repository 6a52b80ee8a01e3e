#pragma once
// The IPv4 sanity check both directions apply before trusting any header field.

#include <rte_ip.h>

#include <cstdint>

namespace jakiro {

// True when `ip` is IPv4 with a header length of at least 20 bytes and a total length that
// covers the header and fits in the `available` bytes behind `ip`.
inline bool ipv4_header_sane(const rte_ipv4_hdr* ip, uint32_t available) {
    const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
    const uint32_t ip_len = rte_be_to_cpu_16(ip->total_length);
    return (ip->version_ihl >> 4) == 4 && ihl >= sizeof(rte_ipv4_hdr) && ip_len >= ihl &&
           ip_len <= available;
}

}  // namespace jakiro
