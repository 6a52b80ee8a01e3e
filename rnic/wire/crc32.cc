#include "rnic/wire/crc32.hh"

#include <intel-ipsec-mb.h>

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace jakiro::rnic {

namespace {

using crc32_math::multiply;

// Slice-by-8 tables (Intel's "slicing-by-8"). slice[0..3] double as the reduction of a 64-bit
// carry-less product.
constexpr std::array<std::array<uint32_t, 256>, 8> slice = {
    crc32_math::byte_table(0), crc32_math::byte_table(1), crc32_math::byte_table(2),
    crc32_math::byte_table(3), crc32_math::byte_table(4), crc32_math::byte_table(5),
    crc32_math::byte_table(6), crc32_math::byte_table(7)};

// x^(8·n) mod P for n = lo + 256·hi: two 256-entry tables cover every IPv4 packet length, so a
// shift costs at most two multiplications whatever the payload size.
struct power_tables {
    std::array<uint32_t, 256> lo;  // x^(8·k)
    std::array<uint32_t, 256> hi;  // x^(8·256·k)
    uint32_t x_pow_8_65536;        // for lengths beyond 64 KiB (never on the wire; kept total)
};

constexpr power_tables make_power_tables() {
    power_tables t{};
    uint32_t p = crc32_math::one;
    for (size_t k = 0; k < 256; ++k) {
        t.lo[k] = p;
        for (int bit = 0; bit < 8; ++bit) {
            p = crc32_math::times_x(p);
        }
    }
    // p is now x^(8·256)
    t.hi[0] = crc32_math::one;
    for (size_t k = 1; k < 256; ++k) {
        t.hi[k] = multiply(t.hi[k - 1], p);
    }
    t.x_pow_8_65536 = multiply(t.hi[255], p);
    return t;
}

constexpr power_tables powers = make_power_tables();

#if defined(__x86_64__)
// Reflected operands give a 63-bit reflected product one bit short of 64: shift it up. Its high
// half then already has degree < 32; the low half L stands for L·x^32, which is what a CRC
// register becomes after four zero bytes, i.e. one slice-by-4 step.
__attribute__((target("pclmul"))) uint32_t multiply_clmul(uint32_t a, uint32_t b) {
    const __m128i p = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(a)),
                                           _mm_cvtsi32_si128(static_cast<int>(b)), 0x00);
    const uint64_t q = static_cast<uint64_t>(_mm_cvtsi128_si64(p)) << 1;
    const auto lo = static_cast<uint32_t>(q);
    return static_cast<uint32_t>(q >> 32) ^ slice[3][lo & 0xFF] ^ slice[2][(lo >> 8) & 0xFF] ^
           slice[1][(lo >> 16) & 0xFF] ^ slice[0][lo >> 24];
}
#endif

// Everything needing run-time discovery, set up once.
struct backend {
    crc32_fn_t imb_crc32 = nullptr;
    const char* arch = "none";
    bool clmul = false;

    backend() {
#if defined(__x86_64__)
        clmul = __builtin_cpu_supports("pclmul");
#endif
        // The manager (200 KB of job queues) only serves to pick the CPU-specific function: the
        // CRC functions take no manager argument and keep no state in it, so it can go at once.
        IMB_MGR* mgr = alloc_mb_mgr(0);
        if (mgr == nullptr) {
            return;
        }
        IMB_ARCH picked = IMB_ARCH_NONE;
        init_mb_mgr_auto(mgr, &picked);
        if (imb_get_errno(mgr) == 0) {
            imb_crc32 = mgr->crc32_ethernet_fcs;
        }
        free_mb_mgr(mgr);
        if (imb_crc32 == nullptr) {
            return;
        }
        switch (picked) {
            case IMB_ARCH_NOAESNI:
                arch = "noaesni";
                break;
            case IMB_ARCH_SSE:
                arch = "sse";
                break;
            case IMB_ARCH_AVX:
                arch = "avx";
                break;
            case IMB_ARCH_AVX2:
                arch = "avx2";
                break;
            case IMB_ARCH_AVX512:
                arch = "avx512";
                break;
            default:
                arch = "unknown";
                break;
        }
    }
};

const backend& cpu() {
    static const backend b;
    return b;
}

inline uint32_t fast_multiply(uint32_t a, uint32_t b) {
#if defined(__x86_64__)
    if (cpu().clmul) {
        return multiply_clmul(a, b);
    }
#endif
    return multiply(a, b);
}

}  // namespace

uint32_t crc32_ipsec_mb(const uint8_t* data, size_t len) {
    if (len == 0) {
        return 0;  // CRC of nothing; spares a call
    }
    const backend& b = cpu();
    if (b.imb_crc32 == nullptr) {
        return crc32_slice8(0, data, len);  // IPSec-MB could not allocate a manager
    }
    return b.imb_crc32(data, len);
}

uint32_t crc32_slice8(uint32_t crc, const uint8_t* data, size_t len) {
    crc = ~crc;
    while (len >= 8) {
        uint32_t one;
        uint32_t two;
        std::memcpy(&one, data, 4);  // little-endian loads: byte 0 meets the register's LSB
        std::memcpy(&two, data + 4, 4);
        one ^= crc;
        crc = slice[7][one & 0xFF] ^ slice[6][(one >> 8) & 0xFF] ^ slice[5][(one >> 16) & 0xFF] ^
              slice[4][one >> 24] ^ slice[3][two & 0xFF] ^ slice[2][(two >> 8) & 0xFF] ^
              slice[1][(two >> 16) & 0xFF] ^ slice[0][two >> 24];
        data += 8;
        len -= 8;
    }
    while (len-- > 0) {
        crc = slice[0][(crc ^ *data++) & 0xFF] ^ (crc >> 8);
    }
    return ~crc;
}

uint32_t crc32_shift(uint32_t reg, size_t n) {
    // Under 256 bytes (ACKs, small SENDs) a single multiplication does.
    const size_t hi = (n >> 8) & 0xFF;
    uint32_t r = fast_multiply(reg, powers.lo[n & 0xFF]);
    if (hi != 0) {
        r = fast_multiply(r, powers.hi[hi]);
    }
    for (n >>= 16; n > 0; --n) {
        r = fast_multiply(r, powers.x_pow_8_65536);
    }
    return r;
}

const char* crc32_ipsec_mb_arch() {
    return cpu().arch;
}

namespace detail {

uint32_t gf2_multiply_clmul(uint32_t a, uint32_t b) {
#if defined(__x86_64__)
    return multiply_clmul(a, b);
#else
    return multiply(a, b);
#endif
}

bool has_clmul() {
    return cpu().clmul;
}

}  // namespace detail

}  // namespace jakiro::rnic
