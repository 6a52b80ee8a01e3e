#include "dataplane/overlay/superframe.hh"

#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_gro.h>
#include <rte_gso.h>
#include <rte_tcp.h>
#include <rte_udp.h>
#include <rte_vxlan.h>

#include <algorithm>
#include <cstring>

#include "dataplane/internet_checksum.hh"
#include "dataplane/overlay/tcp6_superframe.hh"
#include "dataplane/overlay/vxlan.hh"

namespace jakiro::overlay {

namespace {

constexpr uint32_t vxlan_headers = sizeof(rte_udp_hdr) + sizeof(rte_vxlan_hdr);  // 16
constexpr uint32_t outer_bytes = sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr) + vxlan_headers;

uint16_t tcp_header_len(const rte_ipv4_hdr* ip) {
    const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(reinterpret_cast<const uint8_t*>(ip) +
                                                           rte_ipv4_hdr_len(ip));
    return (tcp->data_off >> 4) * 4;
}

void set_ipv4_length(rte_ipv4_hdr* ip, uint32_t total) {
    ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(total));
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
}

// Completes one frame cut from a super-frame: lengths from the frame's size, then checksums.
void finish_segment(rte_mbuf* seg, bool tunnelled) {
    uint8_t* frame = rte_pktmbuf_mtod(seg, uint8_t*);
    const uint32_t len = rte_pktmbuf_pkt_len(seg);
    uint32_t inner = 0;
    if (tunnelled) {
        auto* outer_ip = reinterpret_cast<rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
        auto* udp = reinterpret_cast<rte_udp_hdr*>(outer_ip + 1);
        udp->dgram_len = rte_cpu_to_be_16(
            static_cast<uint16_t>(len - sizeof(rte_ether_hdr) - sizeof(rte_ipv4_hdr)));
        udp->dgram_cksum = 0;
        set_ipv4_length(outer_ip, len - sizeof(rte_ether_hdr));
        inner = outer_bytes;
    }
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(frame + inner + sizeof(rte_ether_hdr));
    set_ipv4_length(ip, len - inner - sizeof(rte_ether_hdr));
    const uint32_t l4_off = inner + sizeof(rte_ether_hdr) + rte_ipv4_hdr_len(ip);
    auto* tcp = reinterpret_cast<rte_tcp_hdr*>(frame + l4_off);
    tcp->cksum = 0;
    // Over the header mbuf and the indirect payload mbuf the frame spans.
    tcp->cksum = ipv4_l4_checksum(seg, ip, l4_off);
    seg->ol_flags = 0;
    seg->tso_segsz = 0;
}

}  // namespace

namespace {

struct cut {
    uint32_t payload = 0;  // TCP payload bytes
    uint32_t headers = 0;  // IPv4 + TCP header bytes each frame repeats
    uint32_t frames = 1;
};

cut cut_of(const rte_ipv4_hdr* ip, uint16_t mss) {
    const uint32_t ip_len = rte_be_to_cpu_16(ip->total_length);
    if (mss == 0 || ip->next_proto_id != IPPROTO_TCP) {
        return {0, ip_len, 1};
    }
    const uint32_t headers = rte_ipv4_hdr_len(ip) + tcp_header_len(ip);
    const uint32_t payload = ip_len > headers ? ip_len - headers : 0;
    return {payload, headers, std::max<uint32_t>(1, (payload + mss - 1) / mss)};
}

cut cut_of(const rte_ipv6_hdr* ip, uint16_t mss) {
    const uint32_t ip_len = rte_be_to_cpu_16(ip->payload_len) + uint32_t{sizeof(rte_ipv6_hdr)};
    if (mss == 0 || ip->proto != IPPROTO_TCP) {
        return {0, ip_len, 1};
    }
    const uint32_t headers = sizeof(rte_ipv6_hdr) + tcp6_header_len(ip);
    const uint32_t payload = ip_len > headers ? ip_len - headers : 0;
    return {payload, headers, std::max<uint32_t>(1, (payload + mss - 1) / mss)};
}

template <typename Ip>
uint32_t wire_bytes_of(const Ip* ip, uint16_t mss) {
    const cut c = cut_of(ip, mss);
    return c.payload + c.frames * (c.headers + sizeof(rte_ether_hdr) + outer_header_bytes);
}

}  // namespace

uint32_t charged_wire_bytes(const rte_ipv4_hdr* ip, uint16_t mss) {
    return wire_bytes_of(ip, mss);
}

uint32_t charged_wire_bytes(const rte_ipv6_hdr* ip, uint16_t mss) {
    return wire_bytes_of(ip, mss);
}

uint32_t frames_of(const rte_ipv4_hdr* ip, uint16_t mss) {
    return cut_of(ip, mss).frames;
}

uint32_t frames_of(const rte_ipv6_hdr* ip, uint16_t mss) {
    return cut_of(ip, mss).frames;
}

bool superframe_fits(const rte_mbuf* m, uint32_t mtu) {
    const uint32_t headers = m->l3_len + m->l4_len;
    if (m->tso_segsz == 0 || headers + m->tso_segsz > mtu) {
        return false;
    }
    const uint32_t payload = rte_pktmbuf_pkt_len(m) - m->l2_len - headers;
    return (payload + m->tso_segsz - 1) / m->tso_segsz <= max_segments;
}

int segment_superframe(rte_mbuf* m, bool tunnelled, uint16_t max_frame, rte_mempool* pool,
                       rte_mbuf** out, uint16_t max_out) {
    if (is_ipv6_superframe(m)) {
        return segment_tcp6_superframe(m, tunnelled, max_frame, pool, out, max_out);
    }
    const uint32_t inner_headers = sizeof(rte_ether_hdr) + m->l3_len + m->l4_len;
    rte_gso_ctx ctx{};
    ctx.direct_pool = pool;    // a copy of the headers per frame
    ctx.indirect_pool = pool;  // a reference to the payload per frame
    if (tunnelled) {
        m->outer_l2_len = sizeof(rte_ether_hdr);
        m->outer_l3_len = sizeof(rte_ipv4_hdr);
        m->l2_len = vxlan_headers + sizeof(rte_ether_hdr);
        m->ol_flags = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_OUTER_IPV4 |
                      RTE_MBUF_F_TX_TUNNEL_VXLAN;
        ctx.gso_types = RTE_ETH_TX_OFFLOAD_VXLAN_TNL_TSO;
    } else {
        m->l2_len = sizeof(rte_ether_hdr);
        m->ol_flags = RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_IPV4;
        ctx.gso_types = RTE_ETH_TX_OFFLOAD_TCP_TSO;
    }
    // The tenant's own segment size where it is smaller than the path allows.
    const uint32_t wanted = (tunnelled ? outer_bytes : 0) + inner_headers + m->tso_segsz;
    ctx.gso_size = static_cast<uint16_t>(std::min<uint32_t>(max_frame, wanted));
    const int n = rte_gso_segment(m, &ctx, out, max_out);
    if (n < 0) {
        rte_pktmbuf_free(m);
        return -1;
    }
    if (n == 0) {  // it fits in one frame after all
        finish_segment(m, tunnelled);
        out[0] = m;
        return 1;
    }
    rte_pktmbuf_free(m);  // the frames hold references to its payload
    for (int i = 0; i < n; ++i) {
        finish_segment(out[i], tunnelled);
    }
    return n;
}

bool mark_vxlan_superframe(rte_mbuf* m) {
    if (rte_pktmbuf_pkt_len(m) - sizeof(rte_ether_hdr) > UINT16_MAX) {
        return false;
    }
    m->outer_l2_len = sizeof(rte_ether_hdr);
    m->outer_l3_len = sizeof(rte_ipv4_hdr);
    m->l2_len = vxlan_headers + sizeof(rte_ether_hdr);
    const uint64_t inner_ip = is_ipv6_superframe(m) ? RTE_MBUF_F_TX_IPV6 : RTE_MBUF_F_TX_IPV4;
    m->ol_flags = RTE_MBUF_F_TX_TCP_SEG | inner_ip | RTE_MBUF_F_TX_TCP_CKSUM |
                  RTE_MBUF_F_TX_OUTER_IPV4 | RTE_MBUF_F_TX_TUNNEL_VXLAN;
    return true;
}

void prepare_for_gro(rte_mbuf* m) {
    m->packet_type = 0;
    if ((m->ol_flags & RTE_MBUF_F_RX_LRO) != 0) {
        return;
    }
    m->tso_segsz = 0;
    const uint32_t len = rte_pktmbuf_data_len(m);
    constexpr uint32_t min_len =
        outer_bytes + sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr) + sizeof(rte_tcp_hdr);
    if (len < min_len) {
        return;
    }
    const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(eth + 1);
    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(ip + 1);
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) ||
        ip->version_ihl != RTE_IPV4_VHL_DEF || ip->next_proto_id != IPPROTO_UDP ||
        udp->dst_port != rte_cpu_to_be_16(vxlan_udp_port) ||
        rte_be_to_cpu_16(ip->total_length) != rte_pktmbuf_pkt_len(m) - sizeof(rte_ether_hdr)) {
        return;
    }
    const auto* inner_eth = reinterpret_cast<const rte_ether_hdr*>(frame + outer_bytes);
    const auto* inner_ip = reinterpret_cast<const rte_ipv4_hdr*>(inner_eth + 1);
    if (inner_eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) ||
        (inner_ip->version_ihl >> 4) != 4 || inner_ip->next_proto_id != IPPROTO_TCP) {
        return;
    }
    const uint32_t l3 = rte_ipv4_hdr_len(inner_ip);
    if (l3 < sizeof(rte_ipv4_hdr) || outer_bytes + sizeof(rte_ether_hdr) + l3 + 20 > len) {
        return;
    }
    const uint32_t l4 = tcp_header_len(inner_ip);
    // Exact lengths only: padding or a lying header must not be merged into a stream.
    if (l4 < sizeof(rte_tcp_hdr) || outer_bytes + sizeof(rte_ether_hdr) + l3 + l4 > len ||
        rte_be_to_cpu_16(inner_ip->total_length) !=
            rte_pktmbuf_pkt_len(m) - outer_bytes - sizeof(rte_ether_hdr)) {
        return;
    }
    // What rte_gro would hand back unmerged (merge_burst keeps such frames in place): a
    // segment with any flag but ACK (PSH ends each tenant super-frame) or without payload.
    const auto* tcp =
        reinterpret_cast<const rte_tcp_hdr*>(frame + outer_bytes + sizeof(rte_ether_hdr) + l3);
    if (tcp->tcp_flags != RTE_TCP_ACK_FLAG ||
        rte_pktmbuf_pkt_len(m) == outer_bytes + sizeof(rte_ether_hdr) + l3 + l4) {
        return;
    }
    m->packet_type = RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_UDP |
                     RTE_PTYPE_TUNNEL_VXLAN | RTE_PTYPE_INNER_L2_ETHER | RTE_PTYPE_INNER_L3_IPV4 |
                     RTE_PTYPE_INNER_L4_TCP;
    m->outer_l2_len = sizeof(rte_ether_hdr);
    m->outer_l3_len = sizeof(rte_ipv4_hdr);
    m->l2_len = vxlan_headers + sizeof(rte_ether_hdr);
    m->l3_len = l3;
    m->l4_len = l4;
}

uint16_t merge_burst(rte_mbuf** pkts, uint16_t count) {
    // TCPv6 first, which rte_gro does not merge: its merged runs arrive marked as merged
    // (RTE_MBUF_F_RX_LRO) and rte_gro passes them by in place like a tap's super-frames.
    count = merge_tcp6_runs(pkts, count);
    for (uint16_t i = 0; i < count; ++i) {
        prepare_for_gro(pkts[i]);
    }
    // Light-weight mode: tables on the stack for one call only, nothing held across bursts
    // (a frame is never delayed to wait for its successor).
    rte_gro_param param{};
    param.gro_types = RTE_GRO_IPV4_VXLAN_TCP_IPV4;
    param.max_flow_num = max_merged;
    param.max_item_per_flow = max_merged;
    // rte_gro returns what it merged first and what it passed by after all of that: a
    // stream's PSH segment or a tap's ready-made super-frame would land behind later frames
    // of its flow, and the tenant's TCP takes that for loss (fast retransmit, smaller
    // window). So each call ends at a frame it passes by: that frame stays last, in place.
    uint16_t out = 0;
    uint16_t start = 0;
    for (uint16_t i = 0; i < count; ++i) {
        const bool passed_by = pkts[i]->packet_type == 0;
        if (!passed_by && i + 1 < count) {
            continue;
        }
        const auto run = static_cast<uint16_t>(i + 1 - start);
        uint16_t left = run;
        if (run - (passed_by ? 1 : 0) >= 2) {
            left = rte_gro_reassemble_burst(pkts + start, run, &param);
            for (uint16_t j = 0; j < left; ++j) {
                finish_gro(pkts[start + j]);
            }
        }
        if (out != start) {
            std::copy(pkts + start, pkts + start + left, pkts + out);  // out < start
        }
        out = static_cast<uint16_t>(out + left);
        start = static_cast<uint16_t>(i + 1);
    }
    return out;
}

void finish_gro(rte_mbuf* m) {
    if (m->nb_segs == 1 || (m->packet_type & RTE_PTYPE_TUNNEL_MASK) != RTE_PTYPE_TUNNEL_VXLAN) {
        return;
    }
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    auto* outer_ip = reinterpret_cast<rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
    auto* udp = reinterpret_cast<rte_udp_hdr*>(outer_ip + 1);
    set_ipv4_length(outer_ip, len - sizeof(rte_ether_hdr));
    udp->dgram_len =
        rte_cpu_to_be_16(static_cast<uint16_t>(len - sizeof(rte_ether_hdr) - sizeof(rte_ipv4_hdr)));
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(frame + outer_bytes + sizeof(rte_ether_hdr));
    set_ipv4_length(ip, len - outer_bytes - sizeof(rte_ether_hdr));
    // The segment size: the largest payload of the merged frames (all but the last are full).
    uint32_t mss = m->data_len - (outer_bytes + sizeof(rte_ether_hdr) + m->l3_len + m->l4_len);
    for (const rte_mbuf* s = m->next; s != nullptr; s = s->next) {
        mss = std::max<uint32_t>(mss, s->data_len);
    }
    m->tso_segsz = static_cast<uint16_t>(mss);
}

}  // namespace jakiro::overlay
