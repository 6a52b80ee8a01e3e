#pragma once
// The AETH syndrome byte (IBTA ch. 9.7): ACK with an end-to-end credit code, RNR NAK with a
// timer code (timers.hh), or NAK with an error code. Bit 7 is reserved and must be 0.

#include <cstdint>

namespace jakiro::rnic {

enum class aeth_kind : uint8_t {
    ack = 0,      // 000
    rnr_nak = 1,  // 001
    nak = 3,      // 011
    reserved,     // 010 and 1xx: not a valid syndrome
};

enum class nak_code : uint8_t {
    psn_sequence_error = 0,
    invalid_request = 1,
    remote_access_error = 2,
    remote_operational_error = 3,
    invalid_rd_request = 4,
};

// Credit code 31 means "no end-to-end credits advertised" (the responder has a shared receive
// queue or simply does not count); requesters then send without waiting for credits.
constexpr uint8_t credits_invalid = 0x1F;

// Credit codes 0-30 stand for these receive WQE counts: exact up to 4, then two steps per power
// of two (IBTA ch. 9.7, as in rdmavt's credit_table).
constexpr uint16_t credit_count_table[31] = {
    0,   1,   2,   3,   4,    6,    8,    12,   16,   24,   32,   48,    64,    96,    128,  192,
    256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768};

// The largest code whose count does not exceed `available` receive WQEs: never promise more
// than is posted.
constexpr uint8_t credit_code(uint32_t available) {
    uint8_t code = 0;
    while (code + 1 < 31 && credit_count_table[code + 1] <= available) {
        ++code;
    }
    return code;
}

constexpr uint8_t syndrome_ack(uint8_t credit_code) {
    return credit_code & 0x1F;
}

constexpr uint8_t syndrome_rnr_nak(uint8_t rnr_timer_code) {
    return static_cast<uint8_t>(0x20 | (rnr_timer_code & 0x1F));
}

constexpr uint8_t syndrome_nak(nak_code code) {
    return static_cast<uint8_t>(0x60 | static_cast<uint8_t>(code));
}

struct syndrome_fields {
    aeth_kind kind;
    uint8_t value;  // credit code, RNR timer code or NAK code (5 bits)
};

constexpr syndrome_fields decode_syndrome(uint8_t syndrome) {
    const uint8_t value = syndrome & 0x1F;
    switch (syndrome >> 5) {
        case 0:
            return {aeth_kind::ack, value};
        case 1:
            return {aeth_kind::rnr_nak, value};
        case 3:
            return {aeth_kind::nak, value};
        default:
            return {aeth_kind::reserved, value};
    }
}

// A NAK code the requester understands; codes 5-31 are reserved and treated like a malformed ACK.
constexpr bool nak_code_known(uint8_t value) {
    return value <= static_cast<uint8_t>(nak_code::invalid_rd_request);
}

}  // namespace jakiro::rnic
