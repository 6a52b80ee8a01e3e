#pragma once
// Builds test frames (Ethernet/IPv4/UDP or TCP, ARP, VXLAN around them) into mbufs.

#include <rte_arp.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dataplane/arp.hh"
#include "dataplane/config/host_config.hh"
#include "dataplane/neighbor_discovery.hh"
#include "dataplane/overlay/vxlan.hh"
#include "dataplane/vnet_face/vnet_header.hh"

namespace jakiro::test {

inline rte_be32_t ip(const char* text) {
    return rte_cpu_to_be_32(*parse_ipv4(text));
}

inline rte_ether_addr mac(const char* text) {
    rte_ether_addr out;
    const auto parsed = *parse_mac(text);
    std::memcpy(out.addr_bytes, parsed.data(), 6);
    return out;
}

struct ipv4_frame_spec {
    rte_ether_addr src_mac;
    rte_ether_addr dst_mac;
    rte_be32_t src_ip;
    rte_be32_t dst_ip;
    uint8_t proto = IPPROTO_UDP;
    uint16_t src_port = 1000;
    uint16_t dst_port = 2000;
    uint8_t tos = 0;
    uint16_t payload = 64;
};

// Writes an Ethernet + IPv4 + UDP/TCP frame at `out`; returns its length.
inline uint32_t write_ipv4_frame(uint8_t* out, const ipv4_frame_spec& spec) {
    auto* eth = reinterpret_cast<rte_ether_hdr*>(out);
    auto* iph = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
    const uint16_t l4 = spec.proto == IPPROTO_TCP ? sizeof(rte_tcp_hdr) : sizeof(rte_udp_hdr);
    const uint16_t ip_len = sizeof(rte_ipv4_hdr) + l4 + spec.payload;
    std::memset(out, 0, sizeof(rte_ether_hdr) + ip_len);
    eth->src_addr = spec.src_mac;
    eth->dst_addr = spec.dst_mac;
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
    iph->version_ihl = RTE_IPV4_VHL_DEF;
    iph->type_of_service = spec.tos;
    iph->total_length = rte_cpu_to_be_16(ip_len);
    iph->time_to_live = 64;
    iph->next_proto_id = spec.proto;
    iph->src_addr = spec.src_ip;
    iph->dst_addr = spec.dst_ip;
    iph->hdr_checksum = rte_ipv4_cksum(iph);
    auto* ports = reinterpret_cast<rte_be16_t*>(iph + 1);
    ports[0] = rte_cpu_to_be_16(spec.src_port);
    ports[1] = rte_cpu_to_be_16(spec.dst_port);
    if (spec.proto == IPPROTO_UDP) {
        ports[2] = rte_cpu_to_be_16(sizeof(rte_udp_hdr) + spec.payload);
    }
    return sizeof(rte_ether_hdr) + ip_len;
}

// Whether the TCP or UDP checksum of the IPv4 packet at `iph` (contiguous) verifies.
inline bool l4_checksum_ok(const rte_ipv4_hdr* iph) {
    const uint32_t ihl = rte_ipv4_hdr_len(iph);
    const uint32_t l4_len = rte_be_to_cpu_16(iph->total_length) - ihl;
    uint32_t sum = rte_ipv4_phdr_cksum(iph, 0) +
                   rte_raw_cksum(reinterpret_cast<const uint8_t*>(iph) + ihl, l4_len);
    sum = (sum & 0xffff) + (sum >> 16);
    return sum == 0xffff;
}

inline rte_mbuf* mbuf_from(rte_mempool* pool, const uint8_t* bytes, uint32_t len) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(len)), bytes, len);
    return m;
}

// Every byte of `m`, across its segments.
inline std::vector<uint8_t> bytes_of(const rte_mbuf* m) {
    std::vector<uint8_t> out(rte_pktmbuf_pkt_len(m));
    // rte_pktmbuf_read copies only when the bytes span segments; otherwise it points at them.
    const auto* at = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, out.size(), out.data()));
    std::memcpy(out.data(), at, out.size());
    return out;
}

// A message from the fabric as the uplink face reads it: its first bytes, as many as a fresh
// mbuf of `pool` holds (at most `head_max`), in that mbuf; the rest in `tail`.
inline rte_mbuf* head_and_tail(rte_mempool* pool, const std::vector<uint8_t>& bytes,
                               std::vector<uint8_t>& tail, uint32_t head_max = UINT32_MAX) {
    rte_mbuf* head = rte_pktmbuf_alloc(pool);
    if (head == nullptr) {
        return nullptr;
    }
    const auto head_len = static_cast<uint32_t>(
        std::min<std::size_t>({rte_pktmbuf_tailroom(head), head_max, bytes.size()}));
    std::memcpy(rte_pktmbuf_append(head, static_cast<uint16_t>(head_len)), bytes.data(), head_len);
    tail.assign(bytes.begin() + head_len, bytes.end());
    return head;
}

inline rte_mbuf* ipv4_mbuf(rte_mempool* pool, const ipv4_frame_spec& spec) {
    uint8_t frame[2048];
    return mbuf_from(pool, frame, write_ipv4_frame(frame, spec));
}

inline rte_mbuf* arp_request_mbuf(rte_mempool* pool, const rte_ether_addr& sender_mac,
                                  rte_be32_t sender_ip, rte_be32_t target_ip) {
    uint8_t frame[64];
    return mbuf_from(pool, frame, write_arp_request(frame, sender_mac, sender_ip, target_ip));
}

inline ipv6_bytes ip6(const char* text) {
    return *parse_ipv6(text);
}

// ff02::1:ffXX:XXXX, the solicited-node multicast group of `target` (RFC 4291 §2.7.1).
inline ipv6_bytes solicited_node(const ipv6_bytes& target) {
    ipv6_bytes group = ip6("ff02::1:ff00:0");
    std::copy(target.begin() + 13, target.end(), group.begin() + 13);
    return group;
}

struct neighbor_solicitation_spec {
    rte_ether_addr src_mac;
    ipv6_bytes src_ip;
    ipv6_bytes target;
    bool multicast = true;      // to the target's solicited-node group (else to the target)
    bool source_option = true;  // with the source link-layer address option
    uint8_t hop_limit = 255;
};

// Writes an Ethernet + IPv6 + ICMPv6 Neighbor Solicitation at `out`, checksummed, padded to
// nothing; returns its length (86 with the option, 78 without).
inline uint32_t write_neighbor_solicitation(uint8_t* out, const neighbor_solicitation_spec& spec) {
    auto* eth = reinterpret_cast<rte_ether_hdr*>(out);
    auto* iph = reinterpret_cast<rte_ipv6_hdr*>(eth + 1);
    uint8_t* icmp = reinterpret_cast<uint8_t*>(iph + 1);
    const uint16_t icmp_len = spec.source_option ? 32 : 24;
    const ipv6_bytes dst = spec.multicast ? solicited_node(spec.target) : spec.target;
    eth->src_addr = spec.src_mac;
    if (spec.multicast) {
        const uint8_t group_mac[6] = {0x33, 0x33, dst[12], dst[13], dst[14], dst[15]};
        std::memcpy(eth->dst_addr.addr_bytes, group_mac, 6);
    } else {
        eth->dst_addr = mac("02:6a:6b:00:00:01");
    }
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
    iph->vtc_flow = rte_cpu_to_be_32(6u << 28);
    iph->payload_len = rte_cpu_to_be_16(icmp_len);
    iph->proto = ipproto_icmpv6;
    iph->hop_limits = spec.hop_limit;
    std::memcpy(iph->src_addr, spec.src_ip.data(), 16);
    std::memcpy(iph->dst_addr, dst.data(), 16);
    std::memset(icmp, 0, icmp_len);
    icmp[0] = icmp6_neighbor_solicitation;
    std::memcpy(icmp + 8, spec.target.data(), 16);
    if (spec.source_option) {
        icmp[24] = 1;
        icmp[25] = 1;
        std::memcpy(icmp + 26, spec.src_mac.addr_bytes, 6);
    }
    const uint16_t checksum = rte_ipv6_udptcp_cksum(iph, icmp);
    std::memcpy(icmp + 2, &checksum, 2);
    return sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) + icmp_len;
}

struct ipv6_frame_spec {
    rte_ether_addr src_mac;
    rte_ether_addr dst_mac;
    ipv6_bytes src_ip;
    ipv6_bytes dst_ip;
    uint8_t next_header = IPPROTO_UDP;
    uint16_t payload = 64;  // bytes after the IPv6 header, zero but for the first 8 (UDP ports)
};

// Writes an Ethernet + IPv6 frame whose payload starts with 8 bytes of ports and zeros.
inline uint32_t write_ipv6_frame(uint8_t* out, const ipv6_frame_spec& spec) {
    auto* eth = reinterpret_cast<rte_ether_hdr*>(out);
    auto* iph = reinterpret_cast<rte_ipv6_hdr*>(eth + 1);
    eth->src_addr = spec.src_mac;
    eth->dst_addr = spec.dst_mac;
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
    iph->vtc_flow = rte_cpu_to_be_32(6u << 28);
    iph->payload_len = rte_cpu_to_be_16(spec.payload);
    iph->proto = spec.next_header;
    iph->hop_limits = 64;
    std::memcpy(iph->src_addr, spec.src_ip.data(), 16);
    std::memcpy(iph->dst_addr, spec.dst_ip.data(), 16);
    uint8_t* l4 = reinterpret_cast<uint8_t*>(iph + 1);
    std::memset(l4, 0, spec.payload);
    if (spec.payload >= 4) {
        l4[0] = 0x03, l4[1] = 0xe8, l4[2] = 0x07, l4[3] = 0xd0;  // ports 1000 -> 2000
    }
    return sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) + spec.payload;
}

inline rte_mbuf* ipv6_mbuf(rte_mempool* pool, const ipv6_frame_spec& spec) {
    uint8_t frame[2048];
    return mbuf_from(pool, frame, write_ipv6_frame(frame, spec));
}

inline rte_mbuf* neighbor_solicitation_mbuf(rte_mempool* pool,
                                            const neighbor_solicitation_spec& spec) {
    uint8_t frame[128];
    return mbuf_from(pool, frame, write_neighbor_solicitation(frame, spec));
}

// A tenant's TCP super-frame as a vnet face receives it (GSO TCPv4, partial checksum): `bytes`
// of payload cut at `mss`, in one mbuf of `big_pool` (64 KB data rooms). nullptr if refused.
inline rte_mbuf* tcp_superframe_mbuf(rte_mempool* big_pool, const ipv4_frame_spec& addresses,
                                     uint32_t bytes, uint16_t mss) {
    rte_mbuf* m = rte_pktmbuf_alloc(big_pool);
    ipv4_frame_spec spec = addresses;
    spec.proto = IPPROTO_TCP;
    spec.payload = static_cast<uint16_t>(bytes);
    auto* frame =
        reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(54 + bytes)));
    write_ipv4_frame(frame, spec);
    for (uint32_t i = 0; i < bytes; ++i) {
        frame[54 + i] = static_cast<uint8_t>(i * 13 + 5);
    }
    auto* iph = reinterpret_cast<rte_ipv4_hdr*>(frame + 14);
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(iph + 1);
    tcp->data_off = 5 << 4;
    tcp->tcp_flags = RTE_TCP_ACK_FLAG;
    tcp->cksum = rte_ipv4_phdr_cksum(iph, 0);
    const vnet_face::virtio_net_hdr hdr{vnet_face::VIRTIO_NET_HDR_F_NEEDS_CSUM,
                                        vnet_face::VIRTIO_NET_HDR_GSO_TCPV4,
                                        54,
                                        mss,
                                        34,
                                        16};
    if (vnet_face::to_mbuf(hdr, m) != vnet_face::header_verdict::ok) {
        rte_pktmbuf_free(m);
        return nullptr;
    }
    return m;
}

// The same for TCP over IPv6 (GSO TCPv6, the partial checksum over the IPv6 pseudo-header):
// `bytes` of payload cut at `mss`, TCP flags `flags`, sequence number `seq`.
inline rte_mbuf* tcp6_superframe_mbuf(rte_mempool* big_pool, const ipv6_frame_spec& addresses,
                                      uint32_t bytes, uint16_t mss,
                                      uint8_t flags = RTE_TCP_ACK_FLAG, uint32_t seq = 1000000) {
    rte_mbuf* m = rte_pktmbuf_alloc(big_pool);
    ipv6_frame_spec spec = addresses;
    spec.next_header = IPPROTO_TCP;
    spec.payload = static_cast<uint16_t>(20 + bytes);
    auto* frame =
        reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(74 + bytes)));
    write_ipv6_frame(frame, spec);
    for (uint32_t i = 0; i < bytes; ++i) {
        frame[74 + i] = static_cast<uint8_t>(i * 13 + 5);
    }
    auto* iph = reinterpret_cast<rte_ipv6_hdr*>(frame + 14);
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(iph + 1);
    tcp->sent_seq = rte_cpu_to_be_32(seq);
    tcp->data_off = 5 << 4;
    tcp->tcp_flags = flags;
    tcp->rx_win = rte_cpu_to_be_16(512);
    tcp->cksum = rte_ipv6_phdr_cksum(iph, 0);
    const vnet_face::virtio_net_hdr hdr{vnet_face::VIRTIO_NET_HDR_F_NEEDS_CSUM,
                                        vnet_face::VIRTIO_NET_HDR_GSO_TCPV6,
                                        74,
                                        mss,
                                        54,
                                        16};
    if (vnet_face::to_mbuf(hdr, m) != vnet_face::header_verdict::ok) {
        rte_pktmbuf_free(m);
        return nullptr;
    }
    return m;
}

// Whether the TCP or UDP checksum of IPv6 packet `iph` (transport right after it) verifies.
// Summed with DPDK's rte_raw_cksum, not the dataplane's own sum.
inline bool l4_checksum_ok(const rte_ipv6_hdr* iph) {
    uint32_t sum =
        rte_ipv6_phdr_cksum(iph, 0) + rte_raw_cksum(iph + 1, rte_be_to_cpu_16(iph->payload_len));
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return sum == 0xffff;
}

// Wraps an inner frame (already in `m`) in VXLAN from `from` to `to`.
inline void vxlan_wrap(rte_mbuf* m, const overlay::tunnel_endpoints& ends, uint32_t vni,
                       uint8_t outer_tos = 0) {
    overlay::encapsulate(m, ends, vni, outer_tos, 50000);
}

}  // namespace jakiro::test
