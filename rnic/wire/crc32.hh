#pragma once
// CRC-32 as Ethernet and zlib define it (polynomial 0x04C11DB7 reflected = 0xEDB88320, initial
// value and final XOR 0xFFFFFFFF): the checksum inside the RoCEv2 ICRC.
//
// The fast path is Intel IPSec-MB (IMB_CRC32_ETHERNET_FCS, PCLMUL/VPCLMUL folding). Its CRC
// matches zlib.crc32 bit for bit (unit-tested), but its API has no seed: it always starts from
// ~0 and cannot continue a running CRC. Whatever the ICRC needs beyond one pass over contiguous
// bytes (a prefix, masked fields, a second buffer) is therefore done with GF(2) polynomial
// arithmetic on finished CRCs: crc32_shift / crc32_combine, as zlib's crc32_combine does.
//
// Thread-safety: all functions are pure and callable from any thread; IPSec-MB's CPU dispatch is
// resolved once, on first use, behind a function-local static.

#include <array>
#include <cstddef>
#include <cstdint>

namespace jakiro::rnic {

// zlib-compatible: crc32(0, "123456789", 9) == 0xCBF43926, and
// crc32(crc32(0, a), b) == crc32(0, a || b).
uint32_t crc32_ipsec_mb(const uint8_t* data, size_t len);  // no seed: always crc32(0, data)
uint32_t crc32_slice8(uint32_t crc, const uint8_t* data, size_t len);  // portable reference

// reg · x^(8·n) mod P: a raw CRC register (or any polynomial) carried past n zero bytes.
// Cost does not depend on n below 64 KiB: one or two GF(2) multiplications (PCLMULQDQ when the
// CPU has it) and table look-ups.
uint32_t crc32_shift(uint32_t reg, size_t n);

// CRC of a || b from crc(a), crc(b) and the length of b: crc(a)·x^(8·|b|) + crc(b), the pre-
// and post-inversions of the two CRCs cancelling.
inline uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
    return crc32_shift(crc_a, len_b) ^ crc_b;
}

// Which IPSec-MB code path init_mb_mgr_auto picked ("avx512", "avx2", "sse", …), for reports.
const char* crc32_ipsec_mb_arch();

// Compile-time polynomial arithmetic in the CRC's reflected bit order (bit 31 = x^0), for the
// tables here and in icrc.cc.
namespace crc32_math {

constexpr uint32_t poly_reflected = 0xEDB88320;  // 0x04C11DB7 with its bits reversed
constexpr uint32_t one = 0x80000000;             // the polynomial 1

// p · x: in reflected order a right shift, folding x^32 back with the polynomial when the x^31
// coefficient (bit 0) falls off. Also one bit of a CRC register step.
constexpr uint32_t times_x(uint32_t p) {
    return (p >> 1) ^ (poly_reflected & (0u - (p & 1)));
}

// a · b mod P, branch-free so it can run at compile time.
constexpr uint32_t multiply(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (int i = 0; i < 32; ++i) {
        product ^= b & (0u - ((a >> (31 - i)) & 1));
        b = times_x(b);
    }
    return product;
}

// x^(8·n) mod P, by repeated shifting: compile-time use only.
constexpr uint32_t x_pow_8n_slow(size_t n) {
    uint32_t p = one;
    for (size_t i = 0; i < 8 * n; ++i) {
        p = times_x(p);
    }
    return p;
}

// table[v] = the raw register (initial 0, no final XOR) after byte v and then k zero bytes.
// k = 0 is the classic byte-wise CRC table; k = 0..7 are the slice-by-8 tables.
constexpr std::array<uint32_t, 256> byte_table(size_t k) {
    std::array<uint32_t, 256> t{};
    const uint32_t shift = x_pow_8n_slow(k);
    for (uint32_t v = 0; v < 256; ++v) {
        uint32_t c = v;
        for (int bit = 0; bit < 8; ++bit) {
            c = times_x(c);
        }
        t[v] = k == 0 ? c : multiply(c, shift);
    }
    return t;
}

// The finished CRC-32 of `n` bytes all equal to `byte`.
constexpr uint32_t crc_of_repeated(uint8_t byte, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
        c ^= byte;
        for (int bit = 0; bit < 8; ++bit) {
            c = times_x(c);
        }
    }
    return ~c;
}

}  // namespace crc32_math

namespace detail {
// Exposed so tests can check the carry-less multiplication against the portable one.
uint32_t gf2_multiply_clmul(uint32_t a, uint32_t b);  // only meaningful when has_clmul()
bool has_clmul();
}  // namespace detail

}  // namespace jakiro::rnic
