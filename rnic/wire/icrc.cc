#include "rnic/wire/icrc.hh"

#include <array>
#include <cstring>

#include "rnic/wire/crc32.hh"

namespace jakiro::rnic {

namespace {

namespace m = crc32_math;

constexpr size_t lrh_stand_in_bytes = 8;  // the 0xFF bytes that replace the IB LRH

// Offsets of the variant (masked) fields.
constexpr size_t ipv4_tos = 1;
constexpr size_t ipv4_ttl = 8;
constexpr size_t ipv4_checksum = 10;  // 2 bytes
// IPv6: traffic class (the low nibble of byte 0 and the high one of byte 1), flow label (the
// rest of bytes 1-3) and hop limit. Byte 0's high nibble is the version, which stays.
constexpr size_t ipv6_version_tc = 0;
constexpr uint8_t ipv6_version_tc_mask = 0x0F;
constexpr size_t ipv6_tc_flow = 1;  // bytes 1, 2 and 3, wholly masked
constexpr size_t ipv6_next_header = 6;
constexpr size_t ipv6_hop_limit = 7;
constexpr size_t udp_checksum = 6;   // 2 bytes, from the UDP header
constexpr size_t bth_resv8 = 8 + 4;  // from the UDP header

// Length of the IP header at `ip` if it is IPv4, or IPv6 with UDP as its next header (RoCEv2
// has no extension headers), followed by UDP and a BTH within `len` bytes; else 0.
size_t ip_header_bytes(const uint8_t* ip, size_t len) {
    if (len < icrc_min_header_bytes) {
        return 0;
    }
    size_t header = 0;
    if ((ip[0] >> 4) == 4) {
        header = size_t{ip[0] & 0x0Fu} * 4;
        if (header < 20) {
            return 0;
        }
    } else if ((ip[0] >> 4) == 6 && ip[ipv6_next_header] == 17) {
        header = icrc_ipv6_header_bytes;
    } else {
        return 0;
    }
    return len < header + 8 + 12 ? 0 : header;
}

// ---- fast path: correct IPSec-MB's CRC of the raw packet --------------------------------
//
// With N the packet length, O the packet, M the masked packet and D = O xor M (non-zero only in
// the masked bytes, all within the first h = ip header + 13 bytes: through BTH byte 4):
//
//   ICRC = crc(FF8 || M) = crc(O) xor K · x^(8·(N - h)),
//   K    = crc(FF8) · x^(8·h) xor L(D[0..h)),
//
// where L is the CRC register from zero with no final inversion (linear in its input). L(D) is
// the sum over the masked bytes of table[distance to byte h-1][delta]. The UDP and BTH bytes
// are the same distance from byte h-1 whatever the IP header, so they share tables. The IPv4
// tables and constant are laid out for IHL 5; an IPv4 header with options moves the IPv4 part
// further from the end by ihl - 20 bytes, one more shift. IPv6 has tables of its own.

constexpr size_t h_ihl5 = 20 + bth_resv8 + 1;                      // 33
constexpr size_t h_ipv6 = icrc_ipv6_header_bytes + bth_resv8 + 1;  // 53

constexpr size_t distance_ihl5(size_t offset) {
    return h_ihl5 - 1 - offset;
}

constexpr size_t distance_ipv6(size_t offset) {
    return h_ipv6 - 1 - offset;
}

constexpr std::array<uint32_t, 256> t_tos = m::byte_table(distance_ihl5(ipv4_tos));
constexpr std::array<uint32_t, 256> t_ttl = m::byte_table(distance_ihl5(ipv4_ttl));
constexpr std::array<uint32_t, 256> t_ip_sum0 = m::byte_table(distance_ihl5(ipv4_checksum));
constexpr std::array<uint32_t, 256> t_ip_sum1 = m::byte_table(distance_ihl5(ipv4_checksum + 1));
constexpr std::array<uint32_t, 256> t_udp_sum0 = m::byte_table(distance_ihl5(20 + udp_checksum));
constexpr std::array<uint32_t, 256> t_udp_sum1 =
    m::byte_table(distance_ihl5(20 + udp_checksum + 1));
constexpr std::array<uint32_t, 256> t_bth_resv8 = m::byte_table(distance_ihl5(20 + bth_resv8));
static_assert(distance_ihl5(20 + udp_checksum) ==
              distance_ipv6(icrc_ipv6_header_bytes + udp_checksum));

constexpr std::array<uint32_t, 256> t6_version_tc = m::byte_table(distance_ipv6(ipv6_version_tc));
constexpr std::array<uint32_t, 256> t6_tc_flow0 = m::byte_table(distance_ipv6(ipv6_tc_flow));
constexpr std::array<uint32_t, 256> t6_flow1 = m::byte_table(distance_ipv6(ipv6_tc_flow + 1));
constexpr std::array<uint32_t, 256> t6_flow2 = m::byte_table(distance_ipv6(ipv6_tc_flow + 2));
constexpr std::array<uint32_t, 256> t6_hop_limit = m::byte_table(distance_ipv6(ipv6_hop_limit));

// crc(FF8) · x^(8·h), for IHL 5 and for IPv6.
constexpr uint32_t prefix_term =
    m::multiply(m::crc_of_repeated(0xFF, lrh_stand_in_bytes), m::x_pow_8n_slow(h_ihl5));
constexpr uint32_t prefix_term6 =
    m::multiply(m::crc_of_repeated(0xFF, lrh_stand_in_bytes), m::x_pow_8n_slow(h_ipv6));

// The UDP checksum's and BTH byte 4's part of K.
uint32_t transport_masking_term(const uint8_t* udp) {
    return t_udp_sum0[udp[udp_checksum] ^ 0xFF] ^ t_udp_sum1[udp[udp_checksum + 1] ^ 0xFF] ^
           t_bth_resv8[udp[bth_resv8] ^ 0xFF];
}

// K of the formula above, for the headers at `ip` (IP header length `header`).
uint32_t masking_term(const uint8_t* ip, size_t header) {
    // Masking sets a byte b to 0xFF, i.e. flips it by b ^ 0xFF (by b ^ (b | mask) where only
    // some bits are masked).
    if (header == icrc_ipv6_header_bytes && (ip[0] >> 4) == 6) {
        const uint8_t b0 = ip[ipv6_version_tc];
        return prefix_term6 ^ t6_version_tc[b0 ^ (b0 | ipv6_version_tc_mask)] ^
               t6_tc_flow0[ip[ipv6_tc_flow] ^ 0xFF] ^ t6_flow1[ip[ipv6_tc_flow + 1] ^ 0xFF] ^
               t6_flow2[ip[ipv6_tc_flow + 2] ^ 0xFF] ^ t6_hop_limit[ip[ipv6_hop_limit] ^ 0xFF] ^
               transport_masking_term(ip + header);
    }
    uint32_t ip_part = prefix_term ^ t_tos[ip[ipv4_tos] ^ 0xFF] ^ t_ttl[ip[ipv4_ttl] ^ 0xFF] ^
                       t_ip_sum0[ip[ipv4_checksum] ^ 0xFF] ^
                       t_ip_sum1[ip[ipv4_checksum + 1] ^ 0xFF];
    if (header != 20) {
        ip_part = crc32_shift(ip_part, header - 20);
    }
    return ip_part ^ transport_masking_term(ip + header);
}

// ---- reference path: mask a copy, run a seeded CRC --------------------------------------

// The variant-masked copy of IP + UDP + BTH, preceded by the LRH stand-in.
struct masked_headers {
    uint8_t bytes[lrh_stand_in_bytes + icrc_max_header_bytes];
    size_t len;      // bytes used in `bytes`
    size_t covered;  // bytes of the packet they replace (IP + UDP + BTH)

    masked_headers(const uint8_t* packet, size_t header) {
        covered = header + 8 + 12;
        len = lrh_stand_in_bytes + covered;
        std::memset(bytes, 0xFF, lrh_stand_in_bytes);
        uint8_t* ip = bytes + lrh_stand_in_bytes;
        std::memcpy(ip, packet, covered);
        if ((ip[0] >> 4) == 6) {
            ip[ipv6_version_tc] |= ipv6_version_tc_mask;
            std::memset(ip + ipv6_tc_flow, 0xFF, 3);
            ip[ipv6_hop_limit] = 0xFF;
        } else {
            ip[ipv4_tos] = 0xFF;
            ip[ipv4_ttl] = 0xFF;
            ip[ipv4_checksum] = 0xFF;
            ip[ipv4_checksum + 1] = 0xFF;
        }
        ip[header + udp_checksum] = 0xFF;
        ip[header + udp_checksum + 1] = 0xFF;
        ip[header + bth_resv8] = 0xFF;
    }
};

}  // namespace

std::optional<uint32_t> compute_icrc(const uint8_t* ip, size_t len) {
    const size_t header = ip_header_bytes(ip, len);
    if (header == 0) {
        return std::nullopt;
    }
    const size_t h = header + bth_resv8 + 1;
    return crc32_ipsec_mb(ip, len) ^ crc32_shift(masking_term(ip, header), len - h);
}

std::optional<uint32_t> compute_icrc(std::span<const uint8_t> headers,
                                     std::span<const uint8_t> rest) {
    const size_t header = ip_header_bytes(headers.data(), headers.size());
    if (header == 0) {
        return std::nullopt;
    }
    const size_t len = headers.size() + rest.size();
    const size_t h = header + bth_resv8 + 1;
    const uint32_t raw = crc32_combine(crc32_ipsec_mb(headers.data(), headers.size()),
                                       crc32_ipsec_mb(rest.data(), rest.size()), rest.size());
    return raw ^ crc32_shift(masking_term(headers.data(), header), len - h);
}

bool verify_icrc(const uint8_t* ip, size_t len) {
    if (len < sizeof(uint32_t)) {
        return false;
    }
    const size_t covered = len - sizeof(uint32_t);
    const std::optional<uint32_t> crc = compute_icrc(ip, covered);
    return crc && *crc == load_icrc(ip + covered);
}

std::optional<uint32_t> compute_icrc_slice8(const uint8_t* ip, size_t len) {
    const size_t header = ip_header_bytes(ip, len);
    if (header == 0) {
        return std::nullopt;
    }
    const masked_headers h(ip, header);
    const uint32_t crc = crc32_slice8(0, h.bytes, h.len);
    return crc32_slice8(crc, ip + h.covered, len - h.covered);
}

}  // namespace jakiro::rnic
