#include "dataplane/overlay/sealing/sealed_superframe.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <algorithm>
#include <cstring>

#include "dataplane/internet_checksum.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/udp_gso.hh"

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

namespace {

// Cutting one super-frame: what every frame shares and where the next frame's payload starts.
struct cut {
    const rte_mbuf* m;
    const uint8_t* src;
    uint32_t l3, l4, headers, plain_head, payload, mss;
    uint16_t inner_id;
    uint32_t seq;
    uint32_t outer_src_be, outer_dst_be;
    const rte_mbuf* seg;  // the segment of `m` and the offset in it where the next payload starts
    uint32_t at;

    explicit cut(const rte_mbuf* sf)
        : m(sf),
          src(rte_pktmbuf_mtod(sf, const uint8_t*)),
          l3(sf->l3_len),
          l4(sf->l4_len),
          headers(headers_of(sf)),
          plain_head(headers - clear_bytes),
          payload(rte_pktmbuf_pkt_len(sf) - headers),
          mss(sf->tso_segsz),
          seg(sf),
          at(headers) {
        const auto* outer_ip = reinterpret_cast<const rte_ipv4_hdr*>(src + sizeof(rte_ether_hdr));
        const auto* inner_ip = reinterpret_cast<const rte_ipv4_hdr*>(src + inner_ip_offset);
        const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(src + inner_ip_offset + l3);
        inner_id = rte_be_to_cpu_16(inner_ip->packet_id);
        seq = rte_be_to_cpu_32(tcp->sent_seq);
        outer_src_be = outer_ip->src_addr;
        outer_dst_be = outer_ip->dst_addr;
    }

    uint32_t plain_len(uint16_t k) const { return plain_head + std::min(mss, payload - k * mss); }

    // Writes frame `k` of `count` as an ESP payload at `esp` (the inner headers completed, its
    // slice of the payload encrypted from where it lies) and seals it for `peer`. Returns its
    // plaintext length.
    uint32_t seal_frame(uint16_t k, uint16_t count, uint8_t* esp, peer_sa& peer, gcm_burst& gcm) {
        const uint32_t offset = k * mss;
        const uint32_t n = std::min(mss, payload - offset);
        uint8_t* text = esp + esp_prefix_bytes;
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
        gcm.seal_gathered(esp, plain_head, {pieces, count_pieces}, peer.tx_key, peer.tx_epoch,
                          ++peer.tx_seq, outer_src_be, outer_dst_be);
        return plain_head + n;
    }
};

void count_sealed(peer_sa& peer, uint16_t count, uint64_t bytes) {
    peer.tx_epoch_bytes += bytes;
    peer.counters.sealed.add(count);
    peer.counters.sealed_bytes.add(bytes);
}

// How many sealed frames of `c` one super-datagram in an mbuf of `pool` carries: as many as
// the chunk bytes an IPv4 length and the mbuf hold, at most overlay::max_gso_chunks.
uint32_t frames_per_datagram(const cut& c, rte_mempool* pool) {
    const uint32_t plain = c.plain_head + std::min(c.mss, c.payload);
    return chunks_per_datagram(esp_prefix_bytes + plain + esp_trailer_bytes(plain), pool);
}

}  // namespace

bool seal_superframe(rte_mbuf* m, uint16_t count, peer_sa& peer, gcm_burst& gcm, rte_mempool* pool,
                     rte_mbuf** out) {
    if (rte_pktmbuf_alloc_bulk(pool, out, count) != 0) {
        return false;
    }
    cut c(m);
    const auto* outer_ip = reinterpret_cast<const rte_ipv4_hdr*>(c.src + sizeof(rte_ether_hdr));
    const uint16_t outer_id = rte_be_to_cpu_16(outer_ip->packet_id);
    uint64_t sealed_bytes = 0;
    for (uint16_t k = 0; k < count; ++k) {
        rte_mbuf* f = out[k];
        uint8_t* frame = rte_pktmbuf_mtod(f, uint8_t*);
        std::memcpy(frame, c.src, clear_bytes);
        const uint32_t plain_len = c.seal_frame(k, count, frame + clear_bytes, peer, gcm);
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
        sealed_bytes += plain_len;
    }
    count_sealed(peer, count, sealed_bytes);
    rte_pktmbuf_free(m);
    return true;
}

uint16_t superframe_datagram_count(const rte_mbuf* m, uint16_t count, rte_mempool* pool) {
    const uint32_t per = frames_per_datagram(cut(m), pool);
    return per == 0 ? 0 : static_cast<uint16_t>((count + per - 1) / per);
}

bool seal_superframe_datagrams(rte_mbuf* m, uint16_t count, uint16_t datagrams, peer_sa& peer,
                               gcm_burst& gcm, rte_mempool* pool, rte_mbuf** out) {
    if (rte_pktmbuf_alloc_bulk(pool, out, datagrams) != 0) {
        return false;
    }
    cut c(m);
    const uint32_t per = frames_per_datagram(c, pool);
    const auto* outer_ip = reinterpret_cast<const rte_ipv4_hdr*>(c.src + sizeof(rte_ether_hdr));
    const uint16_t outer_id = rte_be_to_cpu_16(outer_ip->packet_id);
    uint64_t sealed_bytes = 0;
    uint16_t k = 0;
    for (uint16_t d = 0; d < datagrams; ++d) {
        rte_mbuf* g = out[d];
        uint8_t* frame = rte_pktmbuf_mtod(g, uint8_t*);
        std::memcpy(frame, c.src, clear_bytes);
        uint32_t len = clear_bytes;
        uint32_t chunk = 0;
        const auto end = static_cast<uint16_t>(std::min<uint32_t>(count, k + per));
        const uint16_t first = k;
        for (; k < end; ++k) {
            const uint32_t plain_len = c.seal_frame(k, count, frame + len, peer, gcm);
            const uint32_t esp_len = esp_prefix_bytes + plain_len + esp_trailer_bytes(plain_len);
            chunk = std::max(chunk, esp_len);  // the first: every one but the last is as long
            len += esp_len;
            sealed_bytes += plain_len;
        }
        g->data_len = static_cast<uint16_t>(len);
        g->pkt_len = len;
        g->port = m->port;
        // Numbered as the frames would be one by one; the kernel counts up from there.
        auto* oip = reinterpret_cast<rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
        oip->packet_id = rte_cpu_to_be_16(static_cast<uint16_t>(outer_id + first));
        auto* udp = reinterpret_cast<rte_udp_hdr*>(oip + 1);
        udp->dst_port = rte_cpu_to_be_16(esp_udp_port);
        const bool several = end - first > 1;
        set_outer_lengths(frame, len, several);
        if (several) {
            mark_udp_gso(g, chunk);
        }
    }
    count_sealed(peer, count, sealed_bytes);
    rte_pktmbuf_free(m);
    return true;
}

}  // namespace jakiro::overlay::sealing
