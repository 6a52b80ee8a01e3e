#include "dataplane/overlay/sealing/opened_superframe.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <cstring>

#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vxlan.hh"

namespace jakiro::overlay::sealing {

namespace {

// Offsets in a sealed frame's plaintext: VXLAN header, inner Ethernet, IPv4, TCP.
constexpr uint32_t inner_ethertype = 8 + 12;
constexpr uint32_t inner_ip = 8 + 14;
constexpr uint32_t inner_tcp = inner_ip + 20;
// Outer IPv4, UDP, VXLAN and inner Ethernet in front of the inner IPv4 packet: its length may
// grow to what the outer IPv4 length still holds.
constexpr uint32_t max_inner_ip_len = UINT16_MAX - (20 + 8 + 8 + 14);

uint16_t be16(const uint8_t* p) {
    return static_cast<uint16_t>((p[0] << 8) | p[1]);
}

uint32_t be32(const uint8_t* p) {
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

segment_shape shape_of(const uint8_t* probe, uint32_t text_len) {
    if (text_len < probe_bytes + 2 || be16(probe + inner_ethertype) != RTE_ETHER_TYPE_IPV4 ||
        probe[inner_ip] != RTE_IPV4_VHL_DEF || probe[inner_ip + 9] != IPPROTO_TCP ||
        (be16(probe + inner_ip + 6) & (RTE_IPV4_HDR_OFFSET_MASK | RTE_IPV4_HDR_MF_FLAG)) != 0) {
        return {};
    }
    // The inner frame ends where its IPv4 length says, and right behind it the ESP trailer
    // (padding 0-3, pad length, next header): nothing else may lie between.
    const uint32_t frame = inner_ip + be16(probe + inner_ip + 2);
    const uint32_t headers = inner_tcp + (probe[inner_tcp + 12] >> 4) * 4u;
    const uint8_t flags = probe[inner_tcp + 13];
    if (frame + 2 > text_len || text_len - frame > 2 + 3 || headers < probe_bytes ||
        headers >= frame ||
        (flags != RTE_TCP_ACK_FLAG && flags != (RTE_TCP_ACK_FLAG | RTE_TCP_PSH_FLAG))) {
        return {};
    }
    return {headers, frame - headers, be32(probe + inner_tcp + 4), (flags & RTE_TCP_PSH_FLAG) != 0};
}

void opened_run::start(rte_mbuf* head, rte_mbuf* payload, const uint8_t* outer, uint32_t outer_len,
                       const uint8_t* headers, const segment_shape& shape) {
    _head = head;
    _payload = payload;
    _outer_len = outer_len;
    _headers = shape.headers;
    _mss = shape.payload;
    _bytes = 0;
    _next_seq = shape.seq;
    _segments = 0;
    _closed = false;
    _pushed = false;
    uint8_t* frame = rte_pktmbuf_mtod(head, uint8_t*);
    std::memcpy(frame, outer, outer_len);
    std::memcpy(frame + outer_len, headers, shape.headers);
    head->data_len = static_cast<uint16_t>(outer_len + shape.headers);
    head->pkt_len = head->data_len;
}

bool opened_run::continues(const uint8_t* f, const segment_shape& shape) const {
    if (_head == nullptr || _closed || shape.headers != _headers || shape.payload > _mss ||
        shape.seq != _next_seq || _segments >= max_segments ||
        _headers - inner_ip + _bytes + shape.payload > max_inner_ip_len ||
        _bytes + shape.payload > rte_pktmbuf_tailroom(_payload)) {
        return false;
    }
    // Every header byte the same but the IPv4 length, id and checksum, and TCP's sequence
    // number, flags and checksum (the flags are ACK, or ACK|PSH: shape_of).
    const uint8_t* h = rte_pktmbuf_mtod(_head, const uint8_t*) + _outer_len;
    const auto same = [&](uint32_t from, uint32_t to) {
        return std::memcmp(h + from, f + from, to - from) == 0;
    };
    return same(0, inner_ip + 2) &&                 // VXLAN, inner Ethernet, version, TOS
           same(inner_ip + 6, inner_ip + 10) &&     // fragment field, TTL, protocol
           same(inner_ip + 12, inner_tcp + 4) &&    // addresses, ports
           same(inner_tcp + 8, inner_tcp + 13) &&   // acknowledgement, data offset
           same(inner_tcp + 14, inner_tcp + 16) &&  // window
           same(inner_tcp + 18, _headers);          // urgent pointer, options
}

uint8_t* opened_run::payload_at() const {
    return rte_pktmbuf_mtod(_payload, uint8_t*) + _bytes;
}

void opened_run::commit(const segment_shape& shape) {
    _bytes += shape.payload;
    _next_seq += shape.payload;
    ++_segments;
    if (shape.pushed || shape.payload < _mss) {
        _closed = true;
        _pushed = shape.pushed;
    }
}

void opened_run::abandon() {
    rte_pktmbuf_free(_head);
    rte_pktmbuf_free(_payload);
    _head = _payload = nullptr;
}

rte_mbuf* opened_run::finish(uint32_t outer_src_be, uint64_t extra_flags) {
    rte_mbuf* m = _head;
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(frame + _outer_len + inner_ip);
    if (_segments == 1) {
        // The ordinary frame it carried, headers as they came (a mbuf of the pool holds a
        // chunk: uplink_sealing::open_datagram checked).
        std::memcpy(frame + m->data_len, rte_pktmbuf_mtod(_payload, const uint8_t*), _bytes);
        m->data_len = static_cast<uint16_t>(m->data_len + _bytes);
        m->pkt_len = m->data_len;
        rte_pktmbuf_free(_payload);
        m->ol_flags = extra_flags;
    } else {
        _payload->data_len = static_cast<uint16_t>(_bytes);
        _payload->pkt_len = _bytes;
        m->next = _payload;
        m->nb_segs = 2;
        m->pkt_len = m->data_len + _bytes;
        ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(_headers - inner_ip + _bytes));
        ip->hdr_checksum = 0;
        ip->hdr_checksum = rte_ipv4_cksum(ip);
        auto* tcp = reinterpret_cast<rte_tcp_hdr*>(ip + 1);
        if (_pushed) {
            tcp->tcp_flags |= RTE_TCP_PSH_FLAG;
        }
        // The pseudo-header sum, as a super-frame a tap hands over carries it.
        tcp->cksum = rte_ipv4_phdr_cksum(ip, 0);
        m->ol_flags = RTE_MBUF_F_RX_LRO | extra_flags;
        m->tso_segsz = static_cast<uint16_t>(_mss);
        m->packet_type = 0;
    }
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    auto* outer = reinterpret_cast<rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
    auto* udp = reinterpret_cast<rte_udp_hdr*>(outer + 1);
    outer->src_addr = outer_src_be;
    udp->dst_port = rte_cpu_to_be_16(vxlan_udp_port);
    set_outer_lengths(frame, len, false);
    _head = _payload = nullptr;
    return m;
}

}  // namespace jakiro::overlay::sealing
