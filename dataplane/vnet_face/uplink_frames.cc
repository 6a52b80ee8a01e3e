#include "dataplane/vnet_face/uplink_frames.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vxlan.hh"

namespace jakiro::vnet_face {

namespace {

constexpr uint16_t outer_udp_start = sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr);

drop_reason reason_of(overlay::split_verdict v) {
    switch (v) {
        case overlay::split_verdict::bad_headers:
            return drop_reason::uplink_gso_bad_headers;
        case overlay::split_verdict::bad_gso_size:
            return drop_reason::uplink_gso_bad_size;
        case overlay::split_verdict::too_many_segments:
            return drop_reason::uplink_gso_too_many_segments;
        default:
            return drop_reason::uplink_gso_no_mbufs;
    }
}

}  // namespace

std::optional<drop_reason> take_uplink_message(const virtio_net_hdr& hdr, rte_mbuf* head,
                                               const uint8_t* tail, uint32_t len, rte_mempool* pool,
                                               rte_mbuf** out, uint16_t& count) {
    count = 0;
    const auto drop = [&](drop_reason reason) {
        rte_pktmbuf_free(head);
        return reason;
    };
    const uint32_t head_len = rte_pktmbuf_data_len(head);
    if ((hdr.flags & ~(VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID)) != 0 ||
        head_len > len) {
        return drop(drop_reason::uplink_bad_vnet_header);
    }
    const bool needs_csum = (hdr.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) != 0;
    if (hdr.gso_type == VIRTIO_NET_HDR_GSO_NONE) {
        if (len > head_len) {
            return drop(drop_reason::uplink_frame_too_big);
        }
        if (needs_csum) {
            // A frame the kernel segmented in software (tx-udp-segmentation off on the sender)
            // or any frame that crossed veths only: the checksum field holds the pseudo-header
            // sum. Completed like a tenant's, so every frame downstream is an ordinary one.
            if (hdr.csum_start < sizeof(rte_ether_hdr) ||
                uint32_t{hdr.csum_start} + hdr.csum_offset + sizeof(uint16_t) > len) {
                return drop(drop_reason::uplink_bad_vnet_header);
            }
            complete_partial_checksum(rte_pktmbuf_mtod(head, uint8_t*), len, hdr.csum_start,
                                      hdr.csum_offset);
        }
        out[0] = head;
        count = 1;
        return std::nullopt;
    }
    // The kernel gives GSO_UDP_L4 only with NEEDS_CSUM on the outer UDP checksum.
    if (hdr.gso_type != VIRTIO_NET_HDR_GSO_UDP_L4 || !needs_csum ||
        hdr.csum_start != outer_udp_start || hdr.csum_offset != udp_csum_offset) {
        return drop(drop_reason::uplink_bad_vnet_header);
    }
    const auto verdict = overlay::split_udp_gso(head, tail, len, hdr.gso_size, pool, out, count);
    if (verdict != overlay::split_verdict::ok) {
        return reason_of(verdict);
    }
    return std::nullopt;
}

std::optional<drop_reason> take_vxlan_superframe(const tap_header& hdr, rte_mbuf* m) {
    const auto drop = [&] {
        rte_pktmbuf_free(m);
        return drop_reason::uplink_bad_superframe;
    };
    constexpr uint8_t allowed_flags =
        VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_UDP_TUNNEL_CSUM;
    const uint8_t gso = hdr.base.gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
    const bool v6 = gso == (VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4 | VIRTIO_NET_HDR_GSO_TCPV6);
    if ((gso != (VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4 | VIRTIO_NET_HDR_GSO_TCPV4) && !v6) ||
        (hdr.base.flags & ~allowed_flags) != 0 ||
        (hdr.base.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) == 0 || hdr.base.gso_size == 0 ||
        hdr.outer_th_offset != tunnel_outer_udp_offset ||
        hdr.inner_nh_offset != tunnel_inner_ip_offset) {
        return drop();
    }
    // Every header up to the inner TCP options must be in the first segment.
    const uint32_t first = rte_pktmbuf_data_len(m);
    const uint32_t fixed = tunnel_inner_ip_offset +
                           (v6 ? sizeof(rte_ipv6_hdr) : sizeof(rte_ipv4_hdr)) + sizeof(rte_tcp_hdr);
    if (first < fixed) {
        return drop();
    }
    const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    const auto* outer_ip = reinterpret_cast<const rte_ipv4_hdr*>(eth + 1);
    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(frame + tunnel_outer_udp_offset);
    const auto* inner_eth =
        reinterpret_cast<const rte_ether_hdr*>(frame + tunnel_inner_ip_offset) - 1;
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) ||
        outer_ip->version_ihl != RTE_IPV4_VHL_DEF || outer_ip->next_proto_id != IPPROTO_UDP ||
        udp->dst_port != rte_cpu_to_be_16(overlay::vxlan_udp_port) ||
        inner_eth->ether_type != rte_cpu_to_be_16(v6 ? RTE_ETHER_TYPE_IPV6 : RTE_ETHER_TYPE_IPV4)) {
        return drop();
    }
    uint32_t tcp_start = 0;
    if (v6) {
        // TCP right after the fixed header: the pipeline forwards no IPv6 extension header.
        const auto* ip = reinterpret_cast<const rte_ipv6_hdr*>(frame + tunnel_inner_ip_offset);
        if ((rte_be_to_cpu_32(ip->vtc_flow) >> 28) != 6 || ip->proto != IPPROTO_TCP) {
            return drop();
        }
        tcp_start = tunnel_inner_ip_offset + sizeof(rte_ipv6_hdr);
    } else {
        const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(frame + tunnel_inner_ip_offset);
        if ((ip->version_ihl >> 4) != 4 || rte_ipv4_hdr_len(ip) < sizeof(rte_ipv4_hdr) ||
            ip->next_proto_id != IPPROTO_TCP) {
            return drop();
        }
        tcp_start = tunnel_inner_ip_offset + rte_ipv4_hdr_len(ip);
    }
    if (hdr.base.csum_start != tcp_start || hdr.base.csum_offset != tcp_csum_offset ||
        tcp_start + sizeof(rte_tcp_hdr) > first) {
        return drop();
    }
    const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(frame + tcp_start);
    const uint32_t headers = tcp_start + (tcp->data_off >> 4) * 4u;
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    if ((tcp->data_off >> 4) < 5 || headers > first || len <= headers ||
        (len - headers + hdr.base.gso_size - 1) / hdr.base.gso_size > overlay::max_segments) {
        return drop();
    }
    m->ol_flags = RTE_MBUF_F_RX_LRO;
    m->tso_segsz = hdr.base.gso_size;
    m->packet_type = 0;
    return std::nullopt;
}

}  // namespace jakiro::vnet_face
