#include "dataplane/overlay/datagram_builder.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_vxlan.h>

#include <algorithm>
#include <cstring>

#include "dataplane/overlay/udp_gso.hh"

namespace jakiro::overlay {

namespace {

constexpr uint32_t vxlan_bytes = sizeof(rte_vxlan_hdr);
// Inner frame offsets (Ethernet, IPv4 without options, then the transport ports).
constexpr uint32_t inner_ip = sizeof(rte_ether_hdr);
constexpr uint32_t inner_ports = inner_ip + sizeof(rte_ipv4_hdr);
constexpr uint32_t inner_flow_bytes = inner_ports + 4;

}  // namespace

uint8_t* datagram_builder::chunk(uint16_t index) const {
    return rte_pktmbuf_mtod(_m, uint8_t*) + gso_outer_bytes + std::size_t{index} * _stride;
}

bool datagram_builder::start(rte_mbuf* m, const rte_mbuf* first) {
    const uint32_t len = rte_pktmbuf_pkt_len(first);
    if (_m != nullptr || first->nb_segs != 1 || len < gso_outer_bytes + vxlan_bytes ||
        len > rte_pktmbuf_tailroom(m)) {
        return false;
    }
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_mtod(first, const uint8_t*), len);
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = len;
    _m = m;
    _stride = len - gso_outer_bytes;
    _smallest = _stride;
    _used = _stride;
    _count = 1;
    _closed = false;
    _reserved = nullptr;
    return true;
}

bool datagram_builder::takes_more() const {
    return _m != nullptr && !_closed && _count < max_gso_chunks && _used < max_gso_chunk_bytes;
}

uint8_t* datagram_builder::reserve(uint32_t inner_len) {
    _reserved = nullptr;
    _grow_to = 0;
    const uint32_t bytes = vxlan_bytes + inner_len;
    if (!takes_more()) {
        return nullptr;
    }
    // Longer than the stride: the stride grows to it, if every chunk so far can be padded to
    // it (the frame is written behind where they will be, and commit() moves them).
    uint32_t stride = _stride;
    if (bytes > _stride) {
        if (bytes - _smallest > max_padding_bytes) {
            return nullptr;
        }
        stride = bytes;
    }
    // A padded chunk takes the whole stride; a shorter one only itself, and ends the datagram.
    const bool full = stride - bytes <= max_padding_bytes;
    const uint32_t used = std::size_t{_count} * stride + (full ? stride : bytes) +
                          (std::size_t{_count} + 1) * _chunk_growth;
    if (used > max_gso_chunk_bytes ||
        gso_outer_bytes + used > rte_pktmbuf_tailroom(_m) + rte_pktmbuf_data_len(_m)) {
        return nullptr;
    }
    _grow_to = stride != _stride ? stride : 0;
    _reserved = rte_pktmbuf_mtod(_m, uint8_t*) + gso_outer_bytes + std::size_t{_count} * stride +
                vxlan_bytes;
    _reserved_len = inner_len;
    return _reserved;
}

bool datagram_builder::reserved_joins() const {
    if (_reserved == nullptr || _reserved_len < inner_flow_bytes) {
        return false;
    }
    const uint8_t* first = chunk(0) + vxlan_bytes;
    const uint8_t* next = _reserved;
    // What the outer headers are made of: the inner TOS (RFC 6040) and the flow the UDP source
    // port is hashed from (flow_entropy_port); a header with options would move the ports.
    const auto same = [&](uint32_t at, uint32_t n) {
        return std::memcmp(first + at, next + at, n) == 0;
    };
    return same(12, 2) && next[inner_ip] == RTE_IPV4_VHL_DEF && same(inner_ip, 2) &&
           same(inner_ip + 6, 2) && same(inner_ip + 9, 1) && same(inner_ip + 12, 8) &&
           same(inner_ports, 4);
}

uint32_t datagram_builder::commit() {
    uint32_t padding = 0;
    if (_grow_to != 0) {
        padding += grow_stride(_grow_to);
    }
    uint8_t* at = _reserved - vxlan_bytes;
    const uint8_t* first = chunk(0);
    std::memcpy(at, first, vxlan_bytes + RTE_ETHER_ADDR_LEN);  // VNI; the route's inner MAC
    const uint32_t bytes = vxlan_bytes + _reserved_len;
    if (_stride - bytes <= max_padding_bytes) {
        std::memset(at + bytes, 0, _stride - bytes);
        padding += _stride - bytes;
        _used += _stride;
        _smallest = std::min(_smallest, bytes);
    } else {
        _used += bytes;
        _closed = true;  // the kernel's last segment may be short, no other
    }
    ++_count;
    _m->data_len = static_cast<uint16_t>(gso_outer_bytes + _used);
    _m->pkt_len = _m->data_len;
    _reserved = nullptr;
    _grow_to = 0;
    return padding;
}

uint32_t datagram_builder::grow_stride(uint32_t stride) {
    // Each chunk to its place at the new stride, the last first (they only move up), and the
    // bytes between its end and the next chunk zeroed.
    uint8_t* base = rte_pktmbuf_mtod(_m, uint8_t*) + gso_outer_bytes;
    const uint32_t grown = stride - _stride;
    for (uint16_t k = _count; k-- > 0;) {
        std::memmove(base + std::size_t{k} * stride, base + std::size_t{k} * _stride, _stride);
        std::memset(base + std::size_t{k} * stride + _stride, 0, grown);
    }
    _stride = stride;
    _used = std::size_t{_count} * stride;
    return uint32_t{_count} * grown;
}

rte_mbuf* datagram_builder::finish() {
    rte_mbuf* m = _m;
    if (m == nullptr) {
        return nullptr;
    }
    const bool super_datagram = _count > 1;
    set_outer_lengths(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_pkt_len(m), super_datagram);
    if (super_datagram) {
        mark_udp_gso(m, _stride);
    }
    _m = nullptr;
    _count = 0;
    _used = 0;
    _reserved = nullptr;
    return m;
}

}  // namespace jakiro::overlay
