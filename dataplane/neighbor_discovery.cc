#include "dataplane/neighbor_discovery.hh"

#include <cstring>

namespace jakiro {

namespace {

constexpr uint32_t nd_header_bytes = 24;  // type, code, checksum, 4 bytes, target
constexpr uint8_t option_source_link_layer = 1;
constexpr uint8_t option_target_link_layer = 2;
constexpr uint8_t na_flag_solicited = 0x40;
constexpr uint8_t na_flag_override = 0x20;
constexpr uint8_t nd_hop_limit = 255;  // proof that it did not cross a router

const rte_ipv6_hdr* ipv6_of(const uint8_t* frame) {
    return reinterpret_cast<const rte_ipv6_hdr*>(frame + sizeof(rte_ether_hdr));
}

}  // namespace

bool icmpv6_checksum_ok(const rte_ipv6_hdr* ip, const uint8_t* icmp) {
    uint32_t sum = rte_raw_cksum(icmp, rte_be_to_cpu_16(ip->payload_len));
    sum += rte_ipv6_phdr_cksum(ip, 0);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return sum == 0xffff;
}

bool is_neighbor_discovery(const uint8_t* frame, uint32_t len) {
    if (len < sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) + 1) {
        return false;
    }
    const auto* ip = ipv6_of(frame);
    const uint8_t type = frame[sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr)];
    return ip->proto == ipproto_icmpv6 && type >= icmp6_router_solicitation &&
           type <= icmp6_redirect;
}

std::optional<neighbor_solicitation> parse_neighbor_solicitation(const uint8_t* frame,
                                                                 uint32_t len) {
    constexpr uint32_t l4 = sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr);
    if (len < l4 + nd_header_bytes) {
        return std::nullopt;
    }
    const auto* ip = ipv6_of(frame);
    const uint32_t payload = rte_be_to_cpu_16(ip->payload_len);
    const uint8_t* icmp = frame + l4;
    if ((rte_be_to_cpu_32(ip->vtc_flow) >> 28) != 6 || ip->proto != ipproto_icmpv6 ||
        ip->hop_limits != nd_hop_limit || payload < nd_header_bytes || l4 + payload > len ||
        icmp[0] != icmp6_neighbor_solicitation || icmp[1] != 0) {
        return std::nullopt;
    }
    if (!icmpv6_checksum_ok(ip, icmp)) {
        return std::nullopt;
    }
    neighbor_solicitation ns;
    std::memcpy(ns.source.data(), ip->src_addr, 16);
    std::memcpy(ns.target.data(), icmp + 8, 16);
    if (ns.target[0] == 0xff) {
        return std::nullopt;
    }
    const bool from_unspecified = ns.source == ipv6_bytes{};
    for (uint32_t at = nd_header_bytes; at < payload;) {
        if (payload - at < 2 || icmp[at + 1] == 0 || icmp[at + 1] * 8u > payload - at) {
            return std::nullopt;
        }
        if (icmp[at] == option_source_link_layer && from_unspecified) {
            return std::nullopt;
        }
        at += icmp[at + 1] * 8u;
    }
    return ns;
}

uint32_t make_neighbor_advertisement(uint8_t* frame, const rte_ether_addr& answer_mac,
                                     const ipv6_bytes& target) {
    auto* eth = reinterpret_cast<rte_ether_hdr*>(frame);
    auto* ip = reinterpret_cast<rte_ipv6_hdr*>(eth + 1);
    uint8_t* icmp = reinterpret_cast<uint8_t*>(ip + 1);

    eth->dst_addr = eth->src_addr;
    eth->src_addr = answer_mac;
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
    ip->vtc_flow = rte_cpu_to_be_32(6u << 28);
    ip->payload_len = rte_cpu_to_be_16(nd_header_bytes + 8);
    ip->proto = ipproto_icmpv6;
    ip->hop_limits = nd_hop_limit;
    std::memcpy(ip->dst_addr, ip->src_addr, 16);
    std::memcpy(ip->src_addr, target.data(), 16);

    std::memset(icmp, 0, nd_header_bytes + 8);
    icmp[0] = icmp6_neighbor_advertisement;
    icmp[4] = na_flag_solicited | na_flag_override;
    std::memcpy(icmp + 8, target.data(), 16);
    icmp[nd_header_bytes] = option_target_link_layer;
    icmp[nd_header_bytes + 1] = 1;  // in units of 8 bytes
    std::memcpy(icmp + nd_header_bytes + 2, answer_mac.addr_bytes, RTE_ETHER_ADDR_LEN);
    const uint16_t checksum = rte_ipv6_udptcp_cksum(ip, icmp);
    std::memcpy(icmp + 2, &checksum, sizeof(checksum));
    return neighbor_advertisement_bytes;
}

}  // namespace jakiro
