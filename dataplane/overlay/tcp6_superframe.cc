#include "dataplane/overlay/tcp6_superframe.hh"

#include <rte_ether.h>
#include <rte_tcp.h>
#include <rte_udp.h>
#include <rte_vxlan.h>

#include <algorithm>
#include <cstring>

#include "dataplane/internet_checksum.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/vxlan.hh"

namespace jakiro::overlay {

namespace {

constexpr uint32_t eth_bytes = sizeof(rte_ether_hdr);
constexpr uint32_t inner_ip_offset = outer_header_bytes + eth_bytes;     // 64
constexpr uint32_t tcp_offset = inner_ip_offset + sizeof(rte_ipv6_hdr);  // 104
constexpr uint8_t cut_last_only = RTE_TCP_FIN_FLAG | RTE_TCP_PSH_FLAG;   // end a stream
constexpr uint8_t cut_first_only = RTE_TCP_CWR_FLAG;                     // RFC 3168 §6.1.2

void set_ipv4_length(rte_ipv4_hdr* ip, uint32_t total) {
    ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(total));
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
}

// The outer IPv4 and UDP lengths of a VXLAN frame of `len` bytes; UDP checksum 0 (RFC 7348).
void set_outer_lengths(uint8_t* frame, uint32_t len) {
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(frame + eth_bytes);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    udp->dgram_len = rte_cpu_to_be_16(static_cast<uint16_t>(len - eth_bytes - sizeof(*ip)));
    udp->dgram_cksum = 0;
    set_ipv4_length(ip, len - eth_bytes);
}

// TCP's checksum over the IPv6 pseudo-header (addresses, upper-layer length, next header:
// RFC 8200 §8.1) and the segment at `tcp`, whose checksum field is zero.
uint16_t tcp6_checksum(const rte_ipv6_hdr* ip, const void* tcp, uint32_t l4_len) {
    const uint64_t sum = rte_ipv6_phdr_cksum(ip, 0) + ones_sum(tcp, l4_len);
    return static_cast<uint16_t>(~fold_sum(sum));
}

}  // namespace

int segment_tcp6_superframe(rte_mbuf* m, bool tunnelled, uint16_t max_frame, rte_mempool* pool,
                            rte_mbuf** out, uint16_t max_out) {
    const uint32_t ip_offset = (tunnelled ? outer_header_bytes : 0) + eth_bytes;
    const uint32_t headers = ip_offset + sizeof(rte_ipv6_hdr) + m->l4_len;
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    const auto fail = [&] {
        rte_pktmbuf_free(m);
        return -1;
    };
    if (m->l4_len < sizeof(rte_tcp_hdr) || rte_pktmbuf_data_len(m) < headers || len < headers ||
        max_frame <= headers) {
        return fail();
    }
    // The tenant's own segment size where it is smaller than the path allows.
    uint32_t chunk = max_frame - headers;
    if (m->tso_segsz != 0) {
        chunk = std::min<uint32_t>(chunk, m->tso_segsz);
    }
    const uint32_t payload = len - headers;
    const uint32_t n = std::max<uint32_t>(1, (payload + chunk - 1) / chunk);
    if (n > max_out || rte_pktmbuf_alloc_bulk(pool, out, n) != 0) {
        return fail();
    }
    const uint8_t* head = rte_pktmbuf_mtod(m, const uint8_t*);
    const auto* tcp0 =
        reinterpret_cast<const rte_tcp_hdr*>(head + ip_offset + sizeof(rte_ipv6_hdr));
    const uint32_t seq = rte_be_to_cpu_32(tcp0->sent_seq);
    const uint8_t flags = tcp0->tcp_flags;
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t offset = i * chunk;
        const uint32_t bytes = std::min(chunk, payload - offset);
        auto* f = reinterpret_cast<uint8_t*>(
            rte_pktmbuf_append(out[i], static_cast<uint16_t>(headers + bytes)));
        if (f == nullptr) {  // a pool whose data rooms are smaller than a frame
            rte_pktmbuf_free_bulk(out, n);
            return fail();
        }
        std::memcpy(f, head, headers);
        const void* data = rte_pktmbuf_read(m, headers + offset, bytes, f + headers);
        if (data != f + headers) {
            std::memcpy(f + headers, data, bytes);
        }
        auto* ip = reinterpret_cast<rte_ipv6_hdr*>(f + ip_offset);
        const uint32_t l4_len = m->l4_len + bytes;
        ip->payload_len = rte_cpu_to_be_16(static_cast<uint16_t>(l4_len));
        auto* tcp = reinterpret_cast<rte_tcp_hdr*>(ip + 1);
        tcp->sent_seq = rte_cpu_to_be_32(seq + offset);
        uint8_t f_flags = flags;
        if (i + 1 < n) {
            f_flags &= static_cast<uint8_t>(~cut_last_only);
        }
        if (i > 0) {
            f_flags &= static_cast<uint8_t>(~cut_first_only);
        }
        tcp->tcp_flags = f_flags;
        tcp->cksum = 0;
        tcp->cksum = tcp6_checksum(ip, tcp, l4_len);
        if (tunnelled) {
            set_outer_lengths(f, headers + bytes);
        }
        out[i]->ol_flags = 0;
        out[i]->tso_segsz = 0;
        out[i]->packet_type = 0;
        out[i]->port = m->port;
    }
    rte_pktmbuf_free(m);
    return static_cast<int>(n);
}

namespace {

// The TCP header length of `m` when it is one VXLAN/IPv4 frame (one segment, exact lengths)
// carrying a TCPv6 segment with payload and flags ACK or ACK|PSH; 0 for any other frame.
uint32_t mergeable_tcp_len(const rte_mbuf* m) {
    if (m->nb_segs != 1 || (m->ol_flags & RTE_MBUF_F_RX_LRO) != 0) {
        return 0;
    }
    const uint32_t len = rte_pktmbuf_data_len(m);
    if (len < tcp_offset + sizeof(rte_tcp_hdr)) {
        return 0;
    }
    const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(f);
    const auto* outer = reinterpret_cast<const rte_ipv4_hdr*>(eth + 1);
    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(outer + 1);
    const auto* inner_eth = reinterpret_cast<const rte_ether_hdr*>(f + outer_header_bytes);
    const auto* ip = reinterpret_cast<const rte_ipv6_hdr*>(inner_eth + 1);
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) ||
        outer->version_ihl != RTE_IPV4_VHL_DEF || outer->next_proto_id != IPPROTO_UDP ||
        udp->dst_port != rte_cpu_to_be_16(vxlan_udp_port) ||
        rte_be_to_cpu_16(outer->total_length) != len - eth_bytes ||
        inner_eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6) ||
        (rte_be_to_cpu_32(ip->vtc_flow) >> 28) != 6 || ip->proto != IPPROTO_TCP ||
        rte_be_to_cpu_16(ip->payload_len) != len - tcp_offset) {
        return 0;
    }
    const uint32_t tcp_len = tcp6_header_len(ip);
    const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(ip + 1);
    const uint8_t flags = tcp->tcp_flags;
    if (tcp_len < sizeof(rte_tcp_hdr) || tcp_offset + tcp_len >= len ||
        (flags != RTE_TCP_ACK_FLAG && flags != (RTE_TCP_ACK_FLAG | RTE_TCP_PSH_FLAG))) {
        return 0;
    }
    return tcp_len;
}

// One run being merged: its first frame, the chain's last segment, and what the next segment
// must be.
struct tcp6_run {
    rte_mbuf* head = nullptr;
    rte_mbuf* tail = nullptr;
    uint32_t tcp_len = 0;
    uint32_t mss = 0;       // the first segment's payload: no later one may be longer
    uint32_t next_seq = 0;  // the sequence number the next segment must start at
    uint16_t segments = 0;
};

uint32_t seq_of(const uint8_t* frame) {
    const auto* tcp = reinterpret_cast<const rte_tcp_hdr*>(frame + tcp_offset);
    return rte_be_to_cpu_32(tcp->sent_seq);
}

// Whether the segment in `f` belongs to the run's flow: every header byte the same but the
// lengths, checksums, sequence number and flags. Outer source and TOS too: the ingress checks
// the sending host and takes the outer CE (RFC 6040) once per merged frame.
bool same_flow(const uint8_t* head, const uint8_t* f, uint32_t tcp_len) {
    const auto same = [&](uint32_t from, uint32_t to) {
        return std::memcmp(head + from, f + from, to - from) == 0;
    };
    constexpr uint32_t outer_ip = eth_bytes;
    constexpr uint32_t udp = outer_ip + sizeof(rte_ipv4_hdr);
    return head[outer_ip + 1] == f[outer_ip + 1] &&                 // outer TOS
           same(outer_ip + 12, udp + 4) &&                          // addresses, ports
           same(udp + sizeof(rte_udp_hdr), inner_ip_offset + 4) &&  // VXLAN, inner MACs, TC
           same(inner_ip_offset + 6, tcp_offset + 4) &&             // next header .. ports
           same(tcp_offset + 8, tcp_offset + 13) &&                 // ack, data offset
           same(tcp_offset + 14, tcp_offset + 16) &&                // window
           same(tcp_offset + 18, tcp_offset + tcp_len);             // urgent, options
}

void finish_run(const tcp6_run& run, bool pushed) {
    if (run.segments < 2) {
        return;
    }
    rte_mbuf* m = run.head;
    uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    set_outer_lengths(f, len);
    auto* ip = reinterpret_cast<rte_ipv6_hdr*>(f + inner_ip_offset);
    ip->payload_len = rte_cpu_to_be_16(static_cast<uint16_t>(len - tcp_offset));
    if (pushed) {
        reinterpret_cast<rte_tcp_hdr*>(ip + 1)->tcp_flags |= RTE_TCP_PSH_FLAG;
    }
    m->ol_flags = RTE_MBUF_F_RX_LRO;
    m->tso_segsz = static_cast<uint16_t>(run.mss);
    m->packet_type = 0;
}

}  // namespace

uint16_t merge_tcp6_runs(rte_mbuf** pkts, uint16_t count) {
    uint16_t out = 0;
    tcp6_run run;
    bool open = false;
    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = pkts[i];
        const uint32_t tcp_len = mergeable_tcp_len(m);
        const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
        const uint32_t bytes = tcp_len != 0 ? rte_pktmbuf_data_len(m) - tcp_offset - tcp_len : 0;
        const bool pushed =
            tcp_len != 0 &&
            (reinterpret_cast<const rte_tcp_hdr*>(f + tcp_offset)->tcp_flags & RTE_TCP_PSH_FLAG);
        if (open && tcp_len == run.tcp_len && bytes <= run.mss && seq_of(f) == run.next_seq &&
            // The merged frame's outer IPv4 length must still fit 16 bits.
            rte_pktmbuf_pkt_len(run.head) + bytes - eth_bytes <= UINT16_MAX &&
            same_flow(rte_pktmbuf_mtod(run.head, const uint8_t*), f, tcp_len)) {
            rte_pktmbuf_adj(m, static_cast<uint16_t>(tcp_offset + tcp_len));
            run.tail->next = m;
            run.tail = m;
            run.head->nb_segs++;
            run.head->pkt_len += bytes;
            run.next_seq += bytes;
            ++run.segments;
            // A short or PSH segment ends what the sender cut; max_segments bound a receiver.
            if (pushed || bytes < run.mss || run.segments == max_segments) {
                finish_run(run, pushed);
                open = false;
            }
            continue;
        }
        if (open) {
            finish_run(run, false);
            open = false;
        }
        pkts[out++] = m;
        if (tcp_len != 0 && !pushed) {
            run = {m, m, tcp_len, bytes, seq_of(f) + bytes, 1};
            open = true;
        }
    }
    if (open) {
        finish_run(run, false);
    }
    return out;
}

}  // namespace jakiro::overlay
