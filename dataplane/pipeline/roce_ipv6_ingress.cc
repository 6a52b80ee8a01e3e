#include "dataplane/pipeline/roce_ipv6_ingress.hh"

#include <netinet/in.h>

#include "dataplane/shaping/ingress_metering.hh"
#include "dataplane/worker/clock.hh"
#include "rnic/engine.hh"
#include "rnic/wire/headers.hh"

namespace jakiro {

namespace {

constexpr uint32_t ipv6_header_bytes = 40;
constexpr uint32_t udp_header_bytes = 8;

// RFC 6040 on the inner traffic class: false when the packet must be dropped.
bool decapsulate_ecn6(worker_context& ctx, uint8_t* ip6, uint8_t outer_tos) {
    const auto traffic_class = static_cast<uint8_t>((ip6[0] << 4) | (ip6[1] >> 4));
    const int ecn = overlay::decapsulated_ecn(outer_tos, traffic_class);
    if (ecn < 0) {
        return false;
    }
    if (ecn != (traffic_class & 0x03)) {
        ip6[1] = static_cast<uint8_t>((ip6[1] & ~0x30) | (ecn << 4));
        ctx.counters.ce_marked_on_decap.add(1);
    }
    return true;
}

}  // namespace

bool take_roce_ipv6(worker_context& ctx, const datapath_tables& tables, uint32_t vpc,
                    const overlay::outer_view& outer, rte_mbuf* m) {
    constexpr uint32_t headers = sizeof(rte_ether_hdr) + ipv6_header_bytes + udp_header_bytes;
    if (ctx.engine == nullptr || outer.inner_len < headers ||
        rte_pktmbuf_data_len(m) < outer.inner_offset + headers) {
        return false;
    }
    uint8_t* ip6 = rte_pktmbuf_mtod(m, uint8_t*) + outer.inner_offset + sizeof(rte_ether_hdr);
    const uint8_t* udp = ip6 + ipv6_header_bytes;
    if (ip6[6] != IPPROTO_UDP || ((uint32_t{udp[2]} << 8) | udp[3]) != rnic::roce_udp_port) {
        return false;
    }
    // Contiguous and whole: the engine reads the packet in place.
    const uint32_t ip_len = ipv6_header_bytes + ((uint32_t{ip6[4]} << 8) | ip6[5]);
    if (ip_len > outer.inner_len - sizeof(rte_ether_hdr) || !rte_pktmbuf_is_contiguous(m)) {
        ctx.drop(m, drop_reason::inner_truncated);
        return true;
    }
    const overlay::vlt_entry* dst = tables.vlt->lookup6(vpc, ip6 + 24);
    if (dst == nullptr || dst->kind != overlay::vlt_kind::local_vnic) {
        ctx.drop(m, drop_reason::inner_dst_not_local);
        return true;
    }
    const uint16_t slot = dst->vnic;
    const overlay::vlt_entry* src = tables.vlt->lookup6(vpc, ip6 + 8);
    if (src == nullptr || src->kind != overlay::vlt_kind::remote_host ||
        src->host_ip != outer.outer_src_ip) {
        ctx.drop(m, drop_reason::inner_src_spoofed, slot);
        return true;
    }
    if (!decapsulate_ecn6(ctx, ip6, outer.outer_tos)) {
        ctx.drop(m, drop_reason::inner_ce_on_not_ect, slot);
        return true;
    }
    ctx.counters.decapsulated.add(1);
    receive_rdma(ctx, *ctx.engine, *ctx.rdma_port, slot, ip6, ip_len, now_ns());
    rte_pktmbuf_free(m);
    return true;
}

}  // namespace jakiro
