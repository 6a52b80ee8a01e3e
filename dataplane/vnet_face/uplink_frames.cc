#include "uplink_frames.hh"

#include <rte_ether.h>
#include <rte_ip.h>

#include "../overlay/udp_gso.hh"

namespace jakiro::vnet {

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

}  // namespace jakiro::vnet
