#pragma once
// The RoCEv2 invariant CRC (IBTA annex A17): CRC-32 over 8 bytes of 0xFF (standing in for the
// InfiniBand LRH) followed by the inner IP header through the end of the padded payload, with
// the fields routers may change set to ones: of IPv4 the TOS (DSCP+ECN), TTL and header
// checksum; of IPv6 the traffic class, flow label and hop limit; the UDP checksum, and BTH
// byte 4 (FECN/BECN/reserved). Stored after the payload, least significant byte first. The
// VXLAN outer headers are not covered, so the overlay may rewrite ECN and TTL (hop limit) of
// the inner header without touching the ICRC.
//
// How the fast path gets there without touching the packet or copying it: IPSec-MB checksums the
// packet exactly as it is, in one pass. The CRC is linear, so the difference the masking would
// have made depends only on each masked byte's value and its distance from the end of the
// packet: seven table look-ups give that difference at a fixed distance, one GF(2) shift moves
// it to the packet's real length, and the 0xFF prefix is a compile-time constant. The slice-by-8
// reference does it the obvious way (masked copy of the headers, then a running CRC), so the
// two paths check each other. Pure, thread-safe, no DPDK.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace jakiro::rnic {

// The headers every ICRC'd packet starts with: IPv4 (20-60 bytes) or IPv6 (40, UDP its next
// header: RoCEv2 carries no extension headers), UDP (8), BTH (12).
constexpr size_t icrc_ipv6_header_bytes = 40;
constexpr size_t icrc_min_header_bytes = 20 + 8 + 12;
constexpr size_t icrc_max_header_bytes = 60 + 8 + 12;

// `ip` points at the inner IPv4 or IPv6 header; `len` bytes run from there to the end of the
// padded payload, ICRC excluded. nullopt when the bytes are not an IPv4 header (version, IHL)
// or an IPv6 header with UDP next, followed by at least UDP + BTH.
std::optional<uint32_t> compute_icrc(const uint8_t* ip, size_t len);

// The same CRC for a packet whose tail lies in a second buffer (a zero-copy send: headers in an
// mbuf, payload in registered memory). `headers` starts at the IP header and holds at least
// IP + UDP + BTH; `rest` follows it on the wire.
std::optional<uint32_t> compute_icrc(std::span<const uint8_t> headers,
                                     std::span<const uint8_t> rest);

// `len` includes the 4 ICRC bytes at the end. False also for malformed headers.
bool verify_icrc(const uint8_t* ip, size_t len);

// The same computation with the portable slice-by-8 CRC and a running seed instead of
// IPSec-MB and crc32_combine: an independent path that tests and benchmarks compare against.
std::optional<uint32_t> compute_icrc_slice8(const uint8_t* ip, size_t len);

// Wire order of the ICRC: least significant byte first.
inline void store_icrc(uint8_t* out, uint32_t icrc) {
    out[0] = static_cast<uint8_t>(icrc);
    out[1] = static_cast<uint8_t>(icrc >> 8);
    out[2] = static_cast<uint8_t>(icrc >> 16);
    out[3] = static_cast<uint8_t>(icrc >> 24);
}

inline uint32_t load_icrc(const uint8_t* in) {
    return uint32_t{in[0]} | (uint32_t{in[1]} << 8) | (uint32_t{in[2]} << 16) |
           (uint32_t{in[3]} << 24);
}

}  // namespace jakiro::rnic
