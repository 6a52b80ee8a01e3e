#include "dataplane/overlay/sealing/sealed_superframe.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <algorithm>
#include <cstring>

#include "dataplane/internet_checksum.hh"
#include "dataplane/overlay/superframe.hh"

namespace jakiro::overlay::sealing {

namespace {

// Outer Ethernet, IPv4 without options and UDP: what stays in the clear.
constexpr uint32_t clear_bytes = sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr);
constexpr uint32_t vxlan_bytes = 8;
constexpr uint32_t inner_ip_offset = clear_bytes + vxlan_bytes + sizeof(rte_ether_hdr);

uint32_t headers_of(const rte_mbuf* m) {
    return inner_ip_offset + m->l3_len + m->l4_len;
}

}  // namespace

bool is_vxlan_superframe(const rte_mbuf* m) {
    constexpr uint64_t marks = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_TUNNEL_VXLAN;
    return (m->ol_flags & marks) == marks;
}

uint16_t superframe_cut_count(const rte_mbuf* m, rte_mempool* pool) {
    const uint32_t headers = headers_of(m);
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    // TCP/IPv4 inside only: a TCP/IPv6 super-frame is cut before it reaches the sealing.
    if (!is_vxlan_superframe(m) || (m->ol_flags & RTE_MBUF_F_TX_IPV6) != 0 ||
        m->outer_l2_len != sizeof(rte_ether_hdr) || m->outer_l3_len != sizeof(rte_ipv4_hdr) ||
        m->l2_len != sizeof(rte_udp_hdr) + vxlan_bytes + sizeof(rte_ether_hdr) ||
        m->l3_len < sizeof(rte_ipv4_hdr) || m->l4_len < sizeof(rte_tcp_hdr) || m->tso_segsz == 0 ||
        m->nb_segs > max_chain || rte_pktmbuf_data_len(m) < headers || len <= headers) {
        return 0;
    }
    const uint32_t payload = len - headers;
    const uint32_t frames = (payload + m->tso_segsz - 1) / m->tso_segsz;
    const uint32_t biggest = headers + esp_prefix_bytes +
                             std::min<uint32_t>(m->tso_segsz, payload) + esp_max_trailer_bytes;
    const uint32_t room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
    if (frames > overlay::max_segments || biggest > room) {
        return 0;
    }
    return static_cast<uint16_t>(frames);
}

bool seal_superframe(rte_mbuf* m, uint16_t count, peer_sa& peer, gcm_burst& gcm, rte_mempool* pool,
                     rte_mbuf** out) {
    if (rte_pktmbuf_alloc_bulk(pool, out, count) != 0) {
        return false;
    }
    const uint8_t* src = rte_pktmbuf_mtod(m, const uint8_t*);
    const uint32_t l3 = m->l3_len;
    const uint32_t l4 = m->l4_len;
    const uint32_t headers = headers_of(m);
    const uint32_t plain_head = headers - clear_bytes;  // VXLAN header to the TCP options
    const uint32_t payload = rte_pktmbuf_pkt_len(m) - headers;
    const uint32_t mss = m->tso_segsz;
    const auto* outer_ip = reinterpret_cast<const rte_ipv4_hdr*>(src + sizeof(rte_ether_hdr));
    const auto* inner_ip = reinterpret_cast<const rte_ipv4_hdr*>(src + inner_ip_offset);
    const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(src + inner_ip_offset + l3);
    const uint16_t outer_id = rte_be_to_cpu_16(outer_ip->packet_id);
    const uint16_t inner_id = rte_be_to_cpu_16(inner_ip->packet_id);
    const uint32_t seq = rte_be_to_cpu_32(tcp->sent_seq);
    // Where the next frame's payload starts: a segment of `m` and an offset in it.
    const rte_mbuf* seg = m;
    uint32_t at = headers;
    uint64_t sealed_bytes = 0;
    for (uint16_t k = 0; k < count; ++k) {
        const uint32_t offset = k * mss;
        const uint32_t n = std::min(mss, payload - offset);
        rte_mbuf* f = out[k];
        uint8_t* frame = rte_pktmbuf_mtod(f, uint8_t*);
        std::memcpy(frame, src, clear_bytes);
        uint8_t* text = frame + clear_bytes + esp_prefix_bytes;
        std::memcpy(text, src + clear_bytes, plain_head);

        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(text + vxlan_bytes + sizeof(rte_ether_hdr));
        ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(l3 + l4 + n));
        ip->packet_id = rte_cpu_to_be_16(static_cast<uint16_t>(inner_id + k));
        ip->hdr_checksum = 0;
        ip->hdr_checksum = rte_ipv4_cksum(ip);
        auto* t = reinterpret_cast<rte_tcp_hdr*>(reinterpret_cast<uint8_t*>(ip) + l3);
        t->sent_seq = rte_cpu_to_be_32(seq + offset);
        if (k + 1 < count) {
            t->tcp_flags &= static_cast<uint8_t>(~(RTE_TCP_FIN_FLAG | RTE_TCP_PSH_FLAG));
        }
        t->cksum = 0;
        const uint64_t sum =
            rte_ipv4_phdr_cksum(ip, 0) + ones_sum(t, l4) + ones_sum_mbuf(m, headers + offset, n);
        t->cksum = static_cast<uint16_t>(~fold_sum(sum));

        plaintext_piece pieces[max_chain];
        unsigned count_pieces = 0;
        for (uint32_t left = n; left > 0;) {
            if (at == seg->data_len) {
                seg = seg->next;
                at = 0;
                continue;
            }
            const uint32_t take = std::min<uint32_t>(left, seg->data_len - at);
            pieces[count_pieces++] = {rte_pktmbuf_mtod_offset(seg, const uint8_t*, at), take};
            at += take;
            left -= take;
        }

        const uint32_t plain_len = plain_head + n;
        const uint32_t len =
            clear_bytes + esp_prefix_bytes + plain_len + esp_trailer_bytes(plain_len);
        f->data_len = static_cast<uint16_t>(len);
        f->pkt_len = len;
        f->port = m->port;
        auto* oip = reinterpret_cast<rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
        auto* udp = reinterpret_cast<rte_udp_hdr*>(oip + 1);
        oip->packet_id = rte_cpu_to_be_16(static_cast<uint16_t>(outer_id + k));
        oip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(len - sizeof(rte_ether_hdr)));
        oip->hdr_checksum = 0;
        oip->hdr_checksum = rte_ipv4_cksum(oip);
        udp->dgram_len = rte_cpu_to_be_16(
            static_cast<uint16_t>(len - sizeof(rte_ether_hdr) - sizeof(rte_ipv4_hdr)));
        udp->dst_port = rte_cpu_to_be_16(esp_udp_port);
        udp->dgram_cksum = 0;
        gcm.seal_gathered(frame + clear_bytes, plain_head, {pieces, count_pieces}, peer.tx_key,
                          peer.tx_epoch, ++peer.tx_seq, oip->src_addr, oip->dst_addr);
        sealed_bytes += plain_len;
    }
    peer.tx_epoch_bytes += sealed_bytes;
    peer.counters.sealed.add(count);
    peer.counters.sealed_bytes.add(sealed_bytes);
    rte_pktmbuf_free(m);
    return true;
}

}  // namespace jakiro::overlay::sealing
