#pragma once

// Reproducible byte patterns: byte i of pattern `seed` is byte i % 8 of a splitmix64 mix of
// (seed, i / 8). Counter-based, so any stretch of a message can be made or checked on its own
// (a message gathered from several SGEs, or checked slot by slot), and two seeds give
// unrelated bytes: a stale or misplaced buffer never passes for the right one.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

namespace jakiro::rdma_test {

constexpr uint64_t mix64(uint64_t z) {
    // splitmix64's finalizer (Steele, Lea, Flood: "Fast splittable pseudorandom number
    // generators", 2014).
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

constexpr uint64_t pattern_word(uint64_t seed, uint64_t index) {
    return mix64(seed + (index + 1) * 0x9e3779b97f4a7c15ULL);
}

// Writes bytes [offset, offset + out.size()) of pattern `seed` into `out`.
inline void fill_pattern(std::span<uint8_t> out, uint64_t seed, uint64_t offset) {
    std::size_t i = 0;
    while (i < out.size()) {
        const uint64_t at = offset + i;
        const uint64_t word = pattern_word(seed, at / 8);
        uint8_t bytes[8];
        for (int b = 0; b < 8; ++b) {
            bytes[b] = static_cast<uint8_t>(word >> (8 * b));
        }
        const std::size_t from = at % 8;
        const std::size_t n = std::min<std::size_t>(8 - from, out.size() - i);
        std::memcpy(out.data() + i, bytes + from, n);
        i += n;
    }
}

// The index of the first byte of `got` that differs from bytes [offset, …) of pattern `seed`,
// or got.size() when all match.
inline std::size_t pattern_mismatch(std::span<const uint8_t> got, uint64_t seed, uint64_t offset) {
    uint8_t expected[4096];
    for (std::size_t i = 0; i < got.size(); i += sizeof(expected)) {
        const std::size_t n = std::min(sizeof(expected), got.size() - i);
        fill_pattern(std::span(expected, n), seed, offset + i);
        if (std::memcmp(expected, got.data() + i, n) != 0) {
            for (std::size_t j = 0; j < n; ++j) {
                if (expected[j] != got[i + j]) {
                    return i + j;
                }
            }
        }
    }
    return got.size();
}

// Byte i of pattern `seed`, for messages about a mismatch.
inline uint8_t pattern_byte(uint64_t seed, uint64_t i) {
    return static_cast<uint8_t>(pattern_word(seed, i / 8) >> (8 * (i % 8)));
}

}  // namespace jakiro::rdma_test
