#include "rnic/wire/crc32.hh"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace jakiro::rnic {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) {
        b = static_cast<uint8_t>(rng());
    }
    return v;
}

const uint8_t check_input[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
constexpr uint32_t check_value = 0xCBF43926;  // CRC-32/ISO-HDLC, what zlib.crc32 returns

TEST(Crc32, IpsecMbIsTheZlibCrc) {
    EXPECT_EQ(crc32_ipsec_mb(check_input, sizeof(check_input)), check_value);
    EXPECT_EQ(crc32_ipsec_mb(check_input, 0), 0u);
    EXPECT_STRNE(crc32_ipsec_mb_arch(), "none");
}

TEST(Crc32, Slice8IsTheZlibCrc) {
    EXPECT_EQ(crc32_slice8(0, check_input, sizeof(check_input)), check_value);
    EXPECT_EQ(crc32_slice8(0, check_input, 0), 0u);
    // zlib-style running CRC
    const uint32_t first = crc32_slice8(0, check_input, 4);
    EXPECT_EQ(crc32_slice8(first, check_input + 4, 5), check_value);
}

TEST(Crc32, IpsecMbAndSlice8AgreeOnEveryLengthAndAlignment) {
    const auto data = random_bytes(4200, 1);
    for (size_t offset = 0; offset < 8; ++offset) {
        for (size_t len = 0; len + offset <= data.size(); len += (len < 300 ? 1 : 97)) {
            ASSERT_EQ(crc32_ipsec_mb(data.data() + offset, len),
                      crc32_slice8(0, data.data() + offset, len))
                << "offset " << offset << " len " << len;
        }
    }
}

TEST(Crc32, CombineJoinsTwoIndependentCrcs) {
    const auto data = random_bytes(70000, 2);  // beyond 64 KiB: crc32_shift's slow tail
    std::mt19937 rng(3);
    std::vector<std::pair<size_t, size_t>> cuts = {{0, 0},     {0, 9},     {9, 0},      {40, 4},
                                                   {40, 255},  {40, 256},  {40, 257},   {88, 4096},
                                                   {1, 65535}, {3, 65536}, {100, 69000}};
    for (int i = 0; i < 300; ++i) {
        const size_t a = rng() % 200;
        cuts.emplace_back(a, rng() % (data.size() - a));
    }
    for (const auto& [len_a, len_b] : cuts) {
        const uint32_t whole = crc32_slice8(0, data.data(), len_a + len_b);
        const uint32_t a = crc32_slice8(0, data.data(), len_a);
        const uint32_t b = crc32_slice8(0, data.data() + len_a, len_b);
        ASSERT_EQ(crc32_combine(a, b, len_b), whole) << len_a << "+" << len_b;
    }
}

TEST(Crc32, CarrylessMultiplyMatchesPortable) {
    if (!detail::has_clmul()) {
        GTEST_SKIP() << "no PCLMULQDQ on this CPU";
    }
    std::mt19937 rng(4);
    for (int i = 0; i < 100000; ++i) {
        const uint32_t a = rng();
        const uint32_t b = i < 4 ? 0u : rng();
        ASSERT_EQ(detail::gf2_multiply_clmul(a, b), crc32_math::multiply(a, b));
    }
    EXPECT_EQ(detail::gf2_multiply_clmul(0x80000000, 0x12345678), 0x12345678u);  // 1 · b
}

TEST(Crc32, ShiftMatchesCompileTimeArithmetic) {
    std::mt19937 rng(5);
    for (size_t n : {0, 1, 7, 8, 31, 255, 256, 1000, 4056, 9000, 65535, 65536, 70000}) {
        const uint32_t reg = rng();
        EXPECT_EQ(crc32_shift(reg, n), crc32_math::multiply(reg, crc32_math::x_pow_8n_slow(n)))
            << n;
    }
    const uint8_t ff[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    EXPECT_EQ(crc32_math::crc_of_repeated(0xFF, 8), crc32_slice8(0, ff, 8));
}

TEST(Crc32, PowerOfXMovesACrcPastZeroBytes) {
    // Appending n zero bytes to a message = the register times x^(8n), so
    // crc(m || 0^n) = combine(crc(m), crc(0^n), n).
    const uint8_t zeros[600] = {};
    const uint32_t m = crc32_slice8(0, check_input, sizeof(check_input));
    for (size_t n : {0, 1, 4, 255, 256, 257, 599}) {
        std::vector<uint8_t> msg(check_input, check_input + sizeof(check_input));
        msg.insert(msg.end(), zeros, zeros + n);
        EXPECT_EQ(crc32_combine(m, crc32_slice8(0, zeros, n), n),
                  crc32_slice8(0, msg.data(), msg.size()));
    }
}

}  // namespace
}  // namespace jakiro::rnic
