#pragma once
// RoCEv2 transport headers (IBTA vol. 1 ch. 9, annex A17): wire layouts, the opcode table, a
// bounds-checked parser and a builder. Everything after the UDP header up to the ICRC.
// Pure functions over bytes, no DPDK, so the engine's packet logic is unit-testable.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "rnic/wire/byte_order.hh"

namespace jakiro::rnic {

constexpr uint16_t roce_udp_port = 4791;   // IANA port for RoCEv2
constexpr uint16_t default_pkey = 0xFFFF;  // full-member default partition; RoCE has no SM
// BTH TVer: the only transport header version there is; receivers silently drop any other.
constexpr uint8_t transport_version = 0;
constexpr size_t icrc_bytes = 4;

// ---- wire layouts -------------------------------------------------------------------------
// Byte arrays only, so every struct has alignment 1 and can overlay any offset in a frame; the
// accessors do the byte order. [[gnu::packed]] is belt and braces for that promise.

struct [[gnu::packed]] bth_hdr {
    uint8_t opcode;
    uint8_t flags;  // SE (7) · MigReq (6) · PadCnt (5-4) · TVer (3-0)
    uint8_t pkey_be[2];
    uint8_t resv8;  // FECN/BECN in IB; RoCEv2 moves congestion to IP ECN, so reserved (ICRC-masked)
    uint8_t dest_qp_be[3];
    uint8_t ack_req;  // AckReq (7), rest reserved
    uint8_t psn_be[3];

    static constexpr uint8_t se_bit = 0x80;
    static constexpr uint8_t migreq_bit = 0x40;
    static constexpr uint8_t ack_req_bit = 0x80;

    bool solicited() const { return flags & se_bit; }
    bool migreq() const { return flags & migreq_bit; }
    uint8_t pad() const { return (flags >> 4) & 0x3; }
    uint8_t tver() const { return flags & 0xF; }
    uint16_t pkey() const { return load_be16(pkey_be); }
    uint32_t dest_qp() const { return load_be24(dest_qp_be); }
    bool ack_requested() const { return ack_req & ack_req_bit; }
    uint32_t psn() const { return load_be24(psn_be); }
};
static_assert(sizeof(bth_hdr) == 12 && alignof(bth_hdr) == 1);
static_assert(offsetof(bth_hdr, pkey_be) == 2 && offsetof(bth_hdr, resv8) == 4);
static_assert(offsetof(bth_hdr, dest_qp_be) == 5 && offsetof(bth_hdr, ack_req) == 8);
static_assert(offsetof(bth_hdr, psn_be) == 9);

// Datagram ETH (UD): the Q_Key the receiver checks and the sender's QP.
struct [[gnu::packed]] deth_hdr {
    uint8_t qkey_be[4];
    uint8_t resv8;
    uint8_t src_qp_be[3];

    uint32_t qkey() const { return load_be32(qkey_be); }
    uint32_t src_qp() const { return load_be24(src_qp_be); }
};
static_assert(sizeof(deth_hdr) == 8 && offsetof(deth_hdr, src_qp_be) == 5);

// RDMA ETH: where a WRITE or READ lands in the responder's memory, and how much in total.
struct [[gnu::packed]] reth_hdr {
    uint8_t va_be[8];
    uint8_t rkey_be[4];
    uint8_t dma_len_be[4];

    uint64_t va() const { return load_be64(va_be); }
    uint32_t rkey() const { return load_be32(rkey_be); }
    uint32_t dma_len() const { return load_be32(dma_len_be); }
};
static_assert(sizeof(reth_hdr) == 16);
static_assert(offsetof(reth_hdr, rkey_be) == 8 && offsetof(reth_hdr, dma_len_be) == 12);

// Atomic ETH: CmpSwap uses both operands, FetchAdd only swap_add.
struct [[gnu::packed]] atomic_eth_hdr {
    uint8_t va_be[8];
    uint8_t rkey_be[4];
    uint8_t swap_add_be[8];
    uint8_t compare_be[8];

    uint64_t va() const { return load_be64(va_be); }
    uint32_t rkey() const { return load_be32(rkey_be); }
    uint64_t swap_add() const { return load_be64(swap_add_be); }
    uint64_t compare() const { return load_be64(compare_be); }
};
static_assert(sizeof(atomic_eth_hdr) == 28);
static_assert(offsetof(atomic_eth_hdr, rkey_be) == 8);
static_assert(offsetof(atomic_eth_hdr, swap_add_be) == 12);
static_assert(offsetof(atomic_eth_hdr, compare_be) == 20);

// ACK ETH: syndrome (see aeth.hh) and the responder's message sequence number.
struct [[gnu::packed]] aeth_hdr {
    uint8_t syndrome;
    uint8_t msn_be[3];

    uint32_t msn() const { return load_be24(msn_be); }
};
static_assert(sizeof(aeth_hdr) == 4 && offsetof(aeth_hdr, msn_be) == 1);

// Atomic ACK ETH: the value the target held before the atomic.
struct [[gnu::packed]] atomic_ack_eth_hdr {
    uint8_t orig_be[8];

    uint64_t orig() const { return load_be64(orig_be); }
};
static_assert(sizeof(atomic_ack_eth_hdr) == 8);

// Immediate data. Verbs hands it around in network order (ibv_send_wr/ibv_wc::imm_data are
// __be32), so it is passed through as raw bytes, never swapped.
struct [[gnu::packed]] immdt_hdr {
    uint8_t imm[4];

    uint32_t imm_be() const {
        uint32_t v;
        std::memcpy(&v, imm, sizeof(v));
        return v;
    }
};
static_assert(sizeof(immdt_hdr) == 4);

// Invalidate ETH: the R_Key a SEND with Invalidate retires at the responder.
struct [[gnu::packed]] ieth_hdr {
    uint8_t rkey_be[4];

    uint32_t rkey() const { return load_be32(rkey_be); }
};
static_assert(sizeof(ieth_hdr) == 4);

// A CNP carries 16 reserved bytes after the BTH (annex A17); they are header, not payload.
struct [[gnu::packed]] cnp_hdr {
    uint8_t reserved[16];
};
static_assert(sizeof(cnp_hdr) == 16);

// ---- opcodes ------------------------------------------------------------------------------

namespace opcode {
// The top three bits select the transport, the low five the operation (IBTA ch. 9).
constexpr uint8_t rc = 0x00;
constexpr uint8_t uc = 0x20;
constexpr uint8_t ud = 0x60;

constexpr uint8_t send_first = 0x00;
constexpr uint8_t send_middle = 0x01;
constexpr uint8_t send_last = 0x02;
constexpr uint8_t send_last_imm = 0x03;
constexpr uint8_t send_only = 0x04;
constexpr uint8_t send_only_imm = 0x05;
constexpr uint8_t write_first = 0x06;
constexpr uint8_t write_middle = 0x07;
constexpr uint8_t write_last = 0x08;
constexpr uint8_t write_last_imm = 0x09;
constexpr uint8_t write_only = 0x0A;
constexpr uint8_t write_only_imm = 0x0B;
constexpr uint8_t read_request = 0x0C;
constexpr uint8_t read_response_first = 0x0D;
constexpr uint8_t read_response_middle = 0x0E;
constexpr uint8_t read_response_last = 0x0F;
constexpr uint8_t read_response_only = 0x10;
constexpr uint8_t acknowledge = 0x11;
constexpr uint8_t atomic_acknowledge = 0x12;
constexpr uint8_t compare_swap = 0x13;
constexpr uint8_t fetch_add = 0x14;
constexpr uint8_t send_last_inv = 0x16;
constexpr uint8_t send_only_inv = 0x17;
// IBTA 1.5: an 8-byte write placed as one (RETH + 8 bytes of payload, answered by an ACK).
constexpr uint8_t atomic_write = 0x1D;

constexpr uint8_t rc_send_first = rc | send_first;
constexpr uint8_t rc_send_middle = rc | send_middle;
constexpr uint8_t rc_send_last = rc | send_last;
constexpr uint8_t rc_send_last_imm = rc | send_last_imm;
constexpr uint8_t rc_send_only = rc | send_only;
constexpr uint8_t rc_send_only_imm = rc | send_only_imm;
constexpr uint8_t rc_write_first = rc | write_first;
constexpr uint8_t rc_write_middle = rc | write_middle;
constexpr uint8_t rc_write_last = rc | write_last;
constexpr uint8_t rc_write_last_imm = rc | write_last_imm;
constexpr uint8_t rc_write_only = rc | write_only;
constexpr uint8_t rc_write_only_imm = rc | write_only_imm;
constexpr uint8_t rc_read_request = rc | read_request;
constexpr uint8_t rc_read_response_first = rc | read_response_first;
constexpr uint8_t rc_read_response_middle = rc | read_response_middle;
constexpr uint8_t rc_read_response_last = rc | read_response_last;
constexpr uint8_t rc_read_response_only = rc | read_response_only;
constexpr uint8_t rc_acknowledge = rc | acknowledge;
constexpr uint8_t rc_atomic_acknowledge = rc | atomic_acknowledge;
constexpr uint8_t rc_compare_swap = rc | compare_swap;
constexpr uint8_t rc_fetch_add = rc | fetch_add;
constexpr uint8_t rc_send_last_inv = rc | send_last_inv;
constexpr uint8_t rc_send_only_inv = rc | send_only_inv;
constexpr uint8_t rc_atomic_write = rc | atomic_write;

constexpr uint8_t uc_send_first = uc | send_first;
constexpr uint8_t uc_send_middle = uc | send_middle;
constexpr uint8_t uc_send_last = uc | send_last;
constexpr uint8_t uc_send_last_imm = uc | send_last_imm;
constexpr uint8_t uc_send_only = uc | send_only;
constexpr uint8_t uc_send_only_imm = uc | send_only_imm;
constexpr uint8_t uc_write_first = uc | write_first;
constexpr uint8_t uc_write_middle = uc | write_middle;
constexpr uint8_t uc_write_last = uc | write_last;
constexpr uint8_t uc_write_last_imm = uc | write_last_imm;
constexpr uint8_t uc_write_only = uc | write_only;
constexpr uint8_t uc_write_only_imm = uc | write_only_imm;

constexpr uint8_t ud_send_only = ud | send_only;
constexpr uint8_t ud_send_only_imm = ud | send_only_imm;

constexpr uint8_t cnp = 0x81;  // annex A17: congestion notification packet
}  // namespace opcode

enum class transport_type : uint8_t { rc, uc, ud, cnp };

// What a packet asks of the responder (or, for responses, completes at the requester).
enum class op_kind : uint8_t {
    send,
    write,
    read_request,
    read_response,
    acknowledge,
    atomic_acknowledge,
    compare_swap,
    fetch_add,
    atomic_write,
    cnp
};

// Extension headers as bits, in the order they follow the BTH on the wire.
namespace ext {
constexpr uint8_t deth = 1 << 0;
constexpr uint8_t reth = 1 << 1;
constexpr uint8_t atomic_eth = 1 << 2;
constexpr uint8_t aeth = 1 << 3;
constexpr uint8_t atomic_ack_eth = 1 << 4;
constexpr uint8_t immdt = 1 << 5;
constexpr uint8_t ieth = 1 << 6;
constexpr uint8_t cnp = 1 << 7;
}  // namespace ext

// Position of a packet inside its message: segmentation rules depend on it (first and middle
// packets carry exactly one path MTU of payload).
namespace position {
constexpr uint8_t first = 1 << 0;
constexpr uint8_t middle = 1 << 1;
constexpr uint8_t last = 1 << 2;
constexpr uint8_t only = first | last;
}  // namespace position

struct opcode_info {
    bool valid = false;
    transport_type transport = transport_type::rc;
    op_kind kind = op_kind::send;
    uint8_t position = 0;      // position:: bits; 0 for single-packet control (ACK, CNP, atomics)
    uint8_t exts = 0;          // ext:: bits
    uint8_t header_bytes = 0;  // BTH plus every extension header
    bool payload = false;      // may carry payload (possibly zero bytes, e.g. a 0-byte SEND)
    const char* name = "unknown";
};

constexpr uint8_t ext_header_bytes(uint8_t exts) {
    uint8_t n = sizeof(bth_hdr);
    n += (exts & ext::deth) ? sizeof(deth_hdr) : 0;
    n += (exts & ext::reth) ? sizeof(reth_hdr) : 0;
    n += (exts & ext::atomic_eth) ? sizeof(atomic_eth_hdr) : 0;
    n += (exts & ext::aeth) ? sizeof(aeth_hdr) : 0;
    n += (exts & ext::atomic_ack_eth) ? sizeof(atomic_ack_eth_hdr) : 0;
    n += (exts & ext::immdt) ? sizeof(immdt_hdr) : 0;
    n += (exts & ext::ieth) ? sizeof(ieth_hdr) : 0;
    n += (exts & ext::cnp) ? sizeof(cnp_hdr) : 0;
    return n;
}

namespace detail {
constexpr opcode_info info(transport_type t, op_kind k, uint8_t pos, uint8_t exts, bool payload,
                           const char* name) {
    return opcode_info{true, t, k, pos, exts, ext_header_bytes(exts), payload, name};
}

// IBTA ch. 9 opcode list, RC rows; UC reuses the SEND and WRITE rows (no READ, atomics, ACKs or
// invalidate), UD has only SEND Only (+Imm) with a DETH.
constexpr std::array<opcode_info, 256> make_opcode_table() {
    using enum op_kind;
    namespace p = position;
    std::array<opcode_info, 256> t{};
    const transport_type rc = transport_type::rc;
    t[opcode::rc_send_first] = info(rc, send, p::first, 0, true, "RC SEND First");
    t[opcode::rc_send_middle] = info(rc, send, p::middle, 0, true, "RC SEND Middle");
    t[opcode::rc_send_last] = info(rc, send, p::last, 0, true, "RC SEND Last");
    t[opcode::rc_send_last_imm] =
        info(rc, send, p::last, ext::immdt, true, "RC SEND Last with Immediate");
    t[opcode::rc_send_only] = info(rc, send, p::only, 0, true, "RC SEND Only");
    t[opcode::rc_send_only_imm] =
        info(rc, send, p::only, ext::immdt, true, "RC SEND Only with Immediate");
    t[opcode::rc_write_first] = info(rc, write, p::first, ext::reth, true, "RC WRITE First");
    t[opcode::rc_write_middle] = info(rc, write, p::middle, 0, true, "RC WRITE Middle");
    t[opcode::rc_write_last] = info(rc, write, p::last, 0, true, "RC WRITE Last");
    t[opcode::rc_write_last_imm] =
        info(rc, write, p::last, ext::immdt, true, "RC WRITE Last with Immediate");
    t[opcode::rc_write_only] = info(rc, write, p::only, ext::reth, true, "RC WRITE Only");
    t[opcode::rc_write_only_imm] =
        info(rc, write, p::only, ext::reth | ext::immdt, true, "RC WRITE Only with Immediate");
    t[opcode::rc_read_request] =
        info(rc, read_request, p::only, ext::reth, false, "RC READ Request");
    t[opcode::rc_read_response_first] =
        info(rc, read_response, p::first, ext::aeth, true, "RC READ Response First");
    t[opcode::rc_read_response_middle] =
        info(rc, read_response, p::middle, 0, true, "RC READ Response Middle");
    t[opcode::rc_read_response_last] =
        info(rc, read_response, p::last, ext::aeth, true, "RC READ Response Last");
    t[opcode::rc_read_response_only] =
        info(rc, read_response, p::only, ext::aeth, true, "RC READ Response Only");
    t[opcode::rc_acknowledge] = info(rc, acknowledge, 0, ext::aeth, false, "RC Acknowledge");
    t[opcode::rc_atomic_acknowledge] = info(
        rc, atomic_acknowledge, 0, ext::aeth | ext::atomic_ack_eth, false, "RC Atomic Acknowledge");
    t[opcode::rc_compare_swap] = info(rc, compare_swap, 0, ext::atomic_eth, false, "RC CmpSwap");
    t[opcode::rc_fetch_add] = info(rc, fetch_add, 0, ext::atomic_eth, false, "RC FetchAdd");
    t[opcode::rc_send_last_inv] =
        info(rc, send, p::last, ext::ieth, true, "RC SEND Last with Invalidate");
    t[opcode::rc_send_only_inv] =
        info(rc, send, p::only, ext::ieth, true, "RC SEND Only with Invalidate");
    t[opcode::rc_atomic_write] =
        info(rc, atomic_write, p::only, ext::reth, true, "RC ATOMIC WRITE");

    const char* uc_names[] = {"UC SEND First",  "UC SEND Middle",
                              "UC SEND Last",   "UC SEND Last with Immediate",
                              "UC SEND Only",   "UC SEND Only with Immediate",
                              "UC WRITE First", "UC WRITE Middle",
                              "UC WRITE Last",  "UC WRITE Last with Immediate",
                              "UC WRITE Only",  "UC WRITE Only with Immediate"};
    for (uint8_t op = opcode::send_first; op <= opcode::write_only_imm; ++op) {
        opcode_info row = t[opcode::rc | op];
        row.transport = transport_type::uc;
        row.name = uc_names[op];
        t[opcode::uc | op] = row;
    }

    t[opcode::ud_send_only] =
        info(transport_type::ud, send, p::only, ext::deth, true, "UD SEND Only");
    t[opcode::ud_send_only_imm] = info(transport_type::ud, send, p::only, ext::deth | ext::immdt,
                                       true, "UD SEND Only with Immediate");
    t[opcode::cnp] = info(transport_type::cnp, op_kind::cnp, 0, ext::cnp, false, "CNP");
    return t;
}
}  // namespace detail

inline constexpr std::array<opcode_info, 256> opcode_table = detail::make_opcode_table();

constexpr const opcode_info& opcode_info_of(uint8_t op) {
    return opcode_table[op];
}

// Pad bytes that bring a payload to a multiple of 4 (BTH PadCnt).
constexpr uint8_t pad_count(size_t payload_len) {
    return static_cast<uint8_t>((4 - (payload_len & 3)) & 3);
}

// ---- parser -------------------------------------------------------------------------------

enum class parse_error : uint8_t {
    none,
    truncated,           // shorter than BTH + its extension headers + ICRC
    bad_tver,            // BTH TVer != 0
    unknown_opcode,      // not an RC/UC/UD/CNP opcode this engine speaks (RD, reserved, …)
    pad_beyond_payload,  // PadCnt larger than the bytes between headers and ICRC
    misaligned_payload,  // payload + pad not a multiple of 4 (IBTA: packets are 4-byte units)
    unexpected_payload,  // bytes after the headers of an opcode that carries none
};

const char* parse_error_name(parse_error e);

// A validated packet. Pointers alias the caller's buffer; an extension pointer is null unless the
// opcode carries that header.
struct roce_packet {
    const bth_hdr* bth = nullptr;
    const opcode_info* info = nullptr;
    uint8_t opcode = 0;
    bool solicited = false;
    bool migreq = false;
    bool ack_req = false;
    uint8_t pad = 0;
    uint16_t pkey = 0;
    uint32_t dest_qp = 0;
    uint32_t psn = 0;
    const deth_hdr* deth = nullptr;
    const reth_hdr* reth = nullptr;
    const atomic_eth_hdr* atomic_eth = nullptr;
    const aeth_hdr* aeth = nullptr;
    const atomic_ack_eth_hdr* atomic_ack_eth = nullptr;
    const immdt_hdr* immdt = nullptr;
    const ieth_hdr* ieth = nullptr;
    const cnp_hdr* cnp = nullptr;
    std::span<const uint8_t> payload;  // without the pad bytes
    const uint8_t* icrc = nullptr;     // 4 bytes, least significant first
    // The IP header the packet came in (IPv4, 20 bytes, or IPv6, 40), when the receiver knows
    // it (not set by parse_roce, which sees the UDP payload only).
    const uint8_t* ip = nullptr;
};

struct parse_result {
    parse_error error = parse_error::none;
    roce_packet packet;

    bool ok() const { return error == parse_error::none; }
};

// Parses the UDP payload of a datagram to port 4791: BTH, extension headers, payload, pad, ICRC.
// `len` is the UDP payload length (ICRC included). Reads nothing outside [udp_payload, +len).
// Does not check the ICRC (icrc.hh), the P_Key or the destination QP (the engine's tables).
parse_result parse_roce(const uint8_t* udp_payload, size_t len);

// ---- builder ------------------------------------------------------------------------------

struct bth_fields {
    uint8_t opcode = 0;
    uint32_t dest_qp = 0;  // 24 bits
    uint32_t psn = 0;      // 24 bits
    uint16_t pkey = default_pkey;
    uint8_t pad = 0;  // 0-3, see pad_count()
    bool solicited = false;
    bool migreq = false;
    bool ack_req = false;
};

// Values for whichever extension headers the opcode carries; the others are ignored.
struct ext_fields {
    uint32_t qkey = 0;      // DETH
    uint32_t src_qp = 0;    // DETH, 24 bits
    uint64_t va = 0;        // RETH, AtomicETH
    uint32_t rkey = 0;      // RETH, AtomicETH
    uint32_t dma_len = 0;   // RETH
    uint64_t swap_add = 0;  // AtomicETH
    uint64_t compare = 0;   // AtomicETH
    uint8_t syndrome = 0;   // AETH
    uint32_t msn = 0;       // AETH, 24 bits
    uint64_t orig = 0;      // AtomicAckETH
    uint32_t imm_be = 0;    // ImmDt, network order as verbs passes it
    uint32_t inv_rkey = 0;  // IETH
};

// Writes the BTH and the extension headers of `bth.opcode` at `out`. Returns the number of bytes
// written (opcode_info::header_bytes), or 0 when the opcode is unknown or `cap` is too small.
// Reserved bits are written as zero; 24-bit fields are truncated to 24 bits.
size_t build_roce_headers(uint8_t* out, size_t cap, const bth_fields& bth, const ext_fields& ext);

}  // namespace jakiro::rnic
