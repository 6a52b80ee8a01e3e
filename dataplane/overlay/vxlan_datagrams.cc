#include "dataplane/overlay/vxlan_datagrams.hh"

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <array>

#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vxlan.hh"

namespace jakiro::overlay {

namespace {

// Flows gathered at once; a frame of a further flow is sent on its own.
constexpr unsigned max_open_datagrams = 16;

// A plaintext VXLAN frame a datagram may carry.
bool plain_vxlan_frame(const rte_mbuf* m, outer_headers& o) {
    return joinable_frame(m, vxlan_udp_port, outer_header_bytes + sizeof(rte_ether_hdr), o);
}

// A datagram being gathered: its first frame (in `pkts`, where it will be sent) and the
// chunk size the kernel will cut at.
struct gathering {
    outer_headers head_outer;
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
    // The flow's datagram leaves as gathered so far; its slot takes another flow.
    const auto close = [&](unsigned g) {
        finish(open[g]);
        open[g] = open[--open_count];
    };
    // The slot gathering `o`'s flow, or open_count.
    const auto gathering_of = [&](const outer_headers& o) {
        unsigned g = 0;
        while (g < open_count && !same_outer_headers(open[g].head_outer, o)) {
            ++g;
        }
        return g;
    };
    bool joined_any = false;
    for (uint16_t i = 0; i < n; ++i) {
        outer_headers o;
        if (!plain_vxlan_frame(pkts[i], o)) {
            // It leaves where it is: a datagram of its flow gathered so far must leave before
            // it, and the flow's later frames behind it.
            if (parse_outer_headers(pkts[i], o)) {
                if (const unsigned g = gathering_of(o); g < open_count) {
                    close(g);
                }
            }
            continue;
        }
        const uint32_t chunk = rte_pktmbuf_pkt_len(pkts[i]) - gso_outer_bytes;
        if (const unsigned g = gathering_of(o); g < open_count) {
            gathering& d = open[g];
            // Equal chunks, then at most one shorter one that ends the datagram: the kernel
            // cuts at every `chunk` bytes.
            if (chunk <= d.chunk && d.bytes + chunk <= max_gso_chunk_bytes &&
                d.chunks < max_gso_chunks) {
                append(d, pkts[i], chunk);
                pkts[i] = nullptr;
                joined_any = true;
                if (chunk < d.chunk) {
                    close(g);
                }
                continue;
            }
            // This frame cannot join: the datagram ends, and the flow's later frames go in one
            // that starts here, behind it.
            close(g);
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
