#pragma once
// The rdma class's contract, in one place: what a vNIC's RDMA traffic gets from DHTB and how
// RoCE is charged. The pieces that carry it out point here: the egress shaper
// (dataplane/shaping/egress_shaper: admit_rdma), the ingress meter (ingress_meter.hh) as the
// pipeline hands it over (dataplane/shaping/ingress_metering.hh), and the RoCE engine's DCQCN
// (rnic/dcqcn.cc).
//
// What it gets. Every RoCEv2 packet a vNIC's RDMA face sends or receives is the rdma class;
// everything on its Ethernet face is tcp. While both classes are backlogged the rdma class gets
// class_share_bps(q, rdma) (config.hh): the vNIC rate split by weight, at least its min, at most
// its max; what tcp leaves unused it may take (work conservation).
//
// How it is charged. Like every frame, qos::charged_bytes of the inner frame (BTH, extension
// headers and ICRC included) plus the 50 bytes of VXLAN, whether it crosses the fabric, is
// looped back to a vNIC on the same host, or is a message moved memory to memory between two
// QPs of one host (charged as the packets it would have been): the share must not depend on
// where the peer runs.
//
// Why paced and not dropped. A lost RC packet costs a go-back-N retransmission of everything
// after it, so the rdma class is never queued or dropped the way tcp is:
//  - egress: the engine asks for the class's grant before building each packet and waits
//    while it is spent;
//  - ingress: above the share the receiver sends the sending QP a CNP (at most one per QP per
//    cnp interval, rate_control.hh), and the sender's DCQCN cuts its rate; only UD, which has no
//    connection to tell and may lose a datagram anyway, is dropped above its share.
//
// DCQCN's line rate (where a QP starts and what recovery climbs back to) is its vNIC's rate: a
// cut from a rate the vNIC can never reach would bite on nothing. A vNIC that is not shaped has
// no rate; its QPs use a nominal line rate above anything one software worker sends, so DCQCN
// never limits a QP no receiver complains about.

#include <cstdint>

namespace jakiro::qos {

// The nominal line rate of a QP whose vNIC is not shaped: a 25 GbE RNIC port.
constexpr uint64_t unshaped_rdma_line_rate_bps = 25'000'000'000;

// DCQCN's line rate for a QP of a vNIC shaped to `vnic_rate_bps` (0: not shaped).
constexpr uint64_t rdma_line_rate_bps(uint64_t vnic_rate_bps) {
    return vnic_rate_bps != 0 ? vnic_rate_bps : unshaped_rdma_line_rate_bps;
}

}  // namespace jakiro::qos
