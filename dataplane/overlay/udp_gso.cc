#include "dataplane/overlay/udp_gso.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <algorithm>
#include <cstring>

namespace jakiro::overlay {

namespace {

constexpr uint32_t ip_offset = sizeof(rte_ether_hdr);
constexpr uint32_t udp_offset = ip_offset + sizeof(rte_ipv4_hdr);
static_assert(gso_outer_bytes == udp_offset + sizeof(rte_udp_hdr));

// Copies `n` bytes at `offset` of a datagram whose first `head_len` bytes are at `head` and
// the rest at `tail`.
void copy_from(uint8_t* to, const uint8_t* head, uint32_t head_len, const uint8_t* tail,
               uint32_t offset, uint32_t n) {
    if (offset < head_len) {
        const uint32_t from_head = std::min(n, head_len - offset);
        std::memcpy(to, head + offset, from_head);
        to += from_head;
        n -= from_head;
        offset = head_len;
    }
    if (n > 0) {
        std::memcpy(to, tail + (offset - head_len), n);
    }
}

}  // namespace

bool parse_outer_headers(const rte_mbuf* m, outer_headers& o) {
    if (rte_pktmbuf_data_len(m) < gso_outer_bytes) {
        return false;
    }
    o.eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
    o.ip = reinterpret_cast<const rte_ipv4_hdr*>(o.eth + 1);
    o.udp = reinterpret_cast<const rte_udp_hdr*>(o.ip + 1);
    return o.eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) &&
           o.ip->version_ihl == RTE_IPV4_VHL_DEF && o.ip->next_proto_id == IPPROTO_UDP;
}

bool joinable_frame(const rte_mbuf* m, uint16_t udp_port, uint32_t min_len, outer_headers& o) {
    return m->nb_segs == 1 && (m->ol_flags & RTE_MBUF_F_TX_OFFLOAD_MASK) == 0 &&
           rte_pktmbuf_data_len(m) >= min_len && parse_outer_headers(m, o) &&
           (rte_be_to_cpu_16(o.ip->fragment_offset) &
            (RTE_IPV4_HDR_OFFSET_MASK | RTE_IPV4_HDR_MF_FLAG)) == 0 &&
           o.udp->dst_port == rte_cpu_to_be_16(udp_port) &&
           rte_be_to_cpu_16(o.ip->total_length) + sizeof(rte_ether_hdr) == rte_pktmbuf_pkt_len(m);
}

bool same_outer_headers(const outer_headers& head, const outer_headers& o) {
    return std::memcmp(head.eth, o.eth, sizeof(rte_ether_hdr)) == 0 &&
           head.ip->src_addr == o.ip->src_addr && head.ip->dst_addr == o.ip->dst_addr &&
           head.ip->type_of_service == o.ip->type_of_service &&
           head.ip->time_to_live == o.ip->time_to_live &&
           head.ip->fragment_offset == o.ip->fragment_offset &&
           head.udp->src_port == o.udp->src_port;
}

void set_outer_lengths(uint8_t* frame, uint32_t len, bool super_datagram) {
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(frame + ip_offset);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(frame + udp_offset);
    ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(len - ip_offset));
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    udp->dgram_len = rte_cpu_to_be_16(static_cast<uint16_t>(len - udp_offset));
    udp->dgram_cksum = super_datagram ? rte_ipv4_phdr_cksum(ip, 0) : 0;
}

void mark_udp_gso(rte_mbuf* m, uint32_t chunk) {
    m->ol_flags = RTE_MBUF_F_TX_UDP_SEG | RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM |
                  RTE_MBUF_F_TX_UDP_CKSUM;
    m->tso_segsz = static_cast<uint16_t>(chunk);
    m->l2_len = sizeof(rte_ether_hdr);
    m->l3_len = sizeof(rte_ipv4_hdr);
    m->l4_len = sizeof(rte_udp_hdr);
}

uint16_t join_vxlan_frames(rte_mbuf** frames, uint16_t n, rte_mbuf** out) {
    uint16_t produced = 0;
    uint16_t i = 0;
    while (i < n) {
        rte_mbuf* head = frames[i++];
        // rte_pktmbuf_chain would walk the whole chain for its last segment at every join:
        // quadratic in a datagram's ~43 two-segment frames (4 % of a TCP stream's samples).
        rte_mbuf* last = rte_pktmbuf_lastseg(head);
        const uint32_t chunk = rte_pktmbuf_pkt_len(head) - gso_outer_bytes;
        uint32_t bytes = chunk;
        uint16_t chunks = 1;
        // Equal chunks, then at most one shorter one that ends the datagram: the kernel cuts
        // at every gso_size bytes, so a chunk of another size in the middle would be misread.
        while (i < n) {
            const uint32_t next = rte_pktmbuf_pkt_len(frames[i]) - gso_outer_bytes;
            if (next > chunk || bytes + next > max_gso_chunk_bytes) {
                break;
            }
            rte_mbuf* tail = frames[i++];
            rte_pktmbuf_adj(tail, gso_outer_bytes);  // the outer headers go once, in `head`
            last->next = tail;
            head->nb_segs = static_cast<uint16_t>(head->nb_segs + tail->nb_segs);
            head->pkt_len += tail->pkt_len;
            tail->pkt_len = tail->data_len;
            last = rte_pktmbuf_lastseg(tail);
            bytes += next;
            ++chunks;
            if (next < chunk) {
                break;
            }
        }
        if (chunks > 1) {
            set_outer_lengths(rte_pktmbuf_mtod(head, uint8_t*), rte_pktmbuf_pkt_len(head), true);
            mark_udp_gso(head, chunk);
        }
        out[produced++] = head;
    }
    return produced;
}

uint32_t wire_bytes(const rte_mbuf* m) {
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    if ((m->ol_flags & RTE_MBUF_F_TX_UDP_SEG) == 0 || m->tso_segsz == 0) {
        return len;
    }
    const uint32_t chunks = (len - gso_outer_bytes + m->tso_segsz - 1) / m->tso_segsz;
    return len + (chunks - 1) * gso_outer_bytes;
}

split_verdict split_udp_gso(rte_mbuf* head, const uint8_t* tail, uint32_t len, uint16_t gso_size,
                            rte_mempool* pool, rte_mbuf** out, uint16_t& count) {
    count = 0;
    const auto refuse = [&](split_verdict v) {
        rte_pktmbuf_free(head);
        return v;
    };
    uint8_t* frame = rte_pktmbuf_mtod(head, uint8_t*);
    const uint32_t head_len = rte_pktmbuf_data_len(head);
    if (len <= gso_outer_bytes || head_len < gso_outer_bytes || head_len > len ||
        (head_len < len && tail == nullptr)) {
        return refuse(split_verdict::bad_headers);
    }
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(frame + ip_offset);
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) ||
        ip->version_ihl != RTE_IPV4_VHL_DEF || ip->next_proto_id != IPPROTO_UDP) {
        return refuse(split_verdict::bad_headers);
    }
    const uint32_t payload = len - gso_outer_bytes;
    const uint32_t mbuf_room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
    // The first chunk must already be whole in `head`, every other must fit a fresh mbuf.
    if (gso_size == 0 || gso_outer_bytes + gso_size > mbuf_room ||
        gso_outer_bytes + std::min<uint32_t>(gso_size, payload) > head_len) {
        return refuse(split_verdict::bad_gso_size);
    }
    const uint32_t chunks = (payload + gso_size - 1) / gso_size;
    if (chunks > max_gso_chunks) {
        return refuse(split_verdict::too_many_segments);
    }
    out[0] = head;
    for (uint32_t k = 1; k < chunks; ++k) {
        rte_mbuf* m = rte_pktmbuf_alloc(pool);
        if (m == nullptr) {
            rte_pktmbuf_free_bulk(out, static_cast<unsigned>(k));  // `head` is out[0]
            return split_verdict::no_mbufs;
        }
        const uint32_t offset = gso_outer_bytes + k * gso_size;
        const uint32_t bytes = std::min<uint32_t>(gso_size, len - offset);
        uint8_t* to = rte_pktmbuf_mtod(m, uint8_t*);
        std::memcpy(to, frame, gso_outer_bytes);
        copy_from(to + gso_outer_bytes, frame, head_len, tail, offset, bytes);
        m->data_len = static_cast<uint16_t>(gso_outer_bytes + bytes);
        m->pkt_len = m->data_len;
        set_outer_lengths(to, m->pkt_len, false);
        out[k] = m;
    }
    // The first frame last: the others copied its outer headers as they arrived.
    const uint32_t first = gso_outer_bytes + std::min<uint32_t>(gso_size, payload);
    head->data_len = static_cast<uint16_t>(first);
    head->pkt_len = first;
    head->ol_flags = 0;
    set_outer_lengths(frame, first, false);
    count = static_cast<uint16_t>(chunks);
    return split_verdict::ok;
}

}  // namespace jakiro::overlay
