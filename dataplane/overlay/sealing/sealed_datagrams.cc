#include "dataplane/overlay/sealing/sealed_datagrams.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <algorithm>
#include <cstring>

#include "dataplane/overlay/sealing/esp_format.hh"
#include "dataplane/overlay/sealing/gcm_burst.hh"
#include "dataplane/overlay/udp_gso.hh"

namespace jakiro::overlay::sealing {

namespace {

// A sealed frame a datagram may carry: to the ESP port, at least one ESP payload long.
bool sealed_frame(const rte_mbuf* m, outer_headers& o) {
    return joinable_frame(m, esp_udp_port, gso_outer_bytes + gcm_burst::min_esp_len, o);
}

// A chunk of `plain` bytes (VXLAN header and inner frame) as an ESP frame.
uint32_t sealed_chunk(uint32_t plain) {
    return esp_prefix_bytes + plain + esp_trailer_bytes(plain);
}

// How many sealed chunks of a datagram whose chunks are `stride` bytes one super-datagram in
// an mbuf of `pool` holds: IPv4's length and the mbuf bound it.
uint32_t sealed_chunks_per_datagram(uint32_t stride, rte_mempool* pool) {
    return chunks_per_datagram(sealed_chunk(stride), pool);
}

}  // namespace

uint16_t sealed_datagram_count(const rte_mbuf* m, rte_mempool* pool) {
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    const uint32_t stride = m->tso_segsz;
    if (m->nb_segs != 1 || stride == 0 || len <= gso_outer_bytes) {
        return 0;
    }
    const uint32_t chunks = (len - gso_outer_bytes + stride - 1) / stride;
    const uint32_t per = sealed_chunks_per_datagram(stride, pool);
    return per == 0 ? 0 : static_cast<uint16_t>((chunks + per - 1) / per);
}

bool seal_datagram(rte_mbuf* m, uint16_t count, peer_sa& peer, gcm_burst& gcm, rte_mempool* pool,
                   rte_mbuf** out) {
    if (rte_pktmbuf_alloc_bulk(pool, out, count) != 0) {
        return false;
    }
    const uint8_t* src = rte_pktmbuf_mtod(m, const uint8_t*);
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    const uint32_t stride = m->tso_segsz;
    const uint32_t chunks = (len - gso_outer_bytes + stride - 1) / stride;
    const uint32_t per = sealed_chunks_per_datagram(stride, pool);
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(src + sizeof(rte_ether_hdr));
    const uint16_t outer_id = rte_be_to_cpu_16(ip->packet_id);
    uint64_t sealed_bytes = 0;
    uint32_t k = 0;
    for (uint16_t d = 0; d < count; ++d) {
        rte_mbuf* g = out[d];
        uint8_t* frame = rte_pktmbuf_mtod(g, uint8_t*);
        std::memcpy(frame, src, gso_outer_bytes);
        uint32_t at = gso_outer_bytes;
        const uint32_t first = k;
        const uint32_t end = std::min(chunks, k + per);
        for (; k < end; ++k) {
            const uint32_t offset = gso_outer_bytes + k * stride;
            const plaintext_piece piece{src + offset, std::min(stride, len - offset)};
            gcm.seal_gathered(frame + at, 0, {&piece, 1}, peer.tx_key, peer.tx_epoch, ++peer.tx_seq,
                              ip->src_addr, ip->dst_addr);
            at += sealed_chunk(piece.len);
            sealed_bytes += piece.len;
        }
        g->data_len = static_cast<uint16_t>(at);
        g->pkt_len = at;
        g->port = m->port;
        auto* oip = reinterpret_cast<rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
        oip->packet_id = rte_cpu_to_be_16(static_cast<uint16_t>(outer_id + first));
        reinterpret_cast<rte_udp_hdr*>(oip + 1)->dst_port = rte_cpu_to_be_16(esp_udp_port);
        const bool several = end - first > 1;
        set_outer_lengths(frame, at, several);
        if (several) {
            mark_udp_gso(g, sealed_chunk(stride));
        }
    }
    peer.tx_epoch_bytes += sealed_bytes;
    peer.counters.sealed.add(chunks);
    peer.counters.sealed_bytes.add(sealed_bytes);
    rte_pktmbuf_free(m);
    return true;
}

uint16_t join_sealed_frames(rte_mbuf** pkts, uint16_t n) {
    uint16_t out = 0;
    uint16_t i = 0;
    while (i < n) {
        outer_headers head;
        if (!sealed_frame(pkts[i], head)) {
            pkts[out++] = pkts[i++];
            continue;
        }
        const uint16_t start = i++;
        const uint32_t chunk = rte_pktmbuf_pkt_len(pkts[start]) - gso_outer_bytes;
        uint32_t bytes = chunk;
        // Equal chunks, then at most one shorter one that ends the run: the kernel cuts at
        // every `chunk` bytes.
        while (i < n && i - start < max_gso_chunks) {
            outer_headers o;
            if (!sealed_frame(pkts[i], o) || !same_outer_headers(head, o)) {
                break;
            }
            const uint32_t next = rte_pktmbuf_pkt_len(pkts[i]) - gso_outer_bytes;
            if (next > chunk || bytes + next > max_gso_chunk_bytes) {
                break;
            }
            bytes += next;
            ++i;
            if (next < chunk) {
                break;
            }
        }
        out = static_cast<uint16_t>(
            out + join_vxlan_frames(pkts + start, static_cast<uint16_t>(i - start), pkts + out));
    }
    return out;
}

}  // namespace jakiro::overlay::sealing
