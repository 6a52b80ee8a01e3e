#pragma once
// 24-bit packet sequence numbers (IBTA ch. 9.7): arithmetic modulo 2^24, and the responder's split
// of the PSN space around the expected PSN into "ahead" and "duplicate" halves.

#include <cstdint>

namespace jakiro::rnic {

constexpr uint32_t psn_bits = 24;
constexpr uint32_t psn_mask = (1u << psn_bits) - 1;
constexpr uint32_t psn_half_space = 1u << (psn_bits - 1);  // 2^23

constexpr uint32_t psn_add(uint32_t psn, uint32_t n) {
    return (psn + n) & psn_mask;
}

constexpr uint32_t psn_sub(uint32_t psn, uint32_t n) {
    return (psn - n) & psn_mask;
}

// Signed distance a - b, taken the short way round the circle: in [-2^23, 2^23 - 1]. Shifting
// the 24-bit difference into the top of an int32 and back sign-extends it.
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
    return static_cast<int32_t>((a - b) << (32 - psn_bits)) >> (32 - psn_bits);
}

// a comes strictly before b / at or before b, modulo 2^24.
constexpr bool psn_before(uint32_t a, uint32_t b) {
    return psn_diff(a, b) < 0;
}
constexpr bool psn_before_eq(uint32_t a, uint32_t b) {
    return psn_diff(a, b) <= 0;
}

// psn lies in the half-open window [first, end) that does not wrap more than half the space
// (e.g. the requester's outstanding PSNs).
constexpr bool psn_in_window(uint32_t psn, uint32_t first, uint32_t end) {
    return psn_diff(psn, first) >= 0 && psn_diff(end, psn) > 0;
}

// How a responder treats a request PSN relative to the one it expects (IBTA ch. 9.7 /
// docs/roce-wire.md "PSN validity"): the 2^23 PSNs before `expected` are duplicates (re-ACK,
// re-execute READ, replay atomics); the 2^23 - 1 after it are a sequence error (NAK once, then drop
// until `expected`).
enum class psn_class : uint8_t { expected, ahead, duplicate };

constexpr psn_class classify_request_psn(uint32_t psn, uint32_t expected) {
    const int32_t d = psn_diff(psn, expected);
    if (d == 0) {
        return psn_class::expected;
    }
    return d > 0 ? psn_class::ahead : psn_class::duplicate;
}

}  // namespace jakiro::rnic
