#pragma once
// QP timer attributes turned into time: the local ACK timeout (ibv_qp_attr::timeout) and the RNR
// NAK timer codes (ibv_qp_attr::min_rnr_timer, carried in RNR NAK syndromes). IBTA ch. 9.7.

#include <array>
#include <cstdint>
#include <optional>

namespace jakiro::rnic {

// RNR timer code -> microseconds the requester waits before retrying. Code 0 is the longest
// (655.36 ms), not zero: the table wraps so that 5 bits cover 10 µs .. 655 ms.
constexpr std::array<uint32_t, 32> rnr_timer_us_table = {
    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

constexpr uint32_t rnr_timer_us(uint8_t code) {
    return rnr_timer_us_table[code & 0x1F];
}

// rnr_retry 7 means "retry for ever"; 0-6 are counts.
constexpr uint8_t rnr_retry_infinite = 7;

// Local ACK timeout: 4.096 µs · 2^timeout, i.e. 4096 ns << timeout. timeout 0 disables the
// timer (wait for ever) and yields nullopt; values above 31 are invalid and rejected by
// modify_qp, so they are clamped here only to keep the shift defined.
constexpr std::optional<uint64_t> local_ack_timeout_ns(uint8_t timeout) {
    if (timeout == 0) {
        return std::nullopt;
    }
    return uint64_t{4096} << (timeout > 31 ? 31 : timeout);
}

}  // namespace jakiro::rnic
