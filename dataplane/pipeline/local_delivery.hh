#pragma once
// The last step of a frame between two vNICs of this host, on the receiver's worker, once
// both sides' security groups passed it: egress.cc calls it when this worker owns the
// receiver too, local_arrival.cc when the frame was handed over from the sender's worker.
// The receiver's ingress meter (as if the frame had crossed the fabric), the receiver's MAC
// and counters, then its port: whole, super-frame or not, when the port takes super-frames;
// cut to the tenant MTU for an af_packet or memif port.
//
// `send(port, m, charged)` puts a frame on its way: egress.cc charges it to the sender's
// shaper (`charged`: the bytes it is or would be on the wire), local_arrival.cc transmits it
// (the sender's worker charged it already).

#include <rte_ip.h>
#include <rte_mbuf.h>

#include "dataplane/overlay/superframe.hh"
#include "dataplane/pipeline/cut_to_tenant_mtu.hh"
#include "dataplane/port_io.hh"
#include "dataplane/shaping/ingress_metering.hh"
#include "dataplane/tables.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

inline bool is_superframe(const rte_mbuf* m) {
    return (m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) != 0;
}

// `ip`: the IPv4 or IPv6 packet in `m` (rte_ipv4_hdr or rte_ipv6_hdr); `meter_now`: the
// burst's clock for the meter (0 without one).
template <typename Ip, typename Send>
void deliver_to_local_vnic(worker_context& ctx, const datapath_tables& tables, uint16_t slot,
                           rte_mbuf* m, Ip* ip, uint64_t meter_now, Send&& send) {
    if (!meter_tcp_ingress(ctx, m, ip, slot, meter_now)) {
        return;
    }
    const vnic_view& peer = address_to_tenant(ctx, tables, slot, m, rte_pktmbuf_pkt_len(m));
    ctx.counters.switched_locally.add(1);
    if (!is_superframe(m) || port_takes_superframes(peer.port_id)) {
        // Charged the frames it would be on the wire.
        send(peer.port_id, m, overlay::charged_wire_bytes(ip, m->tso_segsz));
        return;
    }
    cut_to_tenant_mtu(ctx, tables, m, [&](rte_mbuf* frame) {
        send(peer.port_id, frame, qos::charged_bytes(rte_pktmbuf_pkt_len(frame)));
    });
}

}  // namespace jakiro
