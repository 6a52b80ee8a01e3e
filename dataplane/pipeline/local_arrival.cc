#include "local_arrival.hh"

#include <rte_cycles.h>
#include <rte_ip.h>

#include "../overlay/superframe.hh"
#include "../port_io.hh"
#include "../worker/clock.hh"
#include "firewall.hh"
#include "ingress_metering.hh"

namespace jakiro {

void process_local_arrivals(worker_context& ctx, const datapath_tables& tables, rte_mbuf** pkts,
                            uint16_t count) {
    firewall_request requests[overlay::vlt::max_bulk];
    rte_mbuf* judged[overlay::vlt::max_bulk];
    for (uint16_t start = 0; start < count; start += overlay::vlt::max_bulk) {
        const uint16_t end = std::min<uint16_t>(count, start + overlay::vlt::max_bulk);
        unsigned n = 0;
        for (uint16_t i = start; i < end; ++i) {
            rte_mbuf* m = pkts[i];
            const uint16_t slot = tables.vnic_of_port[m->port];
            // The receiver went away (or, never expected, moved) while the frame was handed.
            if (slot == no_vnic || tables.vnics[slot].worker != ctx.id) {
                ctx.drop(m, drop_reason::port_removed);
                continue;
            }
            // The sender's worker checked and trimmed the IPv4 packet (pipeline/egress.cc).
            auto* ip = reinterpret_cast<rte_ipv4_hdr*>(rte_pktmbuf_mtod(m, rte_ether_hdr*) + 1);
            requests[n] = {slot, secgroup::direction::ingress, ip,
                           rte_be_to_cpu_16(ip->total_length)};
            judged[n++] = m;
        }
        bool pass[overlay::vlt::max_bulk];
        drop_reason reasons[overlay::vlt::max_bulk];
        firewall_burst(ctx, tables, requests, n, rte_get_tsc_cycles(), pass, reasons);
        const uint64_t now = ctx.policer != nullptr && n > 0 ? now_ns() : 0;
        for (unsigned i = 0; i < n; ++i) {
            rte_mbuf* m = judged[i];
            const uint16_t slot = requests[i].vnic;
            if (!pass[i]) {
                ctx.drop(m, reasons[i], slot);
                continue;
            }
            auto* ip = const_cast<rte_ipv4_hdr*>(requests[i].ip);
            if (!meter_tcp_ingress(ctx, m, ip, slot, now)) {
                continue;
            }
            const vnic_view& peer = tables.vnics[slot];
            auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
            eth->dst_addr = peer.mac;
            eth->src_addr = tables.gateway_mac;
            auto& to_peer = ctx.counters.vnics[slot];
            to_peer.to_tenant_packets.add(1);
            to_peer.to_tenant_bytes.add(rte_pktmbuf_pkt_len(m));
            ctx.counters.switched_locally.add(1);
            if ((m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) == 0 ||
                port_takes_superframes(peer.port_id)) {
                ctx.tx.enqueue(peer.port_id, m, ctx.counters);
                continue;
            }
            // A peer behind an af_packet or memif port gets MTU-sized frames.
            rte_mbuf* frames[overlay::max_segments];
            const int cut = overlay::segment_superframe(
                m, false, static_cast<uint16_t>(tables.tenant_mtu + sizeof(rte_ether_hdr)),
                ctx.pool, frames, overlay::max_segments);
            if (cut < 0) {
                ctx.counters.drops[static_cast<std::size_t>(drop_reason::segmentation_no_mbufs)]
                    .add(1);
                continue;
            }
            for (int f = 0; f < cut; ++f) {
                ctx.tx.enqueue(peer.port_id, frames[f], ctx.counters);
            }
        }
    }
}

}  // namespace jakiro
