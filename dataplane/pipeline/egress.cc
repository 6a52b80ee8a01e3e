#include "dataplane/pipeline/egress.hh"

#include <rte_ip.h>

#include <cstring>

#include "dataplane/arp.hh"
#include "dataplane/neighbor_discovery.hh"
#include "dataplane/overlay/ipv6_packet.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/tcp6_superframe.hh"
#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vnic_mark.hh"
#include "dataplane/overlay/vxlan.hh"
#include "dataplane/pipeline/firewall.hh"
#include "dataplane/pipeline/ipv4_check.hh"
#include "dataplane/pipeline/local_delivery.hh"
#include "dataplane/pipeline/roce_guard.hh"
#include "dataplane/pipeline/to_remote_host.hh"
#include "dataplane/port_io.hh"
#include "dataplane/shaping/egress_shaper.hh"
#include "dataplane/worker/clock.hh"

#include <rte_cycles.h>

namespace jakiro {

namespace {

// Answers "who has X" from a tenant when X is an address of its VPC: every such address is
// reached through jakirod, so the answer is always the gateway MAC.
void answer_tenant_arp(worker_context& ctx, const datapath_tables& tables, const vnic_view& vnic,
                       rte_mbuf* m) {
    auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
    const auto arp = parse_arp(frame, rte_pktmbuf_data_len(m));
    if (!arp || arp->opcode != RTE_ARP_OP_REQUEST || arp->sender_ip != vnic.ip ||
        arp->target_ip == vnic.ip || tables.vlt->lookup(vnic.vpc, arp->target_ip) == nullptr) {
        ctx.drop(m, drop_reason::tenant_arp_ignored, vnic.slot);
        return;
    }
    make_arp_reply(frame, tables.gateway_mac, arp->target_ip);
    ctx.counters.arp_replies_to_tenants.add(1);
    ctx.tx.enqueue(vnic.port_id, m, ctx.counters);
}

// Neighbor Discovery from a tenant. A solicitation for another address of its VPC, from the
// vNIC's MAC and from its own IPv6 address or a link-local one, is answered with the gateway
// MAC (as ARP is). A link-local source is accepted whatever its interface identifier (EUI-64 or
// stable-privacy, RFC 7217): it never carries data (check_tenant_ipv6), and the MAC is checked.
// Everything else of ND is the tenant speaking as a router (RS, RA, redirects), advertising
// (NA), probing for duplicates (from ::) or asking for an address that is not its VPC's: no one
// on the other side of jakirod needs to hear it, so it is counted and dropped.
void answer_tenant_nd(worker_context& ctx, const datapath_tables& tables, const vnic_view& vnic,
                      rte_mbuf* m) {
    auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(frame);
    const auto ns = parse_neighbor_solicitation(frame, rte_pktmbuf_data_len(m));
    if (ns && vnic.has_ip6 &&
        (!rte_is_same_ether_addr(&eth->src_addr, &vnic.mac) ||
         (ns->source != vnic.ip6 && !is_link_local(ns->source.data()) &&
          ns->source != ipv6_bytes{}))) {
        ctx.drop(m, drop_reason::tenant_src_spoofed, vnic.slot);
        return;
    }
    // The advertisement is longer than a solicitation without options: it needs the room.
    if (!ns || !vnic.has_ip6 || ns->source == ipv6_bytes{} || ns->target == vnic.ip6 ||
        tables.vlt->lookup6(vnic.vpc, ns->target.data()) == nullptr ||
        !rte_pktmbuf_is_contiguous(m) ||
        rte_pktmbuf_data_len(m) + rte_pktmbuf_tailroom(m) < neighbor_advertisement_bytes) {
        ctx.drop(m, drop_reason::tenant_nd_ignored, vnic.slot);
        return;
    }
    const uint32_t len = make_neighbor_advertisement(frame, tables.gateway_mac, ns->target);
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = len;
    m->ol_flags = 0;
    ctx.counters.nd_replies_to_tenants.add(1);
    ctx.tx.enqueue(vnic.port_id, m, ctx.counters);
}

// An IPv6 frame from a tenant that is not Neighbor Discovery: each is counted under the first
// check it fails. Returns the IPv6 header of a frame to forward, or nullptr after dropping it.
rte_ipv6_hdr* check_tenant_ipv6(worker_context& ctx, const datapath_tables& tables,
                                const vnic_view& vnic, rte_mbuf* m) {
    const uint32_t len = rte_pktmbuf_data_len(m);
    if (len < sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr)) {
        ctx.drop(m, drop_reason::tenant_truncated, vnic.slot);
        return nullptr;
    }
    auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
    auto* ip = reinterpret_cast<rte_ipv6_hdr*>(eth + 1);
    const uint32_t ip_len = rte_be_to_cpu_16(ip->payload_len) + sizeof(rte_ipv6_hdr);
    if ((rte_be_to_cpu_32(ip->vtc_flow) >> 28) != 6 ||
        (ip_len > len - sizeof(rte_ether_hdr) && (m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) == 0)) {
        ctx.drop(m, drop_reason::tenant_bad_ip_header, vnic.slot);
        return nullptr;
    }
    if (ip->dst_addr[0] == 0xff) {  // ff00::/8: MLD reports, router solicitations, any group
        ctx.drop(m, drop_reason::tenant_not_unicast, vnic.slot);
        return nullptr;
    }
    if (is_link_local(ip->src_addr) || is_link_local(ip->dst_addr)) {
        ctx.drop(m, drop_reason::tenant_ipv6_link_local, vnic.slot);
        return nullptr;
    }
    if (!vnic.has_ip6 || std::memcmp(ip->src_addr, vnic.ip6.data(), 16) != 0 ||
        !rte_is_same_ether_addr(&eth->src_addr, &vnic.mac)) {
        ctx.drop(m, drop_reason::tenant_src_spoofed, vnic.slot);
        return nullptr;
    }
    switch (ip->proto) {
        case IPPROTO_TCP:
        case IPPROTO_UDP:
        case IPPROTO_ICMPV6:
            break;
        case IPPROTO_FRAGMENT:
            ctx.drop(m, drop_reason::fragment, vnic.slot);
            return nullptr;
        default:
            // Hop-by-hop, routing and destination options, AH, ESP, mobility, no next header,
            // and any protocol a security group cannot name: nothing to look past safely.
            ctx.drop(m, drop_reason::tenant_ipv6_extension_header, vnic.slot);
            return nullptr;
    }
    if ((m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) != 0) {
        // A TCPv6 super-frame (vnet_face/vnet_header.hh checked it is one): each frame it will
        // be cut into must fit, not the whole.
        if (!overlay::superframe_fits(m, tables.tenant_mtu)) {
            ctx.drop(m, drop_reason::tenant_bad_superframe, vnic.slot);
            return nullptr;
        }
    } else if (ip_len > tables.tenant_mtu) {
        ctx.drop(m, drop_reason::tenant_too_big, vnic.slot);
        return nullptr;
    }
    if (overlay::ipv6_udp_touches_roce_port(ip, ip_len)) {
        ctx.drop(m, drop_reason::tenant_roce, vnic.slot);
        return nullptr;
    }
    // Short frames arrive padded to 60 bytes; the padding must not travel in the tunnel.
    const uint32_t frame_len = sizeof(rte_ether_hdr) + ip_len;
    if (rte_pktmbuf_pkt_len(m) > frame_len) {
        rte_pktmbuf_trim(m, rte_pktmbuf_pkt_len(m) - frame_len);
    }
    return ip;
}

// Checks an IPv4 frame from a tenant. Returns the IPv4 header, or nullptr after dropping it.
rte_ipv4_hdr* check_tenant_ipv4(worker_context& ctx, const datapath_tables& tables,
                                const vnic_view& vnic, rte_mbuf* m) {
    const uint32_t len = rte_pktmbuf_data_len(m);
    auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
    if (len < sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr)) {
        ctx.drop(m, drop_reason::tenant_truncated, vnic.slot);
        return nullptr;
    }
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
    const uint32_t ip_len = rte_be_to_cpu_16(ip->total_length);
    if (!ipv4_header_sane(ip, len - sizeof(rte_ether_hdr))) {
        ctx.drop(m, drop_reason::tenant_bad_ip_header, vnic.slot);
        return nullptr;
    }
    if (ip->src_addr != vnic.ip || !rte_is_same_ether_addr(&eth->src_addr, &vnic.mac)) {
        ctx.drop(m, drop_reason::tenant_src_spoofed, vnic.slot);
        return nullptr;
    }
    if ((m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) != 0) {
        // A super-frame: each frame it will be cut into must fit, not the whole.
        if (!overlay::superframe_fits(m, tables.tenant_mtu)) {
            ctx.drop(m, drop_reason::tenant_bad_superframe, vnic.slot);
            return nullptr;
        }
    } else if (ip_len > tables.tenant_mtu) {
        ctx.drop(m, drop_reason::tenant_too_big, vnic.slot);
        return nullptr;
    }
    // Crafted RoCEv2 on the Ethernet face, to a vNIC on this host or across the fabric.
    if (udp_touches_roce_port(ip, ip_len)) {
        ctx.drop(m, drop_reason::tenant_roce, vnic.slot);
        return nullptr;
    }
    const uint32_t dst = rte_be_to_cpu_32(ip->dst_addr);
    if (dst == UINT32_MAX || (dst >> 28) == 0xe) {  // limited broadcast or 224.0.0.0/4
        ctx.drop(m, drop_reason::tenant_not_unicast, vnic.slot);
        return nullptr;
    }
    // Short frames arrive padded to 60 bytes; the padding must not travel in the tunnel.
    const uint32_t frame_len = sizeof(rte_ether_hdr) + ip_len;
    if (rte_pktmbuf_pkt_len(m) > frame_len) {
        rte_pktmbuf_trim(m, rte_pktmbuf_pkt_len(m) - frame_len);
    }
    return ip;
}

}  // namespace

void process_tenant_burst(worker_context& ctx, const datapath_tables& tables, uint16_t vnic_slot,
                          rte_mbuf** pkts, uint16_t count) {
    const vnic_view& vnic = tables.vnics[vnic_slot];
    auto& from_tenant = ctx.counters.vnics[vnic_slot];

    // Stage 1: parse and check the whole burst, collecting VLT keys for what survives. An
    // IPv6 packet (headers6 set, headers nullptr) is looked up at once: IPv6 has no bulk VLT.
    overlay::vlt_key keys[overlay::vlt::max_bulk];
    rte_mbuf* routed[overlay::vlt::max_bulk];
    rte_ipv4_hdr* headers[overlay::vlt::max_bulk];
    rte_ipv6_hdr* headers6[overlay::vlt::max_bulk];
    const overlay::vlt_entry* found6[overlay::vlt::max_bulk];
    unsigned n = 0;
    unsigned n4 = 0;
    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = pkts[i];
        from_tenant.from_tenant_packets.add(1);
        from_tenant.from_tenant_bytes.add(rte_pktmbuf_pkt_len(m));
        if (rte_pktmbuf_data_len(m) < sizeof(rte_ether_hdr)) {
            ctx.drop(m, drop_reason::tenant_truncated, vnic.slot);
            continue;
        }
        const uint16_t type = rte_pktmbuf_mtod(m, rte_ether_hdr*)->ether_type;
        if (type == rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP)) {
            answer_tenant_arp(ctx, tables, vnic, m);
            continue;
        }
        if (type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6)) {
            if (is_neighbor_discovery(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_data_len(m))) {
                answer_tenant_nd(ctx, tables, vnic, m);
                continue;
            }
            rte_ipv6_hdr* ip6 = check_tenant_ipv6(ctx, tables, vnic, m);
            if (ip6 == nullptr) {
                continue;
            }
            headers[n] = nullptr;
            headers6[n] = ip6;
            found6[n] = tables.vlt->lookup6(vnic.vpc, ip6->dst_addr);
            routed[n++] = m;
            continue;
        }
        if (type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) {
            ctx.drop(m, drop_reason::tenant_unsupported_ethertype, vnic.slot);
            continue;
        }
        rte_ipv4_hdr* ip = check_tenant_ipv4(ctx, tables, vnic, m);
        if (ip == nullptr) {
            continue;
        }
        keys[n4++] = {vnic.vpc, ip->dst_addr};
        headers[n] = ip;
        headers6[n] = nullptr;
        routed[n++] = m;
    }
    if (n == 0) {
        return;
    }

    // Stage 2: one bulk VLT lookup for the burst's IPv4 packets; misses leave.
    const overlay::vlt_entry* found[overlay::vlt::max_bulk];
    if (n4 == n) {
        tables.vlt->lookup_bulk(keys, n, found);
    } else {
        const overlay::vlt_entry* found4[overlay::vlt::max_bulk];
        tables.vlt->lookup_bulk(keys, n4, found4);
        for (unsigned i = 0, k = 0; i < n; ++i) {
            found[i] = headers[i] != nullptr ? found4[k++] : found6[i];
        }
    }
    const overlay::vlt_entry* entries[overlay::vlt::max_bulk];
    firewall_request requests[overlay::vlt::max_bulk];
    unsigned routed_count = 0;
    for (unsigned i = 0; i < n; ++i) {
        if (found[i] == nullptr) {
            ctx.drop(routed[i], drop_reason::vlt_miss, vnic.slot);
            continue;
        }
        routed[routed_count] = routed[i];
        headers[routed_count] = headers[i];
        headers6[routed_count] = headers6[i];
        entries[routed_count] = found[i];
        if (headers[i] != nullptr) {
            requests[routed_count++] = {vnic.slot, secgroup::direction::egress, headers[i],
                                        rte_be_to_cpu_16(headers[i]->total_length)};
        } else {
            requests[routed_count++] = {
                vnic.slot, secgroup::direction::egress, nullptr,
                rte_be_to_cpu_16(headers6[i]->payload_len) + uint32_t{sizeof(rte_ipv6_hdr)},
                headers6[i]};
        }
    }

    // Stage 3: the sender's security groups (egress); for a destination on this host, the
    // receiver's too (ingress), as if the packet had crossed the fabric.
    const uint64_t now = rte_get_tsc_cycles();
    bool pass[overlay::vlt::max_bulk];
    drop_reason reasons[overlay::vlt::max_bulk];
    firewall_burst(ctx, tables, requests, routed_count, now, pass, reasons);
    firewall_request local_requests[overlay::vlt::max_bulk];
    unsigned local_index[overlay::vlt::max_bulk];
    unsigned local_count = 0;
    for (unsigned i = 0; i < routed_count; ++i) {
        // A receiver another worker owns is judged there (pipeline/local_arrival.hh).
        if (pass[i] && entries[i]->kind == overlay::vlt_kind::local_vnic &&
            tables.vnics[entries[i]->vnic].worker == ctx.id) {
            local_requests[local_count] = requests[i];
            local_requests[local_count].vnic = entries[i]->vnic;
            local_requests[local_count].dir = secgroup::direction::ingress;
            local_index[local_count++] = i;
        }
    }
    if (local_count > 0) {
        bool local_pass[overlay::vlt::max_bulk];
        drop_reason local_reasons[overlay::vlt::max_bulk];
        firewall_burst(ctx, tables, local_requests, local_count, now, local_pass, local_reasons);
        for (unsigned l = 0; l < local_count; ++l) {
            if (!local_pass[l]) {
                pass[local_index[l]] = false;
                reasons[local_index[l]] = local_reasons[l];
                ctx.counters.vnics[local_requests[l].vnic].drops.add(1);
            }
        }
    }

    // Stage 4: switch locally or encapsulate; a shaped vNIC's frames wait in its tcp class.
    egress_shaper* shaper =
        ctx.shaper != nullptr && ctx.shaper->shaped(vnic.slot) ? ctx.shaper : nullptr;
    auto transmit = [&](uint16_t port, rte_mbuf* m, uint32_t charged) {
        if (shaper == nullptr) {
            ctx.tx.enqueue(port, m, ctx.counters);
        } else if (!shaper->enqueue_tcp(vnic.slot, port, m, charged)) {
            ctx.drop(m, drop_reason::qos_queue_full, vnic.slot);
        }
    };
    // The receivers' meters on this host need nanoseconds: one clock read per burst.
    const uint64_t meter_now = ctx.policer != nullptr && local_count > 0 ? now_ns() : 0;
    // A frame encapsulated for another host, `frames` wire frames and `charged` bytes in all:
    // a super-frame leaves whole where the uplink cuts it, cut into underlay-MTU VXLAN frames
    // here otherwise.
    auto to_uplink = [&](rte_mbuf* m, uint32_t frames, uint32_t charged) {
        if (!is_superframe(m)) {
            transmit(tables.uplink_port, m, rte_pktmbuf_pkt_len(m));  // outer frame: inner + 50
            return;
        }
        // The uplink's sealing cuts and seals a TCP/IPv4 super-frame in one pass
        // (overlay/sealing/sealed_superframe.hh); a TCP/IPv6 one is cut here and sealed frame
        // by frame.
        const bool sealed_whole = tables.uplink_sealed && !overlay::is_ipv6_superframe(m);
        const bool kernel_cuts =
            !tables.uplink_sealed && uplink_takes_vxlan_superframes(tables.uplink_port);
        if ((sealed_whole || kernel_cuts) && overlay::mark_vxlan_superframe(m)) {
            // Whole: the kernel cuts it where a receiver needs frames (vnet_face/tap_header.hh),
            // or the sealing does.
            ctx.counters.encapsulated.add(frames);
            transmit(tables.uplink_port, m, charged);
            return;
        }
        // Judged once above; now cut into underlay-MTU VXLAN frames, each charged as sent.
        rte_mbuf* cut[overlay::max_segments];
        const uint32_t max_frame =
            tables.tenant_mtu + overlay::outer_header_bytes + sizeof(rte_ether_hdr);
        const int n = overlay::segment_superframe(m, true, static_cast<uint16_t>(max_frame),
                                                  ctx.pool, cut, overlay::max_segments);
        if (n < 0) {
            ctx.counters.drops[static_cast<std::size_t>(drop_reason::segmentation_no_mbufs)].add(1);
            return;
        }
        ctx.counters.encapsulated.add(static_cast<uint64_t>(n));
        if (uplink_takes_udp_gso(tables.uplink_port) && !tables.uplink_sealed) {
            // One skb for the kernel instead of n: the frames leave as UDP GSO datagrams.
            rte_mbuf* datagrams[overlay::max_segments];
            const uint16_t d = overlay::join_vxlan_frames(cut, static_cast<uint16_t>(n), datagrams);
            for (uint16_t g = 0; g < d; ++g) {
                transmit(tables.uplink_port, datagrams[g], overlay::wire_bytes(datagrams[g]));
            }
            return;
        }
        for (int f = 0; f < n; ++f) {
            overlay::mark_vnic(cut[f], vnic.slot);  // each is sealed on its own: the vNIC's work
            transmit(tables.uplink_port, cut[f], rte_pktmbuf_pkt_len(cut[f]));
        }
    };
    for (unsigned i = 0; i < routed_count; ++i) {
        rte_mbuf* m = routed[i];
        const overlay::vlt_entry* entry = entries[i];
        if (!pass[i]) {
            ctx.drop(m, reasons[i], vnic.slot);
            continue;
        }
        if (headers6[i] != nullptr) {
            rte_ipv6_hdr* ip6 = headers6[i];
            if (entry->kind != overlay::vlt_kind::local_vnic) {
                if (encapsulate_to_remote_host(ctx, tables, vnic.slot, *entry, m, ip6,
                                               requests[i].ip_len)) {
                    to_uplink(m, overlay::frames_of(ip6, m->tso_segsz),
                              overlay::charged_wire_bytes(ip6, m->tso_segsz));
                }
            } else if (tables.vnics[entry->vnic].worker != ctx.id) {
                transmit(tables.vnics[entry->vnic].port_id, m,
                         overlay::charged_wire_bytes(ip6, m->tso_segsz));
            } else {
                deliver_to_local_vnic(ctx, tables, entry->vnic, m, ip6, meter_now, transmit);
            }
            continue;
        }
        if (entry->kind == overlay::vlt_kind::local_vnic) {
            if (tables.vnics[entry->vnic].worker != ctx.id) {
                // Sent as it is: the tx batch hands it to the owner (worker/handoff.hh).
                transmit(tables.vnics[entry->vnic].port_id, m,
                         overlay::charged_wire_bytes(headers[i], m->tso_segsz));
            } else {
                // Intra-host shortcut: port to port, no tunnel.
                deliver_to_local_vnic(ctx, tables, entry->vnic, m, headers[i], meter_now, transmit);
            }
            continue;
        }
        if (encapsulate_to_remote_host(ctx, tables, vnic.slot, *entry, m, requests[i].ip,
                                       requests[i].ip_len)) {
            to_uplink(m, overlay::frames_of(headers[i], m->tso_segsz),
                      overlay::charged_wire_bytes(headers[i], m->tso_segsz));
        }
    }
}

}  // namespace jakiro
