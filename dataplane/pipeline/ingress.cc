#include "dataplane/pipeline/ingress.hh"

#include <rte_ip.h>
#include <rte_tcp.h>

#include <algorithm>

#include "dataplane/arp.hh"
#include "dataplane/neighbor_discovery.hh"
#include "dataplane/overlay/ipv6_packet.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/vnic_mark.hh"
#include "dataplane/overlay/vxlan.hh"
#include "dataplane/pipeline/cut_to_tenant_mtu.hh"
#include "dataplane/pipeline/firewall.hh"
#include "dataplane/pipeline/ipv4_check.hh"
#include "dataplane/pipeline/roce_guard.hh"
#include "dataplane/pipeline/roce_ipv6_ingress.hh"
#include "dataplane/port_io.hh"
#include "dataplane/shaping/ingress_metering.hh"
#include "dataplane/shaping/ingress_policer.hh"
#include "dataplane/vnet_face/vnet_header.hh"
#include "dataplane/worker/clock.hh"
#include "rnic/engine.hh"

#include <rte_cycles.h>

namespace jakiro {

namespace {

// ARP on the fabric: answer for our underlay address, and learn the MAC of any remote host we
// tunnel to from both its requests and its replies.
void handle_underlay_arp(worker_context& ctx, const datapath_tables& tables, rte_mbuf* m) {
    auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
    const auto arp = parse_arp(frame, rte_pktmbuf_data_len(m));
    if (!arp) {
        ctx.drop(m, drop_reason::underlay_malformed_arp);
        return;
    }
    ctx.neighbors->learn(arp->sender_ip, arp->sender_mac);
    if (arp->opcode == RTE_ARP_OP_REQUEST && arp->target_ip == tables.underlay_ip) {
        make_arp_reply(frame, tables.underlay_mac, tables.underlay_ip);
        ctx.counters.arp_replies_on_underlay.add(1);
        ctx.tx.enqueue(tables.uplink_port, m, ctx.counters);
        return;
    }
    rte_pktmbuf_free(m);  // other hosts' ARP on a shared fabric is normal, not a drop
}

// A foreign VTEP (e.g. a Linux vxlan device) floods ARP into the tunnel. Answer for our local
// vNICs inside the tunnel, back to the VTEP that asked, with the gateway MAC, within the sending
// host's allowance of replies.
void answer_overlay_arp(worker_context& ctx, const datapath_tables& tables, uint32_t vpc,
                        const overlay::outer_view& outer, rte_mbuf* m) {
    auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
    uint8_t* inner = frame + outer.inner_offset;
    const auto arp = parse_arp(inner, outer.inner_len);
    const overlay::vlt_entry* target = arp ? tables.vlt->lookup(vpc, arp->target_ip) : nullptr;
    const overlay::vlt_entry* sender = arp ? tables.vlt->lookup(vpc, arp->sender_ip) : nullptr;
    if (!arp || arp->opcode != RTE_ARP_OP_REQUEST || target == nullptr ||
        target->kind != overlay::vlt_kind::local_vnic || sender == nullptr ||
        sender->kind != overlay::vlt_kind::remote_host || sender->host_ip != outer.outer_src_ip) {
        ctx.drop(m, drop_reason::inner_dst_not_local);
        return;
    }
    // One reply per request, within the sending host's allowance
    // (worker/overlay_reply_buckets.hh).
    if (!ctx.arp_replies.take(sender->neighbor, now_ns())) {
        ctx.drop(m, drop_reason::inner_arp_rate_limited);
        return;
    }
    make_arp_reply(inner, tables.gateway_mac, arp->target_ip);
    const auto* outer_eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    const overlay::tunnel_endpoints back{tables.underlay_mac, outer_eth->src_addr,
                                         tables.underlay_ip, outer.outer_src_ip};
    // Drop any padding after the inner ARP so the outer lengths describe exactly it.
    rte_pktmbuf_trim(m, rte_pktmbuf_pkt_len(m) - (outer.inner_offset + arp_frame_bytes));
    overlay::write_outer_headers(frame, back, tables.vni_of_vpc[vpc], arp_frame_bytes, 0,
                                 overlay::vxlan_udp_port);
    ctx.counters.arp_replies_in_overlay.add(1);
    overlay::clear_vnic_mark(m);  // jakirod's own, whatever the mbuf carried before
    ctx.tx.enqueue(tables.uplink_port, m, ctx.counters);
}

// The same for IPv6: a foreign VTEP's tenant solicits the VPC's IPv6 addresses inside the tunnel.
// Answered for our local vNICs, back to the VTEP that asked, with the gateway MAC, when the
// solicitation comes from an address that lives on that VTEP (not from a link-local one: it
// could be anyone's). Neighbor Discovery is never delivered to a tenant, so no security group
// judges it (as in a cloud VPC, whose fabric answers it): tenants of either side resolve each
// other whatever ICMPv6 their rules allow. Every other ND message in the tunnel is counted, and
// so is a solicitation beyond its sending host's allowance of replies.
void answer_overlay_nd(worker_context& ctx, const datapath_tables& tables, uint32_t vpc,
                       const overlay::outer_view& outer, rte_mbuf* m) {
    auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
    uint8_t* inner = frame + outer.inner_offset;
    // Read within the first segment only (a chain is no solicitation a VTEP sent).
    const auto ns = rte_pktmbuf_is_contiguous(m)
                        ? parse_neighbor_solicitation(inner, outer.inner_len)
                        : std::nullopt;
    const overlay::vlt_entry* target = ns ? tables.vlt->lookup6(vpc, ns->target.data()) : nullptr;
    const overlay::vlt_entry* sender = ns ? tables.vlt->lookup6(vpc, ns->source.data()) : nullptr;
    const uint32_t answer_len = outer.inner_offset + neighbor_advertisement_bytes;
    if (!ns || target == nullptr || target->kind != overlay::vlt_kind::local_vnic ||
        sender == nullptr || sender->kind != overlay::vlt_kind::remote_host ||
        sender->host_ip != outer.outer_src_ip ||
        rte_pktmbuf_data_len(m) + rte_pktmbuf_tailroom(m) < answer_len) {
        ctx.drop(m, drop_reason::inner_nd_ignored);
        return;
    }
    // One reply per solicitation, within the sending host's allowance
    // (worker/overlay_reply_buckets.hh).
    if (!ctx.nd_replies.take(sender->neighbor, now_ns())) {
        ctx.drop(m, drop_reason::inner_nd_rate_limited);
        return;
    }
    make_neighbor_advertisement(inner, tables.gateway_mac, ns->target);
    m->data_len = static_cast<uint16_t>(answer_len);
    m->pkt_len = answer_len;
    m->ol_flags = 0;
    const auto* outer_eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    const overlay::tunnel_endpoints back{tables.underlay_mac, outer_eth->src_addr,
                                         tables.underlay_ip, outer.outer_src_ip};
    overlay::write_outer_headers(frame, back, tables.vni_of_vpc[vpc],
                                 static_cast<uint16_t>(neighbor_advertisement_bytes), 0,
                                 overlay::vxlan_udp_port);
    ctx.counters.nd_replies_in_overlay.add(1);
    overlay::clear_vnic_mark(m);  // jakirod's own, whatever the mbuf carried before
    ctx.tx.enqueue(tables.uplink_port, m, ctx.counters);
}

// RoCEv2 (UDP to 4791, not a fragment) goes to the RoCE engine instead of the NFT: RC traffic
// is admitted per connection (RCFT) by the engine itself (docs/architecture.md §4).
bool is_roce(const rte_ipv4_hdr* ip, uint32_t ip_len) {
    const uint32_t ihl = rte_ipv4_hdr_len(ip);
    if (ip->next_proto_id != IPPROTO_UDP || ip_len < ihl + sizeof(rte_udp_hdr) ||
        (rte_be_to_cpu_16(ip->fragment_offset) &
         (RTE_IPV4_HDR_OFFSET_MASK | RTE_IPV4_HDR_MF_FLAG))) {
        return false;
    }
    const auto* udp =
        reinterpret_cast<const rte_udp_hdr*>(reinterpret_cast<const uint8_t*>(ip) + ihl);
    return udp->dst_port == rte_cpu_to_be_16(rnic::roce_udp_port);
}

// Inner IPv4 checks; returns the inner IPv4 header or nullptr after dropping.
rte_ipv4_hdr* check_inner_ipv4(worker_context& ctx, const overlay::outer_view& outer, rte_mbuf* m) {
    auto* inner_eth =
        reinterpret_cast<rte_ether_hdr*>(rte_pktmbuf_mtod(m, uint8_t*) + outer.inner_offset);
    if (outer.inner_len < sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr)) {
        ctx.drop(m, drop_reason::inner_truncated);
        return nullptr;
    }
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(inner_eth + 1);
    if (!ipv4_header_sane(ip, outer.inner_len - sizeof(rte_ether_hdr))) {
        ctx.drop(m, drop_reason::inner_bad_ip_header);
        return nullptr;
    }
    return ip;
}

// Inner IPv6 checks, as the sending host's egress made them (pipeline/egress.cc): unicast, not
// link-local, TCP, UDP or ICMPv6 right after the fixed header. Returns the inner IPv6 header or
// nullptr after dropping.
rte_ipv6_hdr* check_inner_ipv6(worker_context& ctx, const overlay::outer_view& outer, rte_mbuf* m) {
    auto* inner_eth =
        reinterpret_cast<rte_ether_hdr*>(rte_pktmbuf_mtod(m, uint8_t*) + outer.inner_offset);
    // A chain is a TCPv6 super-frame (merged, or whole from a tap uplink: RTE_MBUF_F_RX_LRO)
    // whose first segment holds every header up to TCP's (overlay/tcp6_superframe.hh).
    if (outer.inner_len < sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) ||
        (m->nb_segs > 1 &&
         ((m->ol_flags & RTE_MBUF_F_RX_LRO) == 0 ||
          rte_pktmbuf_data_len(m) < outer.inner_offset + sizeof(rte_ether_hdr) +
                                        sizeof(rte_ipv6_hdr) + sizeof(rte_tcp_hdr)))) {
        ctx.drop(m, drop_reason::inner_truncated);
        return nullptr;
    }
    auto* ip = reinterpret_cast<rte_ipv6_hdr*>(inner_eth + 1);
    const uint32_t ip_len = rte_be_to_cpu_16(ip->payload_len) + sizeof(rte_ipv6_hdr);
    if ((rte_be_to_cpu_32(ip->vtc_flow) >> 28) != 6 ||
        ip_len > outer.inner_len - sizeof(rte_ether_hdr) ||
        (m->tso_segsz != 0 && ip->proto != IPPROTO_TCP) ||
        (ip->proto != IPPROTO_TCP && ip->proto != IPPROTO_UDP && ip->proto != IPPROTO_ICMPV6) ||
        ip->dst_addr[0] == 0xff || (ip->dst_addr[0] == 0xfe && (ip->dst_addr[1] & 0xc0) == 0x80) ||
        (ip->src_addr[0] == 0xfe && (ip->src_addr[1] & 0xc0) == 0x80)) {
        ctx.drop(m, drop_reason::inner_bad_ip_header);
        return nullptr;
    }
    return ip;
}

// RFC 6040 decapsulation: the inner header takes the outer CE. False: CE outside on a
// packet that is not ECN-capable inside, which must be dropped.
bool decapsulate_ecn(worker_context& ctx, rte_ipv4_hdr* inner, uint8_t outer_tos) {
    const int ecn = overlay::decapsulated_ecn(outer_tos, inner->type_of_service);
    if (ecn < 0) {
        return false;
    }
    if (ecn != (inner->type_of_service & 0x03)) {
        overlay::set_ipv4_ecn(inner, static_cast<uint8_t>(ecn));
        ctx.counters.ce_marked_on_decap.add(1);
    }
    return true;
}

bool decapsulate_ecn(worker_context& ctx, rte_ipv6_hdr* inner, uint8_t outer_tos) {
    const uint8_t tc = overlay::ipv6_traffic_class(inner);
    const int ecn = overlay::decapsulated_ecn(outer_tos, tc);
    if (ecn < 0) {
        return false;
    }
    if (ecn != (tc & 0x03)) {
        overlay::set_ipv6_ecn(inner, static_cast<uint8_t>(ecn));
        ctx.counters.ce_marked_on_decap.add(1);
    }
    return true;
}

// Frames GRO merged, or a super-frame that came whole, marked as a super-frame for `vnic`:
// one super-frame to a vnet face, MTU-sized frames to the others.
void deliver_superframe(worker_context& ctx, const datapath_tables& tables, const vnic_view& vnic,
                        uint16_t slot, rte_mbuf* m) {
    const uint32_t segment = static_cast<uint32_t>(m->l3_len + m->l4_len) + m->tso_segsz;
    if (segment > tables.tenant_mtu) {
        // Only a super-frame that came whole (a tap uplink's) can say so: merged frames
        // were each no larger than the underlay let them be.
        ctx.drop(m, drop_reason::uplink_bad_superframe, slot);
        return;
    }
    if (port_takes_superframes(vnic.port_id)) {
        ctx.tx.enqueue(vnic.port_id, m, ctx.counters);
        return;
    }
    cut_to_tenant_mtu(ctx, tables, m,
                      [&](rte_mbuf* frame) { ctx.tx.enqueue(vnic.port_id, frame, ctx.counters); });
}

}  // namespace

void process_uplink_burst(worker_context& ctx, const datapath_tables& tables, rte_mbuf** pkts,
                          uint16_t count) {
    // Stage 1: outer checks and VNI for the whole burst; collect inner destination and source
    // keys of what survives. Bursts usually carry one VNI, so the last lookup is cached.
    overlay::vlt_key dst_keys[overlay::vlt::max_bulk];
    overlay::vlt_key src_keys[overlay::vlt::max_bulk];
    overlay::outer_view outers[overlay::vlt::max_bulk];
    rte_ipv4_hdr* inner_ips[overlay::vlt::max_bulk];
    // Inner IPv6 (inner_ips nullptr): looked up at once, IPv6 has no bulk VLT lookup.
    rte_ipv6_hdr* inner_ip6s[overlay::vlt::max_bulk];
    const overlay::vlt_entry* dsts6[overlay::vlt::max_bulk];
    const overlay::vlt_entry* srcs6[overlay::vlt::max_bulk];
    rte_mbuf* tunnelled[overlay::vlt::max_bulk];
    unsigned n = 0;
    unsigned n4 = 0;
    uint32_t cached_vni = UINT32_MAX;
    uint32_t cached_vpc = no_vpc;

    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = pkts[i];
        // A frame merged by GRO is a chain whose first segment holds every header.
        const uint32_t len = rte_pktmbuf_pkt_len(m);
        if (rte_pktmbuf_data_len(m) < sizeof(rte_ether_hdr) ||
            (m->nb_segs > 1 && rte_pktmbuf_data_len(m) < overlay::outer_header_bytes +
                                                             sizeof(rte_ether_hdr) +
                                                             sizeof(rte_ipv4_hdr))) {
            ctx.drop(m, drop_reason::outer_truncated);
            continue;
        }
        const auto* eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
        if (eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP)) {
            handle_underlay_arp(ctx, tables, m);
            continue;
        }
        // The fabric floods unknown unicast to every host: not ours is not an error, but it is
        // counted so a misaddressed underlay is visible.
        if (!rte_is_same_ether_addr(&eth->dst_addr, &tables.underlay_mac)) {
            ctx.drop(m, drop_reason::underlay_not_for_us);
            continue;
        }
        if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) {
            ctx.drop(m, drop_reason::underlay_unsupported_ethertype);
            continue;
        }
        const auto check =
            overlay::check_outer(rte_pktmbuf_mtod(m, const uint8_t*), len, tables.underlay_ip);
        if (!check.ok) {
            ctx.drop(m, check.reason);
            continue;
        }
        if (check.view.vni != cached_vni) {
            cached_vni = check.view.vni;
            cached_vpc = tables.vpcs->find(cached_vni);
        }
        if (cached_vpc == no_vpc) {
            ctx.drop(m, drop_reason::vxlan_unknown_vni);
            continue;
        }
        const auto* inner_eth = reinterpret_cast<const rte_ether_hdr*>(
            rte_pktmbuf_mtod(m, const uint8_t*) + check.view.inner_offset);
        if (inner_eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP)) {
            answer_overlay_arp(ctx, tables, cached_vpc, check.view, m);
            continue;
        }
        if (inner_eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6) &&
            is_neighbor_discovery(
                reinterpret_cast<const uint8_t*>(inner_eth),
                std::min<uint32_t>(check.view.inner_len,
                                   rte_pktmbuf_data_len(m) - check.view.inner_offset))) {
            answer_overlay_nd(ctx, tables, cached_vpc, check.view, m);
            continue;
        }
        // RoCE v2 over IPv6 goes to the engine on its own road (pipeline/roce_ipv6_ingress.hh).
        if (inner_eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6) &&
            take_roce_ipv6(ctx, tables, cached_vpc, check.view, m)) {
            continue;
        }
        if (inner_eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6)) {
            rte_ipv6_hdr* ip6 = check_inner_ipv6(ctx, check.view, m);
            if (ip6 == nullptr) {
                continue;
            }
            dsts6[n] = tables.vlt->lookup6(cached_vpc, ip6->dst_addr);
            srcs6[n] = tables.vlt->lookup6(cached_vpc, ip6->src_addr);
            outers[n] = check.view;
            inner_ips[n] = nullptr;
            inner_ip6s[n] = ip6;
            tunnelled[n++] = m;
            continue;
        }
        if (inner_eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) {
            ctx.drop(m, drop_reason::inner_unsupported_ethertype);
            continue;
        }
        rte_ipv4_hdr* ip = check_inner_ipv4(ctx, check.view, m);
        if (ip == nullptr) {
            continue;
        }
        dst_keys[n4] = {cached_vpc, ip->dst_addr};
        src_keys[n4++] = {cached_vpc, ip->src_addr};
        outers[n] = check.view;
        inner_ips[n] = ip;
        inner_ip6s[n] = nullptr;
        tunnelled[n++] = m;
    }
    if (n == 0) {
        return;
    }

    // Stage 2: bulk VLT lookups for destinations (must be local) and sources (must live on the
    // host that sent the packet, or a host could inject traffic in another host's name).
    const overlay::vlt_entry* dsts[overlay::vlt::max_bulk];
    const overlay::vlt_entry* srcs[overlay::vlt::max_bulk];
    if (n4 == n) {
        tables.vlt->lookup_bulk(dst_keys, n, dsts);
        tables.vlt->lookup_bulk(src_keys, n, srcs);
    } else {
        const overlay::vlt_entry* dsts4[overlay::vlt::max_bulk];
        const overlay::vlt_entry* srcs4[overlay::vlt::max_bulk];
        tables.vlt->lookup_bulk(dst_keys, n4, dsts4);
        tables.vlt->lookup_bulk(src_keys, n4, srcs4);
        for (unsigned i = 0, k = 0; i < n; ++i) {
            const bool v4 = inner_ips[i] != nullptr;
            dsts[i] = v4 ? dsts4[k] : dsts6[i];
            srcs[i] = v4 ? srcs4[k++] : srcs6[i];
        }
    }

    // One clock read per burst for the RoCE engine's timers and the ingress meters.
    const uint64_t now = ctx.engine != nullptr || ctx.policer != nullptr ? now_ns() : 0;

    // Stage 3: the receiving vNIC's security groups (ingress) for what survived.
    firewall_request requests[overlay::vlt::max_bulk];
    unsigned checked[overlay::vlt::max_bulk];
    unsigned checked_count = 0;
    for (unsigned i = 0; i < n; ++i) {
        rte_mbuf* m = tunnelled[i];
        if (dsts[i] == nullptr || dsts[i]->kind != overlay::vlt_kind::local_vnic) {
            ctx.drop(m, drop_reason::inner_dst_not_local);
            continue;
        }
        const uint16_t slot = dsts[i]->vnic;
        if (srcs[i] == nullptr || srcs[i]->kind != overlay::vlt_kind::remote_host ||
            srcs[i]->host_ip != outers[i].outer_src_ip) {
            ctx.drop(m, drop_reason::inner_src_spoofed, slot);
            continue;
        }
        if (inner_ip6s[i] != nullptr) {
            const uint32_t ip6_len =
                rte_be_to_cpu_16(inner_ip6s[i]->payload_len) + uint32_t{sizeof(rte_ipv6_hdr)};
            if (overlay::ipv6_udp_touches_roce_port(inner_ip6s[i], ip6_len)) {
                ctx.drop(m, drop_reason::tenant_roce, slot);
                continue;
            }
            requests[checked_count] = {slot, secgroup::direction::ingress, nullptr, ip6_len,
                                       inner_ip6s[i]};
            checked[checked_count++] = i;
            continue;
        }
        const uint32_t ip_len = rte_be_to_cpu_16(inner_ips[i]->total_length);
        if (ctx.engine != nullptr && is_roce(inner_ips[i], ip_len)) {
            // RFC 6040 first: a CE the fabric put on the outer header is the congestion
            // signal DCQCN acts on, so the engine must see it on the inner one.
            if (!decapsulate_ecn(ctx, inner_ips[i], outers[i].outer_tos)) {
                ctx.drop(m, drop_reason::inner_ce_on_not_ect, slot);
                continue;
            }
            ctx.counters.decapsulated.add(1);
            receive_rdma(ctx, *ctx.engine, *ctx.rdma_port, slot,
                         reinterpret_cast<const uint8_t*>(inner_ips[i]), ip_len, now);
            rte_pktmbuf_free(m);
            continue;
        }
        // UDP 4791 that the engine did not take (from port 4791, a first fragment, no engine)
        // never reaches a tenant's Ethernet face: RoCE is the RDMA face's alone.
        if (udp_touches_roce_port(inner_ips[i], ip_len)) {
            ctx.drop(m, drop_reason::tenant_roce, slot);
            continue;
        }
        requests[checked_count] = {slot, secgroup::direction::ingress, inner_ips[i], ip_len};
        checked[checked_count++] = i;
    }
    bool pass[overlay::vlt::max_bulk];
    drop_reason reasons[overlay::vlt::max_bulk];
    firewall_burst(ctx, tables, requests, checked_count, rte_get_tsc_cycles(), pass, reasons);

    // Stage 4: decapsulate, meter and deliver.
    for (unsigned c = 0; c < checked_count; ++c) {
        const unsigned i = checked[c];
        rte_mbuf* m = tunnelled[i];
        const uint16_t slot = requests[c].vnic;
        if (!pass[c]) {
            ctx.drop(m, reasons[c], slot);
            continue;
        }
        if (inner_ip6s[i] != nullptr) {
            rte_ipv6_hdr* ip6 = inner_ip6s[i];
            if (!decapsulate_ecn(ctx, ip6, outers[i].outer_tos)) {
                ctx.drop(m, drop_reason::inner_ce_on_not_ect, slot);
                continue;
            }
            if (!meter_tcp_ingress(ctx, m, ip6, slot, now)) {
                continue;
            }
            rte_pktmbuf_adj(m, static_cast<uint16_t>(outers[i].inner_offset));
            const uint32_t frame6_len = sizeof(rte_ether_hdr) + requests[c].ip_len;
            rte_pktmbuf_trim(m, static_cast<uint16_t>(rte_pktmbuf_pkt_len(m) - frame6_len));
            const vnic_view& vnic6 = address_to_tenant(ctx, tables, slot, m, frame6_len);
            ctx.counters.decapsulated.add(1);
            if (m->tso_segsz == 0) {
                ctx.tx.enqueue(vnic6.port_id, m, ctx.counters);
                continue;
            }
            vnet_face::mark_tcp6_superframe(m, m->tso_segsz);
            deliver_superframe(ctx, tables, vnic6, slot, m);
            continue;
        }
        rte_ipv4_hdr* ip = inner_ips[i];
        if (!decapsulate_ecn(ctx, ip, outers[i].outer_tos)) {
            ctx.drop(m, drop_reason::inner_ce_on_not_ect, slot);
            continue;
        }
        if (!meter_tcp_ingress(ctx, m, ip, slot, now)) {
            continue;
        }
        // Strip the tunnel and anything after the inner IPv4 packet (outer padding).
        rte_pktmbuf_adj(m, static_cast<uint16_t>(outers[i].inner_offset));
        const uint32_t frame_len = sizeof(rte_ether_hdr) + rte_be_to_cpu_16(ip->total_length);
        rte_pktmbuf_trim(m, static_cast<uint16_t>(rte_pktmbuf_pkt_len(m) - frame_len));
        const vnic_view& vnic = address_to_tenant(ctx, tables, slot, m, frame_len);
        ctx.counters.decapsulated.add(1);
        if (m->tso_segsz == 0) {
            ctx.tx.enqueue(vnic.port_id, m, ctx.counters);
            continue;
        }
        vnet_face::mark_tcp_superframe(m, m->tso_segsz);
        deliver_superframe(ctx, tables, vnic, slot, m);
    }
}

}  // namespace jakiro
