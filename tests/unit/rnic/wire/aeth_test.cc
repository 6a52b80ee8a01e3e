#include "rnic/wire/aeth.hh"

#include <gtest/gtest.h>

namespace jakiro::rnic {
namespace {

TEST(Aeth, AckSyndromeRoundTripsEveryCreditCode) {
    for (uint8_t code = 0; code <= credits_invalid; ++code) {
        const syndrome_fields f = decode_syndrome(syndrome_ack(code));
        EXPECT_EQ(f.kind, aeth_kind::ack);
        EXPECT_EQ(f.value, code);
    }
    EXPECT_EQ(syndrome_ack(credits_invalid), 0x1F);
}

TEST(Aeth, RnrNakSyndromeRoundTripsEveryTimerCode) {
    for (uint8_t code = 0; code < 32; ++code) {
        const uint8_t s = syndrome_rnr_nak(code);
        EXPECT_EQ(s >> 5, 1);
        const syndrome_fields f = decode_syndrome(s);
        EXPECT_EQ(f.kind, aeth_kind::rnr_nak);
        EXPECT_EQ(f.value, code);
    }
}

TEST(Aeth, NakSyndromesHaveTheWireValues) {
    EXPECT_EQ(syndrome_nak(nak_code::psn_sequence_error), 0x60);
    EXPECT_EQ(syndrome_nak(nak_code::invalid_request), 0x61);
    EXPECT_EQ(syndrome_nak(nak_code::remote_access_error), 0x62);
    EXPECT_EQ(syndrome_nak(nak_code::remote_operational_error), 0x63);
    EXPECT_EQ(syndrome_nak(nak_code::invalid_rd_request), 0x64);
    for (uint8_t c = 0; c <= 4; ++c) {
        const syndrome_fields f = decode_syndrome(syndrome_nak(static_cast<nak_code>(c)));
        EXPECT_EQ(f.kind, aeth_kind::nak);
        EXPECT_EQ(f.value, c);
        EXPECT_TRUE(nak_code_known(f.value));
    }
    EXPECT_FALSE(nak_code_known(5));
}

TEST(Aeth, ReservedSyndromeKindsDecodeAsReserved) {
    EXPECT_EQ(decode_syndrome(0x40).kind, aeth_kind::reserved);  // 010
    EXPECT_EQ(decode_syndrome(0x80).kind, aeth_kind::reserved);  // bit 7 set
    EXPECT_EQ(decode_syndrome(0xE1).kind, aeth_kind::reserved);
}

TEST(Aeth, CreditCodeNeverPromisesMoreThanPosted) {
    EXPECT_EQ(credit_code(0), 0);
    EXPECT_EQ(credit_code(4), 4);
    EXPECT_EQ(credit_code(5), 4);  // 6 would be too many
    EXPECT_EQ(credit_code(6), 5);
    EXPECT_EQ(credit_code(255), 15);  // 192
    EXPECT_EQ(credit_code(256), 16);
    EXPECT_EQ(credit_code(32768), 30);
    EXPECT_EQ(credit_code(1u << 20), 30);
    for (uint32_t n = 0; n < 40000; n += 7) {
        EXPECT_LE(credit_count_table[credit_code(n)], n);
    }
}

}  // namespace
}  // namespace jakiro::rnic
