#include "rnic/wire/headers.hh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "tests/unit/rnic/wire/icrc_vectors.hh"

namespace jakiro::rnic {
namespace {

// The UDP payload (BTH onwards, ICRC included) of a generated vector.
std::vector<uint8_t> udp_payload_of(const test::icrc_vector& v) {
    const size_t ihl = size_t{v.packet[0] & 0x0Fu} * 4;
    return {v.packet + ihl + 8, v.packet + v.len};
}

// Parses from a heap block of exactly `len` bytes, so a read past the end is a heap overflow
// that ASan (-Db_sanitize=address) reports.
parse_result parse_exact(const uint8_t* data, size_t len) {
    auto copy = std::make_unique<uint8_t[]>(len == 0 ? 1 : len);
    std::copy(data, data + len, copy.get());
    parse_result r = parse_roce(copy.get(), len);
    r.packet = {};  // its pointers aim into the copy, which dies here; callers want the error
    return r;
}

TEST(RoceHeaders, LayoutsMatchTheWire) {
    EXPECT_EQ(sizeof(bth_hdr), 12u);
    EXPECT_EQ(sizeof(deth_hdr), 8u);
    EXPECT_EQ(sizeof(reth_hdr), 16u);
    EXPECT_EQ(sizeof(atomic_eth_hdr), 28u);
    EXPECT_EQ(sizeof(aeth_hdr), 4u);
    EXPECT_EQ(sizeof(atomic_ack_eth_hdr), 8u);
    EXPECT_EQ(sizeof(immdt_hdr), 4u);
    EXPECT_EQ(sizeof(ieth_hdr), 4u);
    EXPECT_EQ(offsetof(bth_hdr, dest_qp_be), 5u);
    EXPECT_EQ(offsetof(bth_hdr, psn_be), 9u);
    EXPECT_EQ(offsetof(atomic_eth_hdr, compare_be), 20u);
}

TEST(RoceHeaders, OpcodeTableCoversRcUcUdAndCnp) {
    int valid = 0;
    for (int op = 0; op < 256; ++op) {
        valid += opcode_info_of(static_cast<uint8_t>(op)).valid;
    }
    // RC 0x00-0x14, 0x16/0x17 and ATOMIC WRITE 0x1D; UC 0x20-0x2B; UD 2; CNP.
    EXPECT_EQ(valid, 24 + 12 + 2 + 1);
    EXPECT_TRUE(opcode_info_of(opcode::rc_atomic_write).valid);
    EXPECT_EQ(opcode_info_of(opcode::rc_atomic_write).exts, ext::reth);
    EXPECT_FALSE(opcode_info_of(0x1C).valid);  // FLUSH: not built
    EXPECT_FALSE(opcode_info_of(0x15).valid);  // reserved (RC Reserved between atomics and inv)
    EXPECT_FALSE(opcode_info_of(0x2C).valid);  // UC has no READ
    EXPECT_FALSE(opcode_info_of(0x31).valid);  // UC has no ACK
    EXPECT_FALSE(opcode_info_of(0x44).valid);  // RD is not spoken
    EXPECT_FALSE(opcode_info_of(0x60).valid);  // UD has only SEND Only (+Imm)
    EXPECT_FALSE(opcode_info_of(0x80).valid);
}

TEST(RoceHeaders, OpcodeTableSaysWhichHeadersFollow) {
    EXPECT_EQ(opcode_info_of(opcode::rc_send_only).header_bytes, 12);
    EXPECT_EQ(opcode_info_of(opcode::rc_send_only_imm).exts, ext::immdt);
    EXPECT_EQ(opcode_info_of(opcode::rc_write_first).header_bytes, 12 + 16);
    EXPECT_EQ(opcode_info_of(opcode::rc_write_middle).header_bytes, 12);
    EXPECT_EQ(opcode_info_of(opcode::rc_write_only_imm).header_bytes, 12 + 16 + 4);
    EXPECT_EQ(opcode_info_of(opcode::rc_read_request).header_bytes, 12 + 16);
    EXPECT_FALSE(opcode_info_of(opcode::rc_read_request).payload);
    EXPECT_EQ(opcode_info_of(opcode::rc_read_response_first).exts, ext::aeth);
    EXPECT_EQ(opcode_info_of(opcode::rc_read_response_middle).exts, 0);
    EXPECT_EQ(opcode_info_of(opcode::rc_acknowledge).header_bytes, 12 + 4);
    EXPECT_EQ(opcode_info_of(opcode::rc_atomic_acknowledge).header_bytes, 12 + 4 + 8);
    EXPECT_EQ(opcode_info_of(opcode::rc_compare_swap).header_bytes, 12 + 28);
    EXPECT_EQ(opcode_info_of(opcode::rc_send_last_inv).exts, ext::ieth);
    EXPECT_EQ(opcode_info_of(opcode::uc_write_only_imm).exts, ext::reth | ext::immdt);
    EXPECT_EQ(opcode_info_of(opcode::uc_write_only_imm).transport, transport_type::uc);
    EXPECT_EQ(opcode_info_of(opcode::ud_send_only_imm).header_bytes, 12 + 8 + 4);
    EXPECT_EQ(opcode_info_of(opcode::cnp).header_bytes, 12 + 16);
    EXPECT_EQ(opcode_info_of(opcode::rc_send_first).position, position::first);
    EXPECT_EQ(opcode_info_of(opcode::rc_send_only).position, position::only);
}

TEST(RoceHeaders, ParsesGeneratedVectors) {
    for (const auto& v : test::icrc_vectors) {
        SCOPED_TRACE(v.name);
        const std::vector<uint8_t> udp = udp_payload_of(v);
        const parse_result r = parse_roce(udp.data(), udp.size());
        ASSERT_TRUE(r.ok()) << parse_error_name(r.error);
        const roce_packet& p = r.packet;
        EXPECT_EQ(p.opcode, v.opcode);
        EXPECT_EQ(p.dest_qp, v.dest_qp);
        EXPECT_EQ(p.psn, v.psn);
        EXPECT_EQ(p.pad, v.pad);
        EXPECT_EQ(p.pkey, default_pkey);
        EXPECT_EQ(p.payload.size(), v.payload_len);
        EXPECT_EQ(p.icrc, udp.data() + udp.size() - 4);
        EXPECT_EQ(p.payload.data() + p.payload.size() + p.pad, p.icrc);
    }
}

TEST(RoceHeaders, ParsesExtensionHeaderFields) {
    const auto write = udp_payload_of(test::icrc_vectors[1]);
    const parse_result w = parse_roce(write.data(), write.size());
    ASSERT_TRUE(w.ok());
    ASSERT_NE(w.packet.reth, nullptr);
    EXPECT_EQ(w.packet.reth->va(), 0x00007F0012345678u);
    EXPECT_EQ(w.packet.reth->rkey(), 0xDEADBEEFu);
    EXPECT_EQ(w.packet.reth->dma_len(), 2048u);
    EXPECT_EQ(w.packet.aeth, nullptr);
    EXPECT_EQ(w.packet.payload[0], 3);  // pattern(1024, 3)

    const auto ack = udp_payload_of(test::icrc_vectors[2]);
    const parse_result a = parse_roce(ack.data(), ack.size());
    ASSERT_TRUE(a.ok());
    ASSERT_NE(a.packet.aeth, nullptr);
    EXPECT_EQ(a.packet.aeth->syndrome, 0x1F);
    EXPECT_EQ(a.packet.aeth->msn(), 7u);
    EXPECT_TRUE(a.packet.payload.empty());

    const auto ud = udp_payload_of(test::icrc_vectors[4]);
    const parse_result u = parse_roce(ud.data(), ud.size());
    ASSERT_TRUE(u.ok());
    ASSERT_NE(u.packet.deth, nullptr);
    ASSERT_NE(u.packet.immdt, nullptr);
    EXPECT_EQ(u.packet.deth->qkey(), 0x1234u);
    EXPECT_EQ(u.packet.deth->src_qp(), 0x000203u);
    const uint8_t imm_wire[4] = {1, 2, 3, 4};
    uint32_t imm_be;
    std::memcpy(&imm_be, imm_wire, 4);
    EXPECT_EQ(u.packet.immdt->imm_be(), imm_be);
    EXPECT_TRUE(u.packet.solicited);
}

TEST(RoceHeaders, ParserRejectsTruncation) {
    for (const auto& v : test::icrc_vectors) {
        SCOPED_TRACE(v.name);
        const std::vector<uint8_t> udp = udp_payload_of(v);
        const size_t minimum = opcode_info_of(v.opcode).header_bytes + icrc_bytes;
        for (size_t len = 0; len < minimum; ++len) {
            EXPECT_EQ(parse_exact(udp.data(), len).error, parse_error::truncated) << len;
        }
    }
}

TEST(RoceHeaders, ParserRejectsBadTransportVersion) {
    auto udp = udp_payload_of(test::icrc_vectors[0]);
    udp[1] = static_cast<uint8_t>((udp[1] & 0xF0) | 0x1);
    EXPECT_EQ(parse_roce(udp.data(), udp.size()).error, parse_error::bad_tver);
}

TEST(RoceHeaders, ParserRejectsUnknownOpcodes) {
    auto udp = udp_payload_of(test::icrc_vectors[0]);
    for (uint8_t op : {0x15, 0x2C, 0x40, 0x64 + 2, 0x80, 0xFF}) {
        udp[0] = op;
        EXPECT_EQ(parse_roce(udp.data(), udp.size()).error, parse_error::unknown_opcode) << +op;
    }
}

// A SEND Only with `payload` bytes and PadCnt `pad`, then a zero ICRC.
std::vector<uint8_t> send_only(size_t payload, uint8_t pad) {
    std::vector<uint8_t> pkt(12 + payload + 4);
    bth_fields f;
    f.opcode = opcode::rc_send_only;
    f.pad = pad;
    EXPECT_EQ(build_roce_headers(pkt.data(), pkt.size(), f, {}), 12u);
    return pkt;
}

TEST(RoceHeaders, ParserRejectsPadBeyondPayload) {
    auto empty = send_only(0, 2);
    EXPECT_EQ(parse_exact(empty.data(), empty.size()).error, parse_error::pad_beyond_payload);
    auto four = send_only(4, 3);  // 1 byte of data + 3 pad: fine
    EXPECT_TRUE(parse_exact(four.data(), four.size()).error == parse_error::none);
}

TEST(RoceHeaders, ParserRejectsPayloadNotInFourByteUnits) {
    auto odd = send_only(3, 0);
    EXPECT_EQ(parse_exact(odd.data(), odd.size()).error, parse_error::misaligned_payload);
}

TEST(RoceHeaders, ParserRejectsPayloadOnOpcodesWithoutIt) {
    std::vector<uint8_t> ack(12 + 4 + 4 + 4);
    bth_fields f;
    f.opcode = opcode::rc_acknowledge;
    ASSERT_EQ(build_roce_headers(ack.data(), ack.size(), f, {}), 16u);
    EXPECT_EQ(parse_exact(ack.data(), ack.size()).error, parse_error::unexpected_payload);
    EXPECT_TRUE(parse_exact(ack.data(), ack.size() - 4).error == parse_error::none);
    ack[1] |= 0x10;  // PadCnt 1 on a packet that has no payload to pad
    EXPECT_EQ(parse_exact(ack.data(), ack.size() - 4).error, parse_error::unexpected_payload);
}

TEST(RoceHeaders, ParserSurvivesRandomBytes) {
    std::mt19937 rng(4791);
    for (int i = 0; i < 20000; ++i) {
        const size_t len = rng() % 96;
        auto buf = std::make_unique<uint8_t[]>(len == 0 ? 1 : len);
        for (size_t k = 0; k < len; ++k) {
            buf[k] = static_cast<uint8_t>(rng());
        }
        if (len > 1 && (i & 1)) {
            buf[1] &= 0xF0;  // TVer 0 half the time, to reach the deeper checks
        }
        const parse_result r = parse_roce(buf.get(), len);
        if (!r.ok()) {
            continue;
        }
        const uint8_t* end = buf.get() + len;
        ASSERT_LE(r.packet.payload.data() + r.packet.payload.size() + r.packet.pad, end);
        ASSERT_EQ(r.packet.icrc + 4, end);
    }
}

TEST(RoceHeaders, BuilderRoundTripsEveryOpcode) {
    for (int op = 0; op < 256; ++op) {
        const opcode_info& info = opcode_info_of(static_cast<uint8_t>(op));
        if (!info.valid) {
            continue;
        }
        SCOPED_TRACE(info.name);
        bth_fields f;
        f.opcode = static_cast<uint8_t>(op);
        f.dest_qp = 0xABCDEF;
        f.psn = 0xFFFFFE;
        f.pkey = 0x8001;
        f.solicited = true;
        f.ack_req = true;
        ext_fields e;
        e.qkey = 0x11223344;
        e.src_qp = 0x00C0FE;
        e.va = 0x0102030405060708;
        e.rkey = 0xCAFEBABE;
        e.dma_len = 65536;
        e.swap_add = 0x1111222233334444;
        e.compare = 0x5555666677778888;
        e.syndrome = 0x61;
        e.msn = 0x123456;
        e.orig = 0x99AABBCCDDEEFF00;
        e.imm_be = 0xA1B2C3D4;
        e.inv_rkey = 0x0BADF00D;
        const size_t payload = info.payload ? 5 : 0;
        f.pad = pad_count(payload);
        std::vector<uint8_t> pkt(info.header_bytes + payload + f.pad + icrc_bytes, 0xEE);
        ASSERT_EQ(build_roce_headers(pkt.data(), pkt.size(), f, e), info.header_bytes);

        const parse_result r = parse_roce(pkt.data(), pkt.size());
        ASSERT_TRUE(r.ok()) << parse_error_name(r.error);
        const roce_packet& p = r.packet;
        EXPECT_EQ(p.opcode, op);
        EXPECT_EQ(p.dest_qp, 0xABCDEFu);
        EXPECT_EQ(p.psn, 0xFFFFFEu);
        EXPECT_EQ(p.pkey, 0x8001);
        EXPECT_TRUE(p.solicited);
        EXPECT_TRUE(p.ack_req);
        EXPECT_FALSE(p.migreq);
        EXPECT_EQ(p.bth->resv8, 0);
        EXPECT_EQ(p.payload.size(), payload);
        EXPECT_EQ(p.deth != nullptr, (info.exts & ext::deth) != 0);
        if (p.deth) {
            EXPECT_EQ(p.deth->qkey(), e.qkey);
            EXPECT_EQ(p.deth->src_qp(), e.src_qp);
        }
        if (p.reth) {
            EXPECT_EQ(p.reth->va(), e.va);
            EXPECT_EQ(p.reth->rkey(), e.rkey);
            EXPECT_EQ(p.reth->dma_len(), e.dma_len);
        }
        if (p.atomic_eth) {
            EXPECT_EQ(p.atomic_eth->va(), e.va);
            EXPECT_EQ(p.atomic_eth->rkey(), e.rkey);
            EXPECT_EQ(p.atomic_eth->swap_add(), e.swap_add);
            EXPECT_EQ(p.atomic_eth->compare(), e.compare);
        }
        if (p.aeth) {
            EXPECT_EQ(p.aeth->syndrome, e.syndrome);
            EXPECT_EQ(p.aeth->msn(), e.msn);
        }
        if (p.atomic_ack_eth) {
            EXPECT_EQ(p.atomic_ack_eth->orig(), e.orig);
        }
        if (p.immdt) {
            EXPECT_EQ(p.immdt->imm_be(), e.imm_be);
        }
        if (p.ieth) {
            EXPECT_EQ(p.ieth->rkey(), e.inv_rkey);
        }
        EXPECT_EQ(p.reth != nullptr, (info.exts & ext::reth) != 0);
        EXPECT_EQ(p.atomic_eth != nullptr, (info.exts & ext::atomic_eth) != 0);
        EXPECT_EQ(p.aeth != nullptr, (info.exts & ext::aeth) != 0);
        EXPECT_EQ(p.atomic_ack_eth != nullptr, (info.exts & ext::atomic_ack_eth) != 0);
        EXPECT_EQ(p.immdt != nullptr, (info.exts & ext::immdt) != 0);
        EXPECT_EQ(p.ieth != nullptr, (info.exts & ext::ieth) != 0);
        EXPECT_EQ(p.cnp != nullptr, (info.exts & ext::cnp) != 0);
    }
}

TEST(RoceHeaders, BuilderMatchesScapyBytes) {
    const auto& v = test::icrc_vectors[0];  // RC SEND Only, AckReq, PadCnt 3
    const auto udp = udp_payload_of(v);
    bth_fields f;
    f.opcode = v.opcode;
    f.dest_qp = v.dest_qp;
    f.psn = v.psn;
    f.pad = v.pad;
    f.ack_req = true;
    uint8_t out[12];
    ASSERT_EQ(build_roce_headers(out, sizeof(out), f, {}), 12u);
    EXPECT_TRUE(std::equal(out, out + 12, udp.begin()));
}

TEST(RoceHeaders, BuilderRefusesUnknownOpcodeAndShortBuffer) {
    uint8_t out[64];
    bth_fields f;
    f.opcode = 0x15;
    EXPECT_EQ(build_roce_headers(out, sizeof(out), f, {}), 0u);
    f.opcode = opcode::rc_write_first;
    EXPECT_EQ(build_roce_headers(out, 27, f, {}), 0u);
    EXPECT_EQ(build_roce_headers(out, 28, f, {}), 28u);
}

TEST(RoceHeaders, BuilderKeeps24BitFieldsIn24Bits) {
    uint8_t out[12];
    bth_fields f;
    f.opcode = opcode::rc_send_only;
    f.dest_qp = 0xFF123456;
    f.psn = 0x01000005;
    ASSERT_EQ(build_roce_headers(out, sizeof(out), f, {}), 12u);
    const auto* bth = reinterpret_cast<const bth_hdr*>(out);
    EXPECT_EQ(bth->resv8, 0);
    EXPECT_EQ(bth->dest_qp(), 0x123456u);
    EXPECT_EQ(bth->psn(), 5u);
}

TEST(RoceHeaders, PadCountRoundsToFourBytes) {
    EXPECT_EQ(pad_count(0), 0);
    EXPECT_EQ(pad_count(1), 3);
    EXPECT_EQ(pad_count(2), 2);
    EXPECT_EQ(pad_count(3), 1);
    EXPECT_EQ(pad_count(1024), 0);
}

}  // namespace
}  // namespace jakiro::rnic
