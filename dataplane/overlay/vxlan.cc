#include "dataplane/overlay/vxlan.hh"

#include <rte_hash_crc.h>

#include <cstring>

namespace jakiro::overlay {

namespace {
constexpr uint8_t ecn_mask = 0x03;
constexpr uint8_t ecn_not_ect = 0x00;
constexpr uint8_t ecn_ce = 0x03;
constexpr uint16_t entropy_port_base = 49152;  // start of the IANA dynamic port range
}  // namespace

uint16_t flow_entropy_port(const rte_ipv4_hdr* inner_ip, uint32_t bytes_after_ip) {
    uint32_t hash = rte_hash_crc_4byte(inner_ip->src_addr, inner_ip->next_proto_id);
    hash = rte_hash_crc_4byte(inner_ip->dst_addr, hash);
    const uint32_t ihl = (inner_ip->version_ihl & 0x0f) * 4u;
    const bool has_ports =
        inner_ip->next_proto_id == IPPROTO_TCP || inner_ip->next_proto_id == IPPROTO_UDP;
    // Only the first fragment carries ports; fragments otherwise hash on addresses alone.
    const bool first_fragment = (inner_ip->fragment_offset & rte_cpu_to_be_16(0x1fff)) == 0;
    if (has_ports && first_fragment && bytes_after_ip >= ihl + 4) {
        uint32_t ports;
        std::memcpy(&ports, reinterpret_cast<const uint8_t*>(inner_ip) + ihl, sizeof(ports));
        hash = rte_hash_crc_4byte(ports, hash);
    }
    return static_cast<uint16_t>(entropy_port_base + (hash & 0x3fff));
}

void write_outer_headers(uint8_t* out, const tunnel_endpoints& ends, uint32_t vni,
                         uint16_t inner_frame_len, uint8_t inner_tos, uint16_t source_port) {
    auto* eth = reinterpret_cast<rte_ether_hdr*>(out);
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    auto* vx = reinterpret_cast<rte_vxlan_hdr*>(udp + 1);

    eth->dst_addr = ends.remote_mac;
    eth->src_addr = ends.local_mac;
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);

    const uint16_t udp_len = sizeof(rte_udp_hdr) + sizeof(rte_vxlan_hdr) + inner_frame_len;
    ip->version_ihl = RTE_IPV4_VHL_DEF;
    ip->type_of_service = inner_tos;  // DSCP and ECN copied (RFC 6040 normal mode)
    ip->total_length = rte_cpu_to_be_16(sizeof(rte_ipv4_hdr) + udp_len);
    ip->packet_id = 0;
    // DF: the tenant MTU is sized so the outer packet always fits, and fragments of VXLAN
    // would only hide a misconfigured underlay.
    ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
    ip->time_to_live = outer_ttl;
    ip->next_proto_id = IPPROTO_UDP;
    ip->src_addr = ends.local_ip;
    ip->dst_addr = ends.remote_ip;
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);

    udp->src_port = rte_cpu_to_be_16(source_port);
    udp->dst_port = rte_cpu_to_be_16(vxlan_udp_port);
    udp->dgram_len = rte_cpu_to_be_16(udp_len);
    udp->dgram_cksum = 0;  // allowed for VXLAN over IPv4 (RFC 7348 §5)

    vx->vx_flags = rte_cpu_to_be_32(uint32_t{vxlan_flag_vni_valid} << 24);
    vx->vx_vni = rte_cpu_to_be_32(vni << 8);
}

bool encapsulate(rte_mbuf* m, const tunnel_endpoints& ends, uint32_t vni, uint8_t inner_tos,
                 uint16_t source_port) {
    const uint16_t inner_len = static_cast<uint16_t>(rte_pktmbuf_pkt_len(m));
    auto* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, outer_header_bytes));
    if (out == nullptr) {
        return false;
    }
    write_outer_headers(out, ends, vni, inner_len, inner_tos, source_port);
    return true;
}

outer_check check_outer(const uint8_t* frame, uint32_t len, rte_be32_t local_ip) {
    outer_check result{false, drop_reason::outer_truncated, {}};
    if (len < outer_header_bytes) {
        return result;
    }
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
    const uint32_t ip_len = rte_be_to_cpu_16(ip->total_length);
    // Outer IP options are never sent by VTEPs; rejecting them keeps the offsets fixed.
    if (ip->version_ihl != RTE_IPV4_VHL_DEF || ip_len > len - sizeof(rte_ether_hdr) ||
        ip_len < outer_header_bytes - sizeof(rte_ether_hdr)) {
        result.reason = drop_reason::outer_bad_ip_header;
        return result;
    }
    // A header whose checksum is right sums to 0xffff including the checksum field.
    if (rte_raw_cksum(ip, sizeof(rte_ipv4_hdr)) != 0xffff) {
        result.reason = drop_reason::outer_bad_ip_checksum;
        return result;
    }
    if ((ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) !=
        0) {
        result.reason = drop_reason::outer_fragment;
        return result;
    }
    if (ip->dst_addr != local_ip) {
        result.reason = drop_reason::outer_not_our_ip;
        return result;
    }
    if (ip->next_proto_id != IPPROTO_UDP) {
        result.reason = drop_reason::outer_not_udp;
        return result;
    }
    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(ip + 1);
    if (udp->dst_port != rte_cpu_to_be_16(vxlan_udp_port)) {
        result.reason = drop_reason::outer_not_vxlan_port;
        return result;
    }
    const uint32_t udp_len = rte_be_to_cpu_16(udp->dgram_len);
    if (udp_len != ip_len - sizeof(rte_ipv4_hdr) ||
        udp_len < sizeof(rte_udp_hdr) + sizeof(rte_vxlan_hdr) + sizeof(rte_ether_hdr)) {
        result.reason = drop_reason::outer_bad_udp_length;
        return result;
    }
    const auto* vx = reinterpret_cast<const rte_vxlan_hdr*>(udp + 1);
    // Only the I flag is checked: RFC 7348 says the reserved bits are ignored on receipt.
    if ((frame[outer_header_bytes - sizeof(rte_vxlan_hdr)] & vxlan_flag_vni_valid) == 0) {
        result.reason = drop_reason::vxlan_bad_flags;
        return result;
    }
    result.ok = true;
    result.view.vni = rte_be_to_cpu_32(vx->vx_vni) >> 8;
    result.view.outer_src_ip = ip->src_addr;
    result.view.outer_tos = ip->type_of_service;
    result.view.inner_offset = outer_header_bytes;
    result.view.inner_len = udp_len - sizeof(rte_udp_hdr) - sizeof(rte_vxlan_hdr);
    return result;
}

int decapsulated_ecn(uint8_t outer_tos, uint8_t inner_tos) {
    const uint8_t outer = outer_tos & ecn_mask;
    const uint8_t inner = inner_tos & ecn_mask;
    if (outer != ecn_ce) {
        // Outer ECT(0)/ECT(1)/Not-ECT never override the inner field; an outer ECT(1) over an
        // inner ECT(0) may optionally propagate, which we do not do (RFC 6040 table 3).
        return inner;
    }
    if (inner == ecn_not_ect) {
        return -1;
    }
    return ecn_ce;
}

void set_ipv4_ecn(rte_ipv4_hdr* ip, uint8_t ecn) {
    ip->type_of_service = static_cast<uint8_t>((ip->type_of_service & ~ecn_mask) | ecn);
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
}

}  // namespace jakiro::overlay
