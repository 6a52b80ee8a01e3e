#include "dataplane/overlay/vxlan_datagrams.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <array>
#include <cstring>

#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vxlan.hh"

namespace jakiro::overlay {

namespace {

// Flows gathered at once; a frame of a further flow is sent on its own.
constexpr unsigned max_open_datagrams = 16;

struct outer {
    const rte_ether_hdr* eth;
    const rte_ipv4_hdr* ip;
    const rte_udp_hdr* udp;
};

// The outer headers of `m` when it is a plaintext VXLAN frame a datagram may carry: one
// buffer, no offload asked for, Ethernet/IPv4 without options or fragments/UDP to the VXLAN
// port, and an IPv4 length that says where it ends.
bool plain_vxlan_frame(const rte_mbuf* m, outer& o) {
    if (m->nb_segs != 1 || (m->ol_flags & RTE_MBUF_F_TX_OFFLOAD_MASK) != 0 ||
        rte_pktmbuf_data_len(m) < outer_header_bytes + sizeof(rte_ether_hdr)) {
        return false;
    }
    o.eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
    o.ip = reinterpret_cast<const rte_ipv4_hdr*>(o.eth + 1);
    o.udp = reinterpret_cast<const rte_udp_hdr*>(o.ip + 1);
    return o.eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) &&
           o.ip->version_ihl == RTE_IPV4_VHL_DEF && o.ip->next_proto_id == IPPROTO_UDP &&
           (rte_be_to_cpu_16(o.ip->fragment_offset) &
            (RTE_IPV4_HDR_OFFSET_MASK | RTE_IPV4_HDR_MF_FLAG)) == 0 &&
           o.udp->dst_port == rte_cpu_to_be_16(vxlan_udp_port) &&
           rte_be_to_cpu_16(o.ip->total_length) + sizeof(rte_ether_hdr) == rte_pktmbuf_pkt_len(m);
}

// The outer headers of any IPv4/UDP frame, `m`'s first segment permitting: what a frame that
// cannot join (a super-datagram already made, a chain, a frame with offloads) shares with the
// datagram its flow is being gathered in.
bool udp_outer(const rte_mbuf* m, outer& o) {
    if (rte_pktmbuf_data_len(m) < gso_outer_bytes) {
        return false;
    }
    o.eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
    o.ip = reinterpret_cast<const rte_ipv4_hdr*>(o.eth + 1);
    o.udp = reinterpret_cast<const rte_udp_hdr*>(o.ip + 1);
    return o.eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) &&
           o.ip->version_ihl == RTE_IPV4_VHL_DEF && o.ip->next_proto_id == IPPROTO_UDP;
}

// Whether the kernel, copying `head`'s outer headers onto every segment, makes `o`'s frame of
// them: the same Ethernet header, addresses, TTL, TOS, DF and source port. The IPv4 id,
// lengths and checksums it writes itself.
bool same_outer(const outer& head, const outer& o) {
    return std::memcmp(head.eth, o.eth, sizeof(rte_ether_hdr)) == 0 &&
           head.ip->src_addr == o.ip->src_addr && head.ip->dst_addr == o.ip->dst_addr &&
           head.ip->type_of_service == o.ip->type_of_service &&
           head.ip->time_to_live == o.ip->time_to_live &&
           head.ip->fragment_offset == o.ip->fragment_offset &&
           head.udp->src_port == o.udp->src_port;
}

// A datagram being gathered: its first frame (in `pkts`, where it will be sent) and the
// chunk size the kernel will cut at.
struct gathering {
    outer head_outer;
    rte_mbuf* head;
    rte_mbuf* last;  // the chain's last segment, so that a join does not walk the chain
    uint32_t chunk;
    uint32_t bytes;
    uint16_t chunks;
};

void finish(const gathering& g) {
    if (g.chunks > 1) {
        set_outer_lengths(rte_pktmbuf_mtod(g.head, uint8_t*), rte_pktmbuf_pkt_len(g.head), true);
        mark_udp_gso(g.head, g.chunk);
    }
}

void append(gathering& g, rte_mbuf* tail, uint32_t chunk) {
    rte_pktmbuf_adj(tail, gso_outer_bytes);  // the outer headers go once, in the head
    g.last->next = tail;
    g.head->nb_segs = static_cast<uint16_t>(g.head->nb_segs + 1);
    g.head->pkt_len += tail->pkt_len;
    g.last = tail;
    g.bytes += chunk;
    ++g.chunks;
}

}  // namespace

uint16_t join_vxlan_datagrams(rte_mbuf** pkts, uint16_t n) {
    std::array<gathering, max_open_datagrams> open;
    unsigned open_count = 0;
    bool joined_any = false;
    for (uint16_t i = 0; i < n; ++i) {
        outer o;
        if (!plain_vxlan_frame(pkts[i], o)) {
            // It leaves where it is: a datagram of its flow gathered so far must leave before
            // it, and the flow's later frames behind it.
            if (udp_outer(pkts[i], o)) {
                for (unsigned g = 0; g < open_count; ++g) {
                    if (same_outer(open[g].head_outer, o)) {
                        finish(open[g]);
                        open[g] = open[--open_count];
                        break;
                    }
                }
            }
            continue;
        }
        const uint32_t chunk = rte_pktmbuf_pkt_len(pkts[i]) - gso_outer_bytes;
        unsigned g = 0;
        while (g < open_count && !same_outer(open[g].head_outer, o)) {
            ++g;
        }
        if (g < open_count) {
            gathering& d = open[g];
            // Equal chunks, then at most one shorter one that ends the datagram: the kernel
            // cuts at every `chunk` bytes.
            if (chunk <= d.chunk && d.bytes + chunk <= max_gso_chunk_bytes &&
                d.chunks < max_gso_chunks) {
                append(d, pkts[i], chunk);
                pkts[i] = nullptr;
                joined_any = true;
                if (chunk < d.chunk) {
                    finish(d);
                    open[g] = open[--open_count];
                }
                continue;
            }
            // This frame cannot join: the datagram ends, and the flow's later frames go in one
            // that starts here, behind it.
            finish(d);
            open[g] = open[--open_count];
        }
        if (open_count < max_open_datagrams) {
            open[open_count++] = {o, pkts[i], pkts[i], chunk, chunk, 1};
        }
    }
    for (unsigned g = 0; g < open_count; ++g) {
        finish(open[g]);
    }
    if (!joined_any) {
        return n;
    }
    uint16_t out = 0;
    for (uint16_t i = 0; i < n; ++i) {
        if (pkts[i] != nullptr) {
            pkts[out++] = pkts[i];
        }
    }
    return out;
}

}  // namespace jakiro::overlay
