#include "rnic/wire/headers.hh"

namespace jakiro::rnic {

const char* parse_error_name(parse_error e) {
    switch (e) {
        case parse_error::none:
            return "none";
        case parse_error::truncated:
            return "truncated";
        case parse_error::bad_tver:
            return "bad_tver";
        case parse_error::unknown_opcode:
            return "unknown_opcode";
        case parse_error::pad_beyond_payload:
            return "pad_beyond_payload";
        case parse_error::misaligned_payload:
            return "misaligned_payload";
        case parse_error::unexpected_payload:
            return "unexpected_payload";
    }
    return "invalid";
}

namespace {

// Hands out consecutive headers after the BTH; the caller has already checked that all of
// opcode_info::header_bytes are inside the buffer.
struct header_cursor {
    const uint8_t* at;

    template <typename Header>
    const Header* take(uint8_t exts, uint8_t bit) {
        if (!(exts & bit)) {
            return nullptr;
        }
        const auto* h = reinterpret_cast<const Header*>(at);
        at += sizeof(Header);
        return h;
    }
};

parse_result fail(parse_error e) {
    parse_result r;
    r.error = e;
    return r;
}

}  // namespace

parse_result parse_roce(const uint8_t* udp_payload, size_t len) {
    // Every length test below subtracts only from values already known to be large enough, so
    // no arithmetic can wrap and no pointer is formed past the end of the buffer.
    if (len < sizeof(bth_hdr) + icrc_bytes) {
        return fail(parse_error::truncated);
    }
    const auto* bth = reinterpret_cast<const bth_hdr*>(udp_payload);
    if (bth->tver() != transport_version) {
        return fail(parse_error::bad_tver);
    }
    const opcode_info& info = opcode_info_of(bth->opcode);
    if (!info.valid) {
        return fail(parse_error::unknown_opcode);
    }
    if (len < size_t{info.header_bytes} + icrc_bytes) {
        return fail(parse_error::truncated);
    }
    const size_t padded_payload = len - info.header_bytes - icrc_bytes;
    const uint8_t pad = bth->pad();
    if (!info.payload && (padded_payload != 0 || pad != 0)) {
        return fail(parse_error::unexpected_payload);
    }
    if (pad > padded_payload) {
        return fail(parse_error::pad_beyond_payload);
    }
    if (padded_payload % 4 != 0) {
        return fail(parse_error::misaligned_payload);
    }

    parse_result r;
    roce_packet& p = r.packet;
    p.bth = bth;
    p.info = &info;
    p.opcode = bth->opcode;
    p.solicited = bth->solicited();
    p.migreq = bth->migreq();
    p.ack_req = bth->ack_requested();
    p.pad = pad;
    p.pkey = bth->pkey();
    p.dest_qp = bth->dest_qp();
    p.psn = bth->psn();

    header_cursor c{udp_payload + sizeof(bth_hdr)};
    p.deth = c.take<deth_hdr>(info.exts, ext::deth);
    p.reth = c.take<reth_hdr>(info.exts, ext::reth);
    p.atomic_eth = c.take<atomic_eth_hdr>(info.exts, ext::atomic_eth);
    p.aeth = c.take<aeth_hdr>(info.exts, ext::aeth);
    p.atomic_ack_eth = c.take<atomic_ack_eth_hdr>(info.exts, ext::atomic_ack_eth);
    p.immdt = c.take<immdt_hdr>(info.exts, ext::immdt);
    p.ieth = c.take<ieth_hdr>(info.exts, ext::ieth);
    p.cnp = c.take<cnp_hdr>(info.exts, ext::cnp);

    p.payload = std::span<const uint8_t>(c.at, padded_payload - pad);
    p.icrc = udp_payload + len - icrc_bytes;
    return r;
}

size_t build_roce_headers(uint8_t* out, size_t cap, const bth_fields& f, const ext_fields& e) {
    const opcode_info& info = opcode_info_of(f.opcode);
    if (!info.valid || cap < info.header_bytes) {
        return 0;
    }
    auto* bth = reinterpret_cast<bth_hdr*>(out);
    bth->opcode = f.opcode;
    bth->flags = static_cast<uint8_t>((f.solicited ? bth_hdr::se_bit : 0) |
                                      (f.migreq ? bth_hdr::migreq_bit : 0) | ((f.pad & 0x3) << 4) |
                                      transport_version);
    store_be16(bth->pkey_be, f.pkey);
    bth->resv8 = 0;
    store_be24(bth->dest_qp_be, f.dest_qp);
    bth->ack_req = f.ack_req ? bth_hdr::ack_req_bit : 0;
    store_be24(bth->psn_be, f.psn);

    uint8_t* at = out + sizeof(bth_hdr);
    if (info.exts & ext::deth) {
        auto* h = reinterpret_cast<deth_hdr*>(at);
        store_be32(h->qkey_be, e.qkey);
        h->resv8 = 0;
        store_be24(h->src_qp_be, e.src_qp);
        at += sizeof(*h);
    }
    if (info.exts & ext::reth) {
        auto* h = reinterpret_cast<reth_hdr*>(at);
        store_be64(h->va_be, e.va);
        store_be32(h->rkey_be, e.rkey);
        store_be32(h->dma_len_be, e.dma_len);
        at += sizeof(*h);
    }
    if (info.exts & ext::atomic_eth) {
        auto* h = reinterpret_cast<atomic_eth_hdr*>(at);
        store_be64(h->va_be, e.va);
        store_be32(h->rkey_be, e.rkey);
        store_be64(h->swap_add_be, e.swap_add);
        store_be64(h->compare_be, e.compare);
        at += sizeof(*h);
    }
    if (info.exts & ext::aeth) {
        auto* h = reinterpret_cast<aeth_hdr*>(at);
        h->syndrome = e.syndrome;
        store_be24(h->msn_be, e.msn);
        at += sizeof(*h);
    }
    if (info.exts & ext::atomic_ack_eth) {
        auto* h = reinterpret_cast<atomic_ack_eth_hdr*>(at);
        store_be64(h->orig_be, e.orig);
        at += sizeof(*h);
    }
    if (info.exts & ext::immdt) {
        std::memcpy(at, &e.imm_be, sizeof(immdt_hdr));
        at += sizeof(immdt_hdr);
    }
    if (info.exts & ext::ieth) {
        store_be32(at, e.inv_rkey);
        at += sizeof(ieth_hdr);
    }
    if (info.exts & ext::cnp) {
        std::memset(at, 0, sizeof(cnp_hdr));
        at += sizeof(cnp_hdr);
    }
    return static_cast<size_t>(at - out);
}

}  // namespace jakiro::rnic
