#include "dataplane/pipeline/local_arrival.hh"

#include <rte_cycles.h>
#include <rte_ip.h>

#include "dataplane/pipeline/firewall.hh"
#include "dataplane/pipeline/local_delivery.hh"
#include "dataplane/worker/clock.hh"

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
            // The sender's worker checked and trimmed the IP packet (pipeline/egress.cc).
            const auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
            if (eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6)) {
                auto* ip6 = reinterpret_cast<const rte_ipv6_hdr*>(eth + 1);
                requests[n] = {slot, secgroup::direction::ingress, nullptr,
                               rte_be_to_cpu_16(ip6->payload_len) + uint32_t{sizeof(*ip6)}, ip6};
            } else {
                auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(eth + 1);
                requests[n] = {slot, secgroup::direction::ingress, ip,
                               rte_be_to_cpu_16(ip->total_length)};
            }
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
            auto send = [&](uint16_t port, rte_mbuf* frame, uint32_t /*charged*/) {
                ctx.tx.enqueue(port, frame, ctx.counters);
            };
            if (requests[i].ip6 != nullptr) {
                deliver_to_local_vnic(ctx, tables, slot, m,
                                      const_cast<rte_ipv6_hdr*>(requests[i].ip6), now, send);
            } else {
                deliver_to_local_vnic(ctx, tables, slot, m,
                                      const_cast<rte_ipv4_hdr*>(requests[i].ip), now, send);
            }
        }
    }
}

}  // namespace jakiro
