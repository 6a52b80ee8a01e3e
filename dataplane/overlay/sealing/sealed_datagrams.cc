#include "dataplane/overlay/sealing/sealed_datagrams.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <cstring>

#include "dataplane/overlay/sealing/esp_format.hh"
#include "dataplane/overlay/sealing/gcm_burst.hh"
#include "dataplane/overlay/udp_gso.hh"

namespace jakiro::overlay::sealing {

namespace {

struct outer {
    const rte_ether_hdr* eth;
    const rte_ipv4_hdr* ip;
    const rte_udp_hdr* udp;
};

// The outer headers of `m` when it is a sealed frame a datagram may carry: one buffer, no
// offload asked for, Ethernet/IPv4 without options or fragments/UDP to the ESP port, and an
// IPv4 length that says where it ends.
bool sealed_frame(const rte_mbuf* m, outer& o) {
    if (m->nb_segs != 1 || (m->ol_flags & RTE_MBUF_F_TX_OFFLOAD_MASK) != 0 ||
        rte_pktmbuf_data_len(m) < gso_outer_bytes + gcm_burst::min_esp_len) {
        return false;
    }
    o.eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
    o.ip = reinterpret_cast<const rte_ipv4_hdr*>(o.eth + 1);
    o.udp = reinterpret_cast<const rte_udp_hdr*>(o.ip + 1);
    return o.eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) &&
           o.ip->version_ihl == RTE_IPV4_VHL_DEF && o.ip->next_proto_id == IPPROTO_UDP &&
           (rte_be_to_cpu_16(o.ip->fragment_offset) &
            (RTE_IPV4_HDR_OFFSET_MASK | RTE_IPV4_HDR_MF_FLAG)) == 0 &&
           o.udp->dst_port == rte_cpu_to_be_16(esp_udp_port) &&
           rte_be_to_cpu_16(o.ip->total_length) + sizeof(rte_ether_hdr) == rte_pktmbuf_pkt_len(m);
}

// Whether the kernel, copying `head`'s outer headers onto every segment, makes `o`'s frame of
// them: the same Ethernet header, addresses, TTL, TOS, DF and ports. The IPv4 id, lengths and
// checksums it writes itself.
bool same_outer(const outer& head, const outer& o) {
    return std::memcmp(head.eth, o.eth, sizeof(rte_ether_hdr)) == 0 &&
           head.ip->src_addr == o.ip->src_addr && head.ip->dst_addr == o.ip->dst_addr &&
           head.ip->type_of_service == o.ip->type_of_service &&
           head.ip->time_to_live == o.ip->time_to_live &&
           head.ip->fragment_offset == o.ip->fragment_offset &&
           head.udp->src_port == o.udp->src_port;
}

}  // namespace

uint16_t join_sealed_frames(rte_mbuf** pkts, uint16_t n) {
    uint16_t out = 0;
    uint16_t i = 0;
    while (i < n) {
        outer head;
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
            outer o;
            if (!sealed_frame(pkts[i], o) || !same_outer(head, o)) {
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
