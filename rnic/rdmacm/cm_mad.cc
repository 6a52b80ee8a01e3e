#include "rnic/rdmacm/cm_mad.hh"

#include <algorithm>
#include <cstring>

#include "rnic/wire/byte_order.hh"

namespace jakiro::rdmacm {

namespace {

using rnic::load_be16;
using rnic::load_be24;
using rnic::load_be32;
using rnic::load_be64;
using rnic::store_be16;
using rnic::store_be24;
using rnic::store_be32;
using rnic::store_be64;

// Field positions are the spec's: byte offsets from the end of the MAD header, bit offsets
// from the most significant bit of that byte (IBTA tables 106-120).
class writer {
  public:
    explicit writer(mad_buffer& m) : _d(m.data() + mad_header_bytes) {}
    void u8(std::size_t at, uint8_t v) { _d[at] = v; }
    void u16(std::size_t at, uint16_t v) { store_be16(_d + at, v); }
    void u24(std::size_t at, uint32_t v) { store_be24(_d + at, v & 0xFF'FFFFu); }
    void u32(std::size_t at, uint32_t v) { store_be32(_d + at, v); }
    void u64(std::size_t at, uint64_t v) { store_be64(_d + at, v); }
    // `width` bits at `bit` (from the MSB) of byte `at`; the other bits keep their value.
    void bits(std::size_t at, unsigned bit, unsigned width, unsigned v) {
        const unsigned shift = 8 - bit - width;
        const uint8_t mask = static_cast<uint8_t>(((1u << width) - 1) << shift);
        _d[at] = static_cast<uint8_t>((_d[at] & ~mask) | ((v << shift) & mask));
    }
    void bytes(std::size_t at, const uint8_t* p, std::size_t n) { std::memcpy(_d + at, p, n); }

  private:
    uint8_t* _d;
};

class reader {
  public:
    explicit reader(const uint8_t* mad) : _d(mad + mad_header_bytes) {}
    uint8_t u8(std::size_t at) const { return _d[at]; }
    uint16_t u16(std::size_t at) const { return load_be16(_d + at); }
    uint32_t u24(std::size_t at) const { return load_be24(_d + at); }
    uint32_t u32(std::size_t at) const { return load_be32(_d + at); }
    uint64_t u64(std::size_t at) const { return load_be64(_d + at); }
    unsigned bits(std::size_t at, unsigned bit, unsigned width) const {
        return (_d[at] >> (8 - bit - width)) & ((1u << width) - 1);
    }
    template <std::size_t N>
    void bytes(std::size_t at, std::array<uint8_t, N>& out) const {
        std::memcpy(out.data(), _d + at, N);
    }

  private:
    const uint8_t* _d;
};

void put(writer& w, const cm_req& m) {
    w.u32(0, m.local_comm_id);
    w.u64(8, m.service_id);
    w.u64(16, m.local_ca_guid);
    w.u32(28, m.local_qkey);
    w.u24(32, m.local_qpn);
    w.u8(35, m.responder_resources);
    w.u8(39, m.initiator_depth);
    w.bits(43, 0, 5, m.remote_cm_response_timeout);
    w.bits(43, 5, 2, static_cast<unsigned>(m.transport));
    w.bits(43, 7, 1, m.end_to_end_flow_control);
    w.u24(44, m.starting_psn);
    w.bits(47, 0, 5, m.local_cm_response_timeout);
    w.bits(47, 5, 3, m.retry_count);
    w.u16(48, m.pkey);
    w.bits(50, 0, 4, m.path_mtu);
    w.bits(50, 5, 3, m.rnr_retry_count);
    w.bits(51, 0, 4, m.max_cm_retries);
    w.bits(51, 4, 1, m.srq);
    w.u16(52, m.primary_local_lid);
    w.u16(54, m.primary_remote_lid);
    w.bytes(56, m.primary_local_gid.data(), 16);
    w.bytes(72, m.primary_remote_gid.data(), 16);
    // Flow label: the top 20 bits of the word at 88; the packet rate the low 6 bits of 91.
    w.u8(88, static_cast<uint8_t>(m.primary_flow_label >> 12));
    w.u8(89, static_cast<uint8_t>(m.primary_flow_label >> 4));
    w.bits(90, 0, 4, m.primary_flow_label & 0xF);
    w.bits(91, 2, 6, m.primary_packet_rate);
    w.u8(92, m.primary_traffic_class);
    w.u8(93, m.primary_hop_limit);
    w.bits(94, 0, 4, m.primary_sl);
    w.bits(94, 4, 1, m.primary_subnet_local);
    w.bits(95, 0, 5, m.primary_local_ack_timeout);
    w.bytes(140, m.private_data.data(), m.private_data.size());
}

cm_req get_req(const reader& r) {
    cm_req m;
    m.local_comm_id = r.u32(0);
    m.service_id = r.u64(8);
    m.local_ca_guid = r.u64(16);
    m.local_qkey = r.u32(28);
    m.local_qpn = r.u24(32);
    m.responder_resources = r.u8(35);
    m.initiator_depth = r.u8(39);
    m.remote_cm_response_timeout = static_cast<uint8_t>(r.bits(43, 0, 5));
    m.transport = static_cast<cm_transport>(r.bits(43, 5, 2));
    m.end_to_end_flow_control = r.bits(43, 7, 1) != 0;
    m.starting_psn = r.u24(44);
    m.local_cm_response_timeout = static_cast<uint8_t>(r.bits(47, 0, 5));
    m.retry_count = static_cast<uint8_t>(r.bits(47, 5, 3));
    m.pkey = r.u16(48);
    m.path_mtu = static_cast<uint8_t>(r.bits(50, 0, 4));
    m.rnr_retry_count = static_cast<uint8_t>(r.bits(50, 5, 3));
    m.max_cm_retries = static_cast<uint8_t>(r.bits(51, 0, 4));
    m.srq = r.bits(51, 4, 1) != 0;
    m.primary_local_lid = r.u16(52);
    m.primary_remote_lid = r.u16(54);
    r.bytes(56, m.primary_local_gid);
    r.bytes(72, m.primary_remote_gid);
    m.primary_flow_label = r.u32(88) >> 12;
    m.primary_packet_rate = static_cast<uint8_t>(r.bits(91, 2, 6));
    m.primary_traffic_class = r.u8(92);
    m.primary_hop_limit = r.u8(93);
    m.primary_sl = static_cast<uint8_t>(r.bits(94, 0, 4));
    m.primary_subnet_local = r.bits(94, 4, 1) != 0;
    m.primary_local_ack_timeout = static_cast<uint8_t>(r.bits(95, 0, 5));
    r.bytes(140, m.private_data);
    return m;
}

void put(writer& w, const cm_mra& m) {
    w.u32(0, m.local_comm_id);
    w.u32(4, m.remote_comm_id);
    w.bits(8, 0, 2, static_cast<unsigned>(m.message_mraed));
    w.bits(9, 0, 5, m.service_timeout);
}

cm_mra get_mra(const reader& r) {
    cm_mra m;
    m.local_comm_id = r.u32(0);
    m.remote_comm_id = r.u32(4);
    m.message_mraed = static_cast<message_kind>(r.bits(8, 0, 2));
    m.service_timeout = static_cast<uint8_t>(r.bits(9, 0, 5));
    return m;
}

void put(writer& w, const cm_rej& m) {
    w.u32(0, m.local_comm_id);
    w.u32(4, m.remote_comm_id);
    w.bits(8, 0, 2, static_cast<unsigned>(m.message_rejected));
    w.bits(9, 0, 7, m.reject_info_length);
    w.u16(10, m.reason);
    w.bytes(84, m.private_data.data(), m.private_data.size());
}

cm_rej get_rej(const reader& r) {
    cm_rej m;
    m.local_comm_id = r.u32(0);
    m.remote_comm_id = r.u32(4);
    m.message_rejected = static_cast<message_kind>(r.bits(8, 0, 2));
    m.reject_info_length = static_cast<uint8_t>(r.bits(9, 0, 7));
    m.reason = r.u16(10);
    r.bytes(84, m.private_data);
    return m;
}

void put(writer& w, const cm_rep& m) {
    w.u32(0, m.local_comm_id);
    w.u32(4, m.remote_comm_id);
    w.u32(8, m.local_qkey);
    w.u24(12, m.local_qpn);
    w.u24(20, m.starting_psn);
    w.u8(24, m.responder_resources);
    w.u8(25, m.initiator_depth);
    w.bits(26, 0, 5, m.target_ack_delay);
    w.bits(26, 5, 2, m.failover_accepted);
    w.bits(26, 7, 1, m.end_to_end_flow_control);
    w.bits(27, 0, 3, m.rnr_retry_count);
    w.bits(27, 3, 1, m.srq);
    w.u64(28, m.local_ca_guid);
    w.bytes(36, m.private_data.data(), m.private_data.size());
}

cm_rep get_rep(const reader& r) {
    cm_rep m;
    m.local_comm_id = r.u32(0);
    m.remote_comm_id = r.u32(4);
    m.local_qkey = r.u32(8);
    m.local_qpn = r.u24(12);
    m.starting_psn = r.u24(20);
    m.responder_resources = r.u8(24);
    m.initiator_depth = r.u8(25);
    m.target_ack_delay = static_cast<uint8_t>(r.bits(26, 0, 5));
    m.failover_accepted = static_cast<uint8_t>(r.bits(26, 5, 2));
    m.end_to_end_flow_control = r.bits(26, 7, 1) != 0;
    m.rnr_retry_count = static_cast<uint8_t>(r.bits(27, 0, 3));
    m.srq = r.bits(27, 3, 1) != 0;
    m.local_ca_guid = r.u64(28);
    r.bytes(36, m.private_data);
    return m;
}

void put(writer& w, const cm_rtu& m) {
    w.u32(0, m.local_comm_id);
    w.u32(4, m.remote_comm_id);
}

void put(writer& w, const cm_dreq& m) {
    w.u32(0, m.local_comm_id);
    w.u32(4, m.remote_comm_id);
    w.u24(8, m.remote_qpn);
}

void put(writer& w, const cm_drep& m) {
    w.u32(0, m.local_comm_id);
    w.u32(4, m.remote_comm_id);
}

void put(writer& w, const cm_sidr_req& m) {
    w.u32(0, m.request_id);
    w.u16(4, m.pkey);
    w.u64(8, m.service_id);
    w.bytes(16, m.private_data.data(), m.private_data.size());
}

cm_sidr_req get_sidr_req(const reader& r) {
    cm_sidr_req m;
    m.request_id = r.u32(0);
    m.pkey = r.u16(4);
    m.service_id = r.u64(8);
    r.bytes(16, m.private_data);
    return m;
}

void put(writer& w, const cm_sidr_rep& m) {
    w.u32(0, m.request_id);
    w.u8(4, static_cast<uint8_t>(m.status));
    w.u24(8, m.qpn);
    w.u64(12, m.service_id);
    w.u32(20, m.qkey);
    w.bytes(96, m.private_data.data(), m.private_data.size());
}

cm_sidr_rep get_sidr_rep(const reader& r) {
    cm_sidr_rep m;
    m.request_id = r.u32(0);
    m.status = static_cast<sidr_status>(r.u8(4));
    m.qpn = r.u24(8);
    m.service_id = r.u64(12);
    m.qkey = r.u32(20);
    r.bytes(96, m.private_data);
    return m;
}

}  // namespace

cm_attribute attribute_of(const cm_body& b) {
    static constexpr cm_attribute by_index[] = {
        cm_attribute::req,  cm_attribute::mra,      cm_attribute::rej,
        cm_attribute::rep,  cm_attribute::rtu,      cm_attribute::dreq,
        cm_attribute::drep, cm_attribute::sidr_req, cm_attribute::sidr_rep,
    };
    return by_index[b.index()];
}

const char* attribute_name(cm_attribute a) {
    switch (a) {
        case cm_attribute::req:
            return "REQ";
        case cm_attribute::mra:
            return "MRA";
        case cm_attribute::rej:
            return "REJ";
        case cm_attribute::rep:
            return "REP";
        case cm_attribute::rtu:
            return "RTU";
        case cm_attribute::dreq:
            return "DREQ";
        case cm_attribute::drep:
            return "DREP";
        case cm_attribute::sidr_req:
            return "SIDR_REQ";
        case cm_attribute::sidr_rep:
            return "SIDR_REP";
    }
    return "?";
}

mad_buffer encode(const cm_message& m) {
    mad_buffer out{};
    // Common MAD header (IBTA 13.4.3): base version, class, class version, method, status,
    // class specific, transaction id, attribute id, reserved, attribute modifier.
    out[0] = mad_base_version;
    out[1] = cm_management_class;
    out[2] = cm_class_version;
    out[3] = mad_method_send;
    store_be64(out.data() + 8, m.transaction_id);
    store_be16(out.data() + 16, static_cast<uint16_t>(attribute_of(m.body)));
    writer w(out);
    std::visit([&w](const auto& body) { put(w, body); }, m.body);
    return out;
}

std::optional<cm_message> decode(std::span<const uint8_t> mad) {
    if (mad.size() < mad_bytes) {
        return std::nullopt;
    }
    const uint8_t* p = mad.data();
    if (p[0] != mad_base_version || p[1] != cm_management_class || p[2] != cm_class_version ||
        p[3] != mad_method_send) {
        return std::nullopt;
    }
    cm_message m;
    m.transaction_id = load_be64(p + 8);
    const reader r(p);
    switch (static_cast<cm_attribute>(load_be16(p + 16))) {
        case cm_attribute::req:
            m.body = get_req(r);
            break;
        case cm_attribute::mra:
            m.body = get_mra(r);
            break;
        case cm_attribute::rej:
            m.body = get_rej(r);
            break;
        case cm_attribute::rep:
            m.body = get_rep(r);
            break;
        case cm_attribute::rtu:
            m.body = cm_rtu{r.u32(0), r.u32(4)};
            break;
        case cm_attribute::dreq:
            m.body = cm_dreq{r.u32(0), r.u32(4), r.u24(8)};
            break;
        case cm_attribute::drep:
            m.body = cm_drep{r.u32(0), r.u32(4)};
            break;
        case cm_attribute::sidr_req:
            m.body = get_sidr_req(r);
            break;
        case cm_attribute::sidr_rep:
            m.body = get_sidr_rep(r);
            break;
        default:
            return std::nullopt;
    }
    return m;
}

}  // namespace jakiro::rdmacm
