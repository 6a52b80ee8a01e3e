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
constexpr size_t udp_checksum = 6;    // 2 bytes, from the UDP header
constexpr size_t bth_resv8 = 8 + 4;   // from the UDP header

// IPv4 header length if `ipv4` starts an IPv4 header followed by UDP and a BTH within `len`
// bytes, else 0.
size_t ipv4_header_bytes(const uint8_t* ipv4, size_t len) {
    if (len < icrc_min_header_bytes || (ipv4[0] >> 4) != 4) {
        return 0;
    }
    const size_t ihl = size_t{ipv4[0] & 0x0Fu} * 4;
    if (ihl < 20 || len < ihl + 8 + 12) {
        return 0;
    }
    return ihl;
}

// ---- fast path: correct IPSec-MB's CRC of the raw packet --------------------------------
//
// With N the packet length, O the packet, M the masked packet and D = O xor M (non-zero only in
// the seven masked bytes, all within the first h = ihl + 13 bytes: through BTH byte 4):
//
//   ICRC = crc(FF8 || M) = crc(O) xor K · x^(8·(N - h)),
//   K    = crc(FF8) · x^(8·h) xor L(D[0..h)),
//
// where L is the CRC register from zero with no final inversion (linear in its input). L(D) is
// the sum over the masked bytes of table[distance to byte h-1][delta]. Tables and constants are
// laid out for IHL 5; an IPv4 header with options moves the IPv4 part further from the end by
// ihl - 20 bytes, one more shift.

constexpr size_t h_ihl5 = 20 + bth_resv8 + 1;  // 33

constexpr size_t distance_ihl5(size_t offset) {
    return h_ihl5 - 1 - offset;
}

constexpr std::array<uint32_t, 256> t_tos = m::byte_table(distance_ihl5(ipv4_tos));
constexpr std::array<uint32_t, 256> t_ttl = m::byte_table(distance_ihl5(ipv4_ttl));
constexpr std::array<uint32_t, 256> t_ip_sum0 = m::byte_table(distance_ihl5(ipv4_checksum));
constexpr std::array<uint32_t, 256> t_ip_sum1 = m::byte_table(distance_ihl5(ipv4_checksum + 1));
constexpr std::array<uint32_t, 256> t_udp_sum0 = m::byte_table(distance_ihl5(20 + udp_checksum));
constexpr std::array<uint32_t, 256> t_udp_sum1 =
    m::byte_table(distance_ihl5(20 + udp_checksum + 1));
constexpr std::array<uint32_t, 256> t_bth_resv8 = m::byte_table(distance_ihl5(20 + bth_resv8));

// crc(FF8) · x^(8·h) for IHL 5.
constexpr uint32_t prefix_term =
    m::multiply(m::crc_of_repeated(0xFF, lrh_stand_in_bytes), m::x_pow_8n_slow(h_ihl5));

// K of the formula above, for the headers at `ipv4` (IPv4 header length `ihl`).
uint32_t masking_term(const uint8_t* ipv4, size_t ihl) {
    // Masking sets a byte b to 0xFF, i.e. flips it by b ^ 0xFF.
    uint32_t ip_part = prefix_term ^ t_tos[ipv4[ipv4_tos] ^ 0xFF] ^ t_ttl[ipv4[ipv4_ttl] ^ 0xFF] ^
                       t_ip_sum0[ipv4[ipv4_checksum] ^ 0xFF] ^
                       t_ip_sum1[ipv4[ipv4_checksum + 1] ^ 0xFF];
    if (ihl != 20) {
        ip_part = crc32_shift(ip_part, ihl - 20);
    }
    const uint8_t* udp = ipv4 + ihl;
    return ip_part ^ t_udp_sum0[udp[udp_checksum] ^ 0xFF] ^
           t_udp_sum1[udp[udp_checksum + 1] ^ 0xFF] ^ t_bth_resv8[udp[bth_resv8] ^ 0xFF];
}

// ---- reference path: mask a copy, run a seeded CRC --------------------------------------

// The variant-masked copy of IPv4 + UDP + BTH, preceded by the LRH stand-in.
struct masked_headers {
    uint8_t bytes[lrh_stand_in_bytes + icrc_max_header_bytes];
    size_t len;      // bytes used in `bytes`
    size_t covered;  // bytes of the packet they replace (IPv4 + UDP + BTH)

    masked_headers(const uint8_t* ipv4, size_t ihl) {
        covered = ihl + 8 + 12;
        len = lrh_stand_in_bytes + covered;
        std::memset(bytes, 0xFF, lrh_stand_in_bytes);
        uint8_t* ip = bytes + lrh_stand_in_bytes;
        std::memcpy(ip, ipv4, covered);
        ip[ipv4_tos] = 0xFF;
        ip[ipv4_ttl] = 0xFF;
        ip[ipv4_checksum] = 0xFF;
        ip[ipv4_checksum + 1] = 0xFF;
        ip[ihl + udp_checksum] = 0xFF;
        ip[ihl + udp_checksum + 1] = 0xFF;
        ip[ihl + bth_resv8] = 0xFF;
    }
};

}  // namespace

std::optional<uint32_t> compute_icrc(const uint8_t* ipv4, size_t len) {
    const size_t ihl = ipv4_header_bytes(ipv4, len);
    if (ihl == 0) {
        return std::nullopt;
    }
    const size_t h = ihl + bth_resv8 + 1;
    return crc32_ipsec_mb(ipv4, len) ^ crc32_shift(masking_term(ipv4, ihl), len - h);
}

std::optional<uint32_t> compute_icrc(std::span<const uint8_t> headers,
                                     std::span<const uint8_t> rest) {
    const size_t ihl = ipv4_header_bytes(headers.data(), headers.size());
    if (ihl == 0) {
        return std::nullopt;
    }
    const size_t len = headers.size() + rest.size();
    const size_t h = ihl + bth_resv8 + 1;
    const uint32_t raw = crc32_combine(crc32_ipsec_mb(headers.data(), headers.size()),
                                       crc32_ipsec_mb(rest.data(), rest.size()), rest.size());
    return raw ^ crc32_shift(masking_term(headers.data(), ihl), len - h);
}

bool verify_icrc(const uint8_t* ipv4, size_t len) {
    if (len < sizeof(uint32_t)) {
        return false;
    }
    const size_t covered = len - sizeof(uint32_t);
    const std::optional<uint32_t> crc = compute_icrc(ipv4, covered);
    return crc && *crc == load_icrc(ipv4 + covered);
}

std::optional<uint32_t> compute_icrc_slice8(const uint8_t* ipv4, size_t len) {
    const size_t ihl = ipv4_header_bytes(ipv4, len);
    if (ihl == 0) {
        return std::nullopt;
    }
    const masked_headers h(ipv4, ihl);
    const uint32_t crc = crc32_slice8(0, h.bytes, h.len);
    return crc32_slice8(crc, ipv4 + h.covered, len - h.covered);
}

}  // namespace jakiro::rnic
