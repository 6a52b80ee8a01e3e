// The unreliable transports' own parts of the responder: a UC message abandoned (a loss, no
// receive WQE, a refused request: no ACKs, no NAKs; UC's steps are responder.cc's), and the
// UD responder: a datagram checked against the Q_Key and delivered after its 40-byte GRH area.

#include "rnic/queue_pair.hh"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "rnic/engine.hh"
#include "rnic/packet_port.hh"
#include "rnic/queue_pair_parts.hh"
#include "rnic/timers.hh"
#include "rnic/wire/aeth.hh"
#include "rnic/wire/psn.hh"
#include "verbs_abi/wc_opcode.hh"

namespace jakiro::rnic {

using namespace queue_pair_parts;

void queue_pair::abandon_message() {
    _stats.messages_dropped.add(1);
    if (_in_send) {
        _recv_held = true;  // the next message fills it from the start
        _in_send = false;
    }
    _in_write = false;
    _write_pin.reset();
    _discarding = true;
}

// UD's steps: the Q_Key, a receive WQE (UD has no RNR: without one the datagram is lost), then
// the datagram delivered; a refused datagram is lost alone and counted.
void queue_pair::on_datagram(const roce_packet& p) {
    if (check_qkey(p) != verdict::proceed) {
        _stats.messages_dropped.add(1);
        return;
    }
    recv_op r;
    if (!take_recv(r)) {
        _stats.messages_dropped.add(1);
        return;
    }
    deliver_datagram(p, r);
}

// IB spec 10.2.5: a datagram whose Q_Key is not the QP's is dropped, silently.
queue_pair::verdict queue_pair::check_qkey(const roce_packet& p) const {
    return p.deth != nullptr && p.deth->qkey() == _machine.attr().qkey ? verdict::proceed
                                                                       : verdict::drop;
}

// A buffer too small for the GRH area and the payload completes with IBV_WC_LOC_LEN_ERR.
void queue_pair::deliver_datagram(const roce_packet& p, recv_op& r) {
    const auto payload = static_cast<uint32_t>(p.payload.size());
    proto::cqe c{};
    c.wr_id = r.wr_id;
    c.opcode = IBV_WC_RECV;
    c.qp_num = _s.qpn;
    c.src_qp = p.deth->src_qp();
    c.solicited = p.solicited ? 1 : 0;
    c.byte_len = ud_grh_bytes + payload;
    c.wc_flags = IBV_WC_GRH;
    if (p.immdt != nullptr) {
        c.imm_data = p.immdt->imm_be();
        c.wc_flags |= IBV_WC_WITH_IMM;
    }
    if (r.local_error != IBV_WC_SUCCESS) {
        c.status = r.local_error;
    } else if (c.byte_len > r.length) {
        c.status = IBV_WC_LOC_LEN_ERR;  // the buffer must hold the GRH and the payload
        _stats.messages_dropped.add(1);
    } else {
        // The GRH area as RoCE v2 NICs fill it: the IPv6 header whole (it has the GRH's
        // layout), or 20 bytes of nothing and then the IPv4 header (ibv_init_ah_from_wc reads
        // the sender's address there).
        uint8_t grh[ud_grh_bytes] = {};
        if (p.ip != nullptr && (p.ip[0] >> 4) == 6) {
            std::memcpy(grh, p.ip, ud_grh_bytes);
            c.sl = ud_network_header_roce_v2_ipv6;
        } else if (p.ip != nullptr) {
            std::memcpy(grh + ud_grh_bytes - 20, p.ip, 20);
            c.sl = ud_network_header_roce_v2_ipv4;
        }
        scatter(r.sge_data.data(), r.sge_len.data(), r.sges, 0, grh, ud_grh_bytes);
        scatter(r.sge_data.data(), r.sge_len.data(), r.sges, ud_grh_bytes, p.payload.data(),
                payload);
        c.status = IBV_WC_SUCCESS;
    }
    for (uint8_t i = 0; i < r.sges; ++i) {
        r.pins[i].reset();
    }
    _s.ring->retire_recv(1);
    complete(*_s.recv_cq, c);
}

}  // namespace jakiro::rnic
