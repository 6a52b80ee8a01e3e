#pragma once
// DHTB ingress (docs/architecture.md §6), one contract for both classes: every packet a shaped vNIC
// receives meets that vNIC's meter exactly once, whether it crossed the fabric or came from a
// vNIC on this host (switched port to port by egress.cc, or looped back by the RNIC through
// roce_port), charged the bytes it is or would be on the wire (qos::charged_bytes: the inner
// frame plus the 50 bytes of VXLAN). So a vNIC's ingress share does not depend on where its
// peer runs, and a peer on the same host cannot take more than one across the fabric could.
//
// - tcp, everything for the Ethernet face: meter_tcp_ingress decides here. Above the share an
//   ECN-capable packet is marked CE and delivered; the others are dropped beyond a burst.
// - rdma, RoCEv2 for the RDMA face: the verdict needs the sending QP's CNP pacer, which only
//   the engine holds, so receive_rdma hands the engine the meter with the packet and the engine
//   applies it: an RC/UC QP above its share gets a CNP (paced, never dropped: a drop would cost
//   a go-back-N retransmission), a UD datagram is dropped.
// Messages the RNIC moves memory to memory between two QPs of this host never become packets:
// the engine meters them itself, as the packets they would have been, through
// roce_port::receiving_meter (rnic/local_path.cc, meter_local).
//
// Worker side, one clock read per burst by the caller; no allocation.

#include <rte_ip.h>
#include <rte_mbuf.h>

#include <cstdint>

#include "dataplane/overlay/ipv6_packet.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/vxlan.hh"
#include "dataplane/shaping/ingress_policer.hh"
#include "dataplane/worker/worker_context.hh"
#include "rnic/engine.hh"

namespace jakiro {

// The meter of receiving vNIC `slot`, or nullptr when nothing is metered (no policer, or the
// vNIC is not shaped).
inline qos::ingress_meter* receiving_meter(worker_context& ctx, uint16_t slot) {
    return ctx.policer != nullptr ? ctx.policer->meter(slot) : nullptr;
}

// tcp: meters `ip` (the inner IPv4 packet of frame `m`) for vNIC `slot` at `now_ns` and applies
// the verdict (a drop is counted as qos_ingress_over_share). False: `m` was dropped.
inline bool meter_tcp_ingress(worker_context& ctx, rte_mbuf* m, rte_ipv4_hdr* ip, uint16_t slot,
                              uint64_t now_ns) {
    qos::ingress_meter* meter = receiving_meter(ctx, slot);
    if (meter == nullptr) {
        return true;
    }
    // A super-frame (m->tso_segsz set) is charged every frame it is or was on the wire.
    const auto verdict = meter->on_packet(
        now_ns, qos::traffic_class::tcp, overlay::charged_wire_bytes(ip, m->tso_segsz),
        static_cast<qos::ecn>(ip->type_of_service & 0x03), nullptr);
    if (verdict.action == qos::ingress_action::drop) {
        ctx.drop(m, drop_reason::qos_ingress_over_share, slot);
        return false;
    }
    if (verdict.action == qos::ingress_action::mark_ce) {
        overlay::set_ipv4_ecn(ip, 0x03);
        ctx.counters.qos_ce_marked.add(1);
    }
    return true;
}

// The same for an IPv6 packet `ip`: ECN is in its traffic class. Charged from its own header,
// not from `m`, which still holds the tunnel when it came over the fabric.
inline bool meter_tcp_ingress(worker_context& ctx, rte_mbuf* m, rte_ipv6_hdr* ip, uint16_t slot,
                              uint64_t now_ns) {
    qos::ingress_meter* meter = receiving_meter(ctx, slot);
    if (meter == nullptr) {
        return true;
    }
    const uint32_t wire = overlay::charged_wire_bytes(ip, m->tso_segsz);
    const auto verdict =
        meter->on_packet(now_ns, qos::traffic_class::tcp, wire,
                         static_cast<qos::ecn>(overlay::ipv6_traffic_class(ip) & 0x03), nullptr);
    if (verdict.action == qos::ingress_action::drop) {
        ctx.drop(m, drop_reason::qos_ingress_over_share, slot);
        return false;
    }
    if (verdict.action == qos::ingress_action::mark_ce) {
        overlay::set_ipv6_ecn(ip, 0x03);
        ctx.counters.qos_ce_marked.add(1);
    }
    return true;
}

// rdma: counts RoCEv2 packet `ipv4` (its IPv4 total length `ip_len`) as received by vNIC `slot`
// and hands it to `engine` with the vNIC's meter; the engine's frames in reply go to `port`.
// The caller still owns (and frees) the buffer.
inline void receive_rdma(worker_context& ctx, rnic::engine& engine, rnic::packet_port& port,
                         uint16_t slot, const uint8_t* ipv4, uint32_t ip_len, uint64_t now_ns) {
    auto& to_vnic = ctx.counters.vnics[slot];
    to_vnic.rdma_rx_packets.add(1);
    to_vnic.rdma_rx_bytes.add(sizeof(rte_ether_hdr) + ip_len);
    engine.receive(slot, ipv4, ip_len, port, now_ns, receiving_meter(ctx, slot));
}

}  // namespace jakiro
