#include "dataplane/vnet_face/vnet_header.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_tcp.h>

#include <cstring>

#include "dataplane/internet_checksum.hh"

namespace jakiro::vnet_face {

// The field already holds the pseudo-header sum (CHECKSUM_PARTIAL semantics), so the sum from
// `start` to the end, folded and inverted, is the final value. The sender chooses the offsets: the
// field may be at an odd address, so it is written with memcpy.
void complete_partial_checksum(uint8_t* frame, uint32_t len, uint16_t start, uint16_t offset) {
    uint16_t sum = static_cast<uint16_t>(~fold_sum(ones_sum(frame + start, len - start)));
    if (sum == 0 && offset == udp_csum_offset) {
        sum = 0xffff;  // UDP sends a computed 0 as all ones (0 means "no checksum")
    }
    std::memcpy(frame + start + offset, &sum, sizeof(sum));
}

namespace {

struct tcp4_headers {
    uint16_t l3_len;
    uint16_t l4_len;
};

// Ethernet/IPv4/TCP header lengths of a frame, or l3_len 0 when it is not one or is truncated.
tcp4_headers parse_tcp4(const uint8_t* frame, uint32_t len) {
    if (len < sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr)) {
        return {0, 0};
    }
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(eth + 1);
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) || (ip->version_ihl >> 4) != 4 ||
        ip->next_proto_id != IPPROTO_TCP) {
        return {0, 0};
    }
    const uint16_t l3 = rte_ipv4_hdr_len(ip);
    if (l3 < sizeof(rte_ipv4_hdr) || sizeof(rte_ether_hdr) + l3 + sizeof(rte_tcp_hdr) > len) {
        return {0, 0};
    }
    const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(frame + sizeof(rte_ether_hdr) + l3);
    const uint16_t l4 = (tcp->data_off >> 4) * 4;
    if (l4 < sizeof(rte_tcp_hdr) || sizeof(rte_ether_hdr) + l3 + l4 > len) {
        return {0, 0};
    }
    return {l3, l4};
}

// The same for Ethernet/IPv6/TCP, TCP right after the fixed header (the pipeline forwards no
// extension header), the IPv6 payload length exact: a super-frame has no padding.
tcp4_headers parse_tcp6(const uint8_t* frame, uint32_t len) {
    constexpr uint32_t l4_start = sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr);
    if (len < l4_start + sizeof(rte_tcp_hdr)) {
        return {0, 0};
    }
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    const auto* ip = reinterpret_cast<const rte_ipv6_hdr*>(eth + 1);
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6) ||
        (rte_be_to_cpu_32(ip->vtc_flow) >> 28) != 6 || ip->proto != IPPROTO_TCP ||
        rte_be_to_cpu_16(ip->payload_len) != len - l4_start) {
        return {0, 0};
    }
    const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(ip + 1);
    const uint16_t l4 = (tcp->data_off >> 4) * 4;
    if (l4 < sizeof(rte_tcp_hdr) || l4_start + l4 > len) {
        return {0, 0};
    }
    return {sizeof(rte_ipv6_hdr), l4};
}

}  // namespace

header_verdict to_mbuf(const virtio_net_hdr& hdr, rte_mbuf* m) {
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    const uint32_t len = rte_pktmbuf_data_len(m);
    m->ol_flags = 0;
    m->tso_segsz = 0;
    if ((hdr.flags & ~(VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID)) != 0) {
        return header_verdict::bad_flags;
    }
    const bool needs_csum = (hdr.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) != 0;
    const uint8_t gso = hdr.gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
    if (needs_csum) {
        // The checksum field must lie in the frame, after the Ethernet header.
        if (hdr.csum_start < sizeof(rte_ether_hdr) ||
            uint32_t{hdr.csum_start} + hdr.csum_offset + sizeof(uint16_t) > len) {
            return header_verdict::bad_csum_offsets;
        }
    }
    if (gso == VIRTIO_NET_HDR_GSO_NONE) {
        if ((hdr.gso_type & VIRTIO_NET_HDR_GSO_ECN) != 0) {
            return header_verdict::bad_gso_type;
        }
        if (needs_csum) {
            complete_partial_checksum(frame, len, hdr.csum_start, hdr.csum_offset);
        }
        return header_verdict::ok;
    }
    if (gso != VIRTIO_NET_HDR_GSO_TCPV4 && gso != VIRTIO_NET_HDR_GSO_TCPV6) {
        return header_verdict::bad_gso_type;
    }
    if (hdr.gso_size == 0 || !needs_csum) {
        return header_verdict::bad_gso_size;
    }
    const bool v6 = gso == VIRTIO_NET_HDR_GSO_TCPV6;
    const tcp4_headers h = v6 ? parse_tcp6(frame, len) : parse_tcp4(frame, len);
    if (h.l3_len == 0) {
        return header_verdict::not_tcp_ipv4;
    }
    const uint16_t l4_start = sizeof(rte_ether_hdr) + h.l3_len;
    if (hdr.csum_start != l4_start || hdr.csum_offset != tcp_csum_offset) {
        return header_verdict::bad_csum_offsets;
    }
    const uint32_t headers = l4_start + h.l4_len;
    if (len <= headers) {
        return header_verdict::truncated;
    }
    if (len - headers <= hdr.gso_size) {
        // One segment's worth: an ordinary frame with its checksum done.
        complete_partial_checksum(frame, len, hdr.csum_start, hdr.csum_offset);
        return header_verdict::ok;
    }
    m->ol_flags = v6 ? RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV6 | RTE_MBUF_F_TX_TCP_CKSUM
                     : RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM |
                           RTE_MBUF_F_TX_TCP_CKSUM;
    m->tso_segsz = hdr.gso_size;
    m->l2_len = sizeof(rte_ether_hdr);
    m->l3_len = h.l3_len;
    m->l4_len = h.l4_len;
    return header_verdict::ok;
}

virtio_net_hdr from_mbuf(const rte_mbuf* m) {
    virtio_net_hdr hdr{};
    if ((m->ol_flags & RTE_MBUF_F_TX_UDP_SEG) != 0) {
        // A VXLAN super-datagram for the fabric (overlay/udp_gso.hh): the kernel cuts it at
        // gso_size and fills each segment's UDP checksum from the pseudo-header sum.
        hdr.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
        hdr.gso_type = VIRTIO_NET_HDR_GSO_UDP_L4;
        hdr.gso_size = m->tso_segsz;
        hdr.hdr_len = static_cast<uint16_t>(m->l2_len + m->l3_len + m->l4_len);
        hdr.csum_start = static_cast<uint16_t>(m->l2_len + m->l3_len);
        hdr.csum_offset = udp_csum_offset;
        return hdr;
    }
    if ((m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) == 0) {
        return hdr;
    }
    hdr.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    hdr.gso_type = tcp_gso_type(m);
    hdr.gso_size = m->tso_segsz;
    hdr.hdr_len = static_cast<uint16_t>(m->l2_len + m->l3_len + m->l4_len);
    hdr.csum_start = static_cast<uint16_t>(m->l2_len + m->l3_len);
    hdr.csum_offset = tcp_csum_offset;
    return hdr;
}

void mark_tcp_superframe(rte_mbuf* m, uint16_t mss) {
    auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, sizeof(rte_ether_hdr));
    const uint16_t l3 = rte_ipv4_hdr_len(ip);
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(reinterpret_cast<uint8_t*>(ip) + l3);
    m->ol_flags = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM |
                  RTE_MBUF_F_TX_TCP_CKSUM;
    m->tso_segsz = mss;
    m->l2_len = sizeof(rte_ether_hdr);
    m->l3_len = l3;
    m->l4_len = static_cast<uint64_t>(tcp->data_off >> 4) * 4;
    // The pseudo-header sum with the whole length, as the kernel's own TSO frames carry it.
    tcp->cksum = rte_ipv4_phdr_cksum(ip, 0);
}

void mark_tcp6_superframe(rte_mbuf* m, uint16_t mss) {
    auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, sizeof(rte_ether_hdr));
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(ip + 1);
    m->ol_flags = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV6 | RTE_MBUF_F_TX_TCP_CKSUM;
    m->tso_segsz = mss;
    m->l2_len = sizeof(rte_ether_hdr);
    m->l3_len = sizeof(rte_ipv6_hdr);
    m->l4_len = static_cast<uint64_t>(tcp->data_off >> 4) * 4;
    // With the whole length, as the kernel's tcp_v6_send_check leaves it.
    tcp->cksum = rte_ipv6_phdr_cksum(ip, 0);
}

}  // namespace jakiro::vnet_face
