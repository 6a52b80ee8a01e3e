#pragma once
// DHTB ingress for the tcp class (everything a tenant receives on its Ethernet face): the
// receiving vNIC's meter decides for a packet from the fabric and for one switched from a vNIC
// on this host alike, so a vNIC's ingress share does not depend on where its peer runs.

#include <rte_ip.h>
#include <rte_mbuf.h>

#include <cstdint>

#include "../overlay/superframe.hh"
#include "../overlay/vxlan.hh"
#include "../worker/ingress_policer.hh"
#include "../worker/worker_context.hh"

namespace jakiro {

// Meters `ip` (the inner IPv4 packet of frame `m`) for vNIC `slot` at `now_ns`. Above the
// vNIC's share an ECN-capable packet is marked CE and delivered; the others are dropped beyond
// a burst (counted as qos_ingress_over_share). False: `m` was dropped.
inline bool meter_tcp_ingress(worker_context& ctx, rte_mbuf* m, rte_ipv4_hdr* ip, uint16_t slot,
                              uint64_t now_ns) {
    if (ctx.policer == nullptr) {
        return true;
    }
    qos::ingress_meter* meter = ctx.policer->meter(slot);
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

}  // namespace jakiro
