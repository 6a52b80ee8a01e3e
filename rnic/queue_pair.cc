// One QP: its lifetime and attributes, the two entry points the engine calls (poll: everything
// the QP sends this visit; receive: every packet for it, handed to its role), completions,
// flush and reset, and the framing every role uses. The roles live beside it, one file each
// as in rxe (rxe_req.c, rxe_comp.c, rxe_resp.c): requester.cc, completer.cc, responder.cc,
// unreliable.cc (UC/UD), local_path.cc (intra-host) and dcqcn.cc.

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

queue_pair::queue_pair(queue_pair_setup setup)
    : _s(std::move(setup)),
      _machine(_s.type, _s.limits),
      _sends(_s.ring->sq_capacity()),
      _rate(dcqcn_defaults(), 0),
      _line_rate_bps(dcqcn_line_rate_bps) {
    _reads.reserve(_s.limits.max_qp_rd_atom + read_job_slack);
    // A fresh ring starts at 0; one a predecessor handed over (a restart) at what it took.
    _send_index = _s.ring->send_taken();
    if (_s.type == IBV_QPT_UD) {
        // A UD QP has no path: its datagrams are at most the port's MTU, and its source
        // port (ECMP entropy) is fixed per QP.
        _mtu = mtu_bytes(_s.limits.max_mtu);
        _udp_src_port = static_cast<uint16_t>(0xC000 | (_s.qpn & 0x3FFF));
    }
}

queue_pair::~queue_pair() = default;

// RoCE v2: the peer's GID is its IP address, and the source GID (the vNIC's address of the
// same family) says which of the two the packets leave from: index 0 is the IPv4-mapped one,
// index 1 the IPv6 one (the device's GID table, rnic/verbs/device_model.cc).
bool queue_pair::reachable(const ibv_ah_attr& ah) const {
    if (!ah.is_global) {
        return false;
    }
    const uint8_t* dgid = ah.grh.dgid.raw;
    if (gid_is_ipv4_mapped(dgid)) {
        return ah.grh.sgid_index == verbs_proto::gid_index_ipv4;
    }
    return ah.grh.sgid_index == verbs_proto::gid_index_ipv6 && !is_unspecified(_s.local.ip6) &&
           gid_is_routable_ipv6(dgid);
}

int queue_pair::modify(const ibv_qp_attr& attr, int mask) {
    if ((mask & IBV_QP_AV) != 0 && !reachable(attr.ah_attr)) {
        return EINVAL;
    }
    const ibv_qp_state before = _machine.state();
    if (const int error = _machine.modify(attr, mask); error != 0) {
        return error;
    }
    const ibv_qp_attr& a = _machine.attr();
    if ((mask & IBV_QP_AV) != 0) {
        const uint8_t* dgid = a.ah_attr.grh.dgid.raw;
        _remote_is_ipv6 = !gid_is_ipv4_mapped(dgid);
        _remote_ip_be = 0;
        _remote_ip6 = {};
        if (_remote_is_ipv6) {
            std::memcpy(_remote_ip6.data(), dgid, 16);
        } else {
            std::memcpy(&_remote_ip_be, dgid + 12, 4);
        }
        _frame_l2_l4 = frame_l2_l4_bytes_for(_remote_is_ipv6);
    }
    if ((mask & (IBV_QP_AV | IBV_QP_ALT_PATH)) != 0) {
        // The control thread admitted the path under the snapshot it read; the engine checks
        // it again under the one it runs with before the QP sends or receives (engine.hh).
        _admitted_generation = unchecked_generation;
    }
    if ((mask & IBV_QP_PATH_MTU) != 0) {
        _mtu = mtu_bytes(a.path_mtu);
    }
    if ((mask & IBV_QP_DEST_QPN) != 0) {
        // Entropy for ECMP on the fabric: stable per connection, in the dynamic range.
        _udp_src_port = static_cast<uint16_t>(0xC000 | ((_s.qpn ^ a.dest_qp_num) & 0x3FFF));
    }
    if ((mask & IBV_QP_RQ_PSN) != 0) {
        _epsn = a.rq_psn & psn_mask;
    }
    if ((mask & IBV_QP_SQ_PSN) != 0) {
        _psn_cursor = _next_psn = _una = _sent_high = a.sq_psn & psn_mask;
    }
    if ((mask & IBV_QP_RETRY_CNT) != 0) {
        _retries_left = a.retry_cnt;
    }
    if ((mask & IBV_QP_RNR_RETRY) != 0) {
        _rnr_retries_left = a.rnr_retry;
    }
    if (_machine.state() == IBV_QPS_RESET && before != IBV_QPS_RESET) {
        reset();
    }
    publish_stats();
    if (_engine != nullptr) {
        _engine->queue_visit(*this);  // a new state may have work: RTS with WRs posted, ERR
    }
    return 0;
}

void queue_pair::query(ibv_qp_attr& attr, ibv_qp_cap& cap, bool& sq_sig_all) const {
    attr = _machine.attr();
    cap.max_send_wr = _s.ring->sq_capacity();
    // A QP on an SRQ has no receive queue of its own (its ring keeps a one-slot placeholder).
    cap.max_recv_wr = _s.srq != nullptr ? 0 : _s.ring->rq_capacity();
    cap.max_send_sge = _s.max_send_sge;
    cap.max_recv_sge = _s.srq != nullptr ? 0 : _s.max_recv_sge;
    cap.max_inline_data = _s.max_inline;
    attr.cap = cap;
    sq_sig_all = _s.sq_sig_all;
}

bool queue_pair::has_work() const {
    const ibv_qp_state st = _machine.state();
    if (_ack_pending || _nak_owed || !_reads.empty() || _clock_restarts) {
        return true;
    }
    if (st == IBV_QPS_ERR) {
        return flush_pending();
    }
    if (awaits_ack_probe() && (st == IBV_QPS_RTS || st == IBV_QPS_SQD)) {
        return true;  // ask_again_for_ack is due within ack_request_gap_ns
    }
    if (st != IBV_QPS_RTS) {
        return false;
    }
    return _s.ring->send_pending().count > 0 || retire_pending() ||
           (_send_index != _s.ring->send_taken() && _rnr_resume_ns == 0 &&
            psn_diff(_next_psn, _una) < static_cast<int32_t>(send_window_packets));
}

bool queue_pair::wants_visits() const {
    const verbs::qp_ring& ring = *_s.ring;
    return has_work() || ring.send_retired() != ring.send_taken() || _local.active ||
           !ring.rings_doorbell();
}

bool queue_pair::waits_for_timer(uint64_t& due_ns) const {
    const verbs::qp_ring& ring = *_s.ring;
    // Only an RC QP in RTS runs its timers at a visit; one that has something else going (a
    // memory-to-memory message, a restored clock, a shim that never rings) is visited as before.
    if (!reliable() || _machine.state() != IBV_QPS_RTS || _local.active || _clock_restarts ||
        !ring.rings_doorbell() || ring.send_retired() == ring.send_taken() || has_work()) {
        return false;
    }
    if (_rnr_resume_ns != 0) {
        due_ns = _rnr_resume_ns;
        return true;
    }
    if (_una == _next_psn) {
        return false;  // WRs taken with no packet out: not a wait for an ACK
    }
    const auto timeout = local_ack_timeout_ns(_machine.attr().timeout);
    due_ns = timeout ? _last_progress_ns + *timeout : UINT64_MAX;
    return true;
}

unsigned queue_pair::poll(packet_port& port, uint64_t now_ns, unsigned& units) {
    const unsigned given = units;
    _stats.visits.add(1);
    const uint64_t wakes_before = _stats.poller_wakes.read();
    const unsigned sent = visit(port, now_ns, units);
    // A futex wake for a program napping on its CQ is a system call: a unit, as a completion is.
    const uint64_t woke = _stats.poller_wakes.read() - wakes_before;
    units -= static_cast<unsigned>(std::min<uint64_t>(units, woke));
    if (given != units) {
        _stats.work_units.add(given - units);
    }
    if (units == 0 && has_work()) {
        _stats.out_of_units.add(1);
    }
    return sent;
}

unsigned queue_pair::visit(packet_port& port, uint64_t now_ns, unsigned& units) {
    if (_clock_restarts) [[unlikely]] {
        restart_clock(now_ns);
    }
    _held_back = false;  // this poll's answer only (a QP in ERR or RESET holds nothing back)
    const ibv_qp_state st = _machine.state();
    if (st == IBV_QPS_ERR) {
        units -= flush(std::min(units, wqe_budget));
        publish_stats();
        return 0;
    }
    if (st == IBV_QPS_RESET || st == IBV_QPS_INIT) {
        return 0;
    }
    unsigned sent = 0;
    auto spend = [&units](unsigned n) { units -= std::min(units, n); };
    if (send_due_ack(port)) {
        // Owed for a packet already received: sent whatever the budget, one per visit (behind
        // the READ responses before it: send_read_responses sends it then).
        ++sent;
        spend(1);
    }
    const unsigned responses = send_read_responses(port, now_ns, units);
    sent += responses;
    spend(responses);
    if (st == IBV_QPS_RTS && _machine.state() == IBV_QPS_RTS) {
        spend(fetch_sends(now_ns, units));
        // A WR that failed locally completes as soon as its turn comes.
        spend(retire_sends(wqe_budget, &units));
        if (reliable()) {
            run_timers(now_ns);
        }
        if (_machine.state() == IBV_QPS_RTS && units > 0) {
            const unsigned requests = send_packets(port, now_ns, units);
            sent += requests;
            spend(requests);
            if (!reliable()) {
                spend(retire_sends(wqe_budget, &units));  // nothing to wait for: sent is done
            }
            if (requests == 0 && reliable()) {
                sent += ask_again_for_ack(port, now_ns);
            }
        }
    } else if (st == IBV_QPS_SQD && reliable()) {
        sent += ask_again_for_ack(port, now_ns);  // draining: what was sent must be ACKed
    }
    if (_machine.state() == IBV_QPS_ERR) {
        units -= flush(std::min(units, wqe_budget));
    }
    publish_stats();
    return sent;
}

void queue_pair::receive(const roce_packet& p, packet_port& port, uint64_t now_ns) {
    if (_clock_restarts) [[unlikely]] {
        restart_clock(now_ns);
    }
    _stats.packets_received.add(1);
    _stats.bytes_received.add(p.payload.size());
    const op_kind kind = p.info->kind;
    if (kind == op_kind::acknowledge || kind == op_kind::read_response ||
        kind == op_kind::atomic_acknowledge) {
        if (_machine.state() == IBV_QPS_RTS || _machine.state() == IBV_QPS_SQD) {
            on_response(p, port, now_ns);
        }
        return;
    }
    if (!_machine.accepts_inbound()) {
        return;
    }
    if (_s.type == IBV_QPT_UD) {
        on_datagram(p);
        return;
    }
    on_request(p, port);  // RC and UC
}

bool queue_pair::complete(verbs::completion_queue& cq, const proto::cqe& c) {
    _stats.completions.add(1);
    if (c.status != IBV_WC_SUCCESS) {
        _stats.error_completions.add(1);
    }
    const uint64_t wakes_before = cq.poller_wakes();
    if (cq.complete(c)) {
        if (cq.poller_wakes() != wakes_before) {
            _stats.poller_wakes.add(1);  // the engine charges it to the vNIC (engine.cc)
        }
        return true;
    }
    // The CQ overflowed (its owner hears IBV_EVENT_CQ_ERR): the QP cannot report any more.
    if (_machine.state() != IBV_QPS_ERR) {
        if (_s.events.raise != nullptr) {
            _s.events.raise(_s.events.context, _s.owner,
                            static_cast<uint32_t>(proto::event_type::qp_fatal), _s.qpn);
        }
        enter_error();
    }
    return false;
}

void queue_pair::enter_error() {
    _machine.enter_error();
    if (_engine != nullptr) {
        _engine->queue_visit(*this);  // its WRs flush on its next visits
    }
}

bool queue_pair::flush_pending() const {
    const verbs::qp_ring& ring = *_s.ring;
    const auto sends = ring.send_pending();
    const auto recvs = ring.recv_pending();
    return ring.send_retired() != ring.send_taken() || sends.count > 0 || sends.corrupt ||
           recvs.count > 0 || recvs.corrupt || _in_send || _recv_held;
}

bool queue_pair::connected() const {
    if (_s.type == IBV_QPT_UD) {
        return false;  // no peer: each datagram is checked (packet_port::permits_datagram)
    }
    const ibv_qp_state st = _machine.state();
    return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE;
}

void queue_pair::revoke() {
    if (_s.events.raise != nullptr) {
        _s.events.raise(_s.events.context, _s.owner,
                        static_cast<uint32_t>(proto::event_type::qp_fatal), _s.qpn);
    }
    _revoked = true;
    enter_error();  // the next poll flushes every outstanding WR
}

unsigned queue_pair::flush(uint32_t limit) {
    verbs::qp_ring& ring = *_s.ring;
    // At most `limit` WRs per visit, oldest first: a client that filled its rings (or keeps
    // posting into an ERR QP) gets the rest flushed on its next visits, never the worker.
    uint32_t budget = limit;
    // Send queue: whatever was taken and not retired, then whatever is still posted.
    const uint32_t mask = ring.sq_capacity() - 1;
    auto flush_send = [&](send_op& op) {
        // A WR already finished (acknowledged, its retirement left for a later visit) still
        // completes as it finished; everything else is flushed.
        const bool finished = op.done && op.local_error == IBV_WC_SUCCESS;
        proto::cqe c{};
        c.wr_id = op.wqe.wr_id;
        c.status = finished ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR;
        c.opcode = proto::wc_opcode_of(op.wqe.opcode);
        c.byte_len = finished ? op.length : 0;
        c.qp_num = _s.qpn;
        for (uint8_t s = 0; s < op.sges; ++s) {
            op.pins[s].reset();
        }
        op.sges = 0;
        op.done = false;
        ring.retire_send(1);
        if (!finished || op.signaled) {
            complete(*_s.send_cq, c);
        }
        --budget;
    };
    while (budget > 0 && ring.send_retired() != ring.send_taken()) {
        flush_send(_sends[ring.send_retired() & mask]);
    }
    if (ring.send_retired() == ring.send_taken()) {
        const auto sends = ring.send_pending();
        if (sends.corrupt) {
            ring.discard_send();  // nothing sensible to flush: forget it
        }
        for (uint32_t i = 0; !sends.corrupt && i < sends.count && budget > 0; ++i) {
            send_op& op = _sends[ring.send_taken() & mask];
            ring.take_send(op.wqe);
            op.sges = 0;
            op.done = false;
            op.local_error = IBV_WC_SUCCESS;
            flush_send(op);
        }
    }
    _send_index = ring.send_taken();
    _next_psn = _una = _sent_high = _psn_cursor;
    _local = local_transfer{};
    // Receive queue: the one in progress (or held by UC), then the posted ones.
    if (budget > 0 && (_in_send || _recv_held)) {
        for (uint8_t s = 0; s < _recv.sges; ++s) {
            _recv.pins[s].reset();
        }
        proto::cqe c{};
        c.wr_id = _recv.wr_id;
        c.status = IBV_WC_WR_FLUSH_ERR;
        c.opcode = IBV_WC_RECV;
        c.qp_num = _s.qpn;
        ring.retire_recv(1);
        complete(*_s.recv_cq, c);
        _in_send = false;
        _recv_held = false;
        --budget;
    }
    if (!_in_send && !_recv_held) {
        const auto recvs = ring.recv_pending();
        if (recvs.corrupt) {
            ring.discard_recv();
        }
        for (uint32_t i = 0; !recvs.corrupt && i < recvs.count && budget > 0; ++i) {
            proto::recv_wqe w;
            ring.take_recv(w);
            proto::cqe c{};
            c.wr_id = w.wr_id;
            c.status = IBV_WC_WR_FLUSH_ERR;
            c.opcode = IBV_WC_RECV;
            c.qp_num = _s.qpn;
            ring.retire_recv(1);
            complete(*_s.recv_cq, c);
            --budget;
        }
    }
    // On an SRQ only the QP's own WRs were flushed (the SRQ's WQEs stay for the other QPs);
    // the owner learns once that this QP takes no more of them.
    if (_s.srq != nullptr && !_last_wqe_reached) {
        _last_wqe_reached = true;
        if (_s.events.raise != nullptr) {
            _s.events.raise(_s.events.context, _s.owner,
                            static_cast<uint32_t>(proto::event_type::qp_last_wqe_reached), _s.qpn);
        }
    }
    _reads.clear();
    _in_write = false;
    _write_pin.reset();
    _ack_pending = false;
    if (limit > budget) {
        _stats.silent_wrs.add(limit - budget);
    }
    return limit - budget;
}

void queue_pair::reset() {
    for (auto& op : _sends) {
        for (auto& pin : op.pins) {
            pin.reset();
        }
        op.sges = 0;
    }
    for (auto& pin : _recv.pins) {
        pin.reset();
    }
    _s.ring->discard_all();
    _revoked = false;
    _send_index = _s.ring->send_taken();
    _psn_cursor = _next_psn = _una = _sent_high = 0;
    _packets_since_ack_req = 0;
    _first_unasked_ns = 0;
    _local = local_transfer{};
    _rnr_resume_ns = 0;
    _rewound_for_gap = false;
    _epsn = _msn = 0;
    _nak_sent = _ack_pending = _nak_owed = _in_send = _in_write = _recv_held = _discarding = false;
    _write_pin.reset();
    _reads.clear();
    _comm_established = false;
    _last_wqe_reached = false;
}

uint32_t queue_pair::frame_bytes(uint8_t code, uint32_t payload_len) const {
    return _frame_l2_l4 + opcode_info_of(code).header_bytes + payload_len + pad_count(payload_len) +
           icrc_bytes;
}

uint8_t* queue_pair::begin_packet(packet_port& port, uint8_t code, uint32_t payload_len,
                                  uint32_t& payload_offset) {
    const opcode_info& info = opcode_info_of(code);
    const uint32_t roce_len = info.header_bytes + payload_len + pad_count(payload_len) + icrc_bytes;
    payload_offset = _frame_l2_l4 + info.header_bytes;
    return port.begin_frame(_frame_l2_l4 + roce_len);
}

void queue_pair::finish_packet(packet_port& port, const bth_fields& bth, const ext_fields& ext,
                               uint8_t* frame, uint32_t payload_len) {
    if (_remote_is_ipv6) {
        finish_packet_to_ipv6(port, _remote_ip6, bth, ext, frame, payload_len);
    } else {
        finish_packet_to(port, _remote_ip_be, bth, ext, frame, payload_len);
    }
}

void queue_pair::seal_packet(const bth_fields& bth_in, const ext_fields& ext, uint8_t* frame,
                             uint32_t payload_len, uint32_t roce_len) {
    const opcode_info& info = opcode_info_of(bth_in.opcode);
    const uint8_t pad = pad_count(payload_len);
    bth_fields bth = bth_in;
    bth.pad = pad;
    build_roce_headers(frame + _frame_l2_l4, info.header_bytes, bth, ext);
    std::memset(frame + _frame_l2_l4 + info.header_bytes + payload_len, 0, pad);
    seal_icrc(frame, roce_len);
    _stats.packets_sent.add(1);
    _stats.bytes_sent.add(payload_len);
}

void queue_pair::finish_packet_to(packet_port& port, uint32_t dst_ip_be, const bth_fields& bth,
                                  const ext_fields& ext, uint8_t* frame, uint32_t payload_len) {
    const uint32_t roce_len =
        opcode_info_of(bth.opcode).header_bytes + payload_len + pad_count(payload_len) + icrc_bytes;
    write_frame_headers(frame, _s.local.mac, _s.local.ip_be, dst_ip_be, _udp_src_port,
                        _machine.attr().ah_attr.grh.traffic_class, roce_len);
    seal_packet(bth, ext, frame, payload_len, roce_len);
    port.end_frame(_s.local.vnic, dst_ip_be, frame_l2_l4_bytes + roce_len);
}

void queue_pair::finish_packet_to_ipv6(packet_port& port, const ipv6_address& dst_ip6,
                                       const bth_fields& bth, const ext_fields& ext, uint8_t* frame,
                                       uint32_t payload_len) {
    const uint32_t roce_len =
        opcode_info_of(bth.opcode).header_bytes + payload_len + pad_count(payload_len) + icrc_bytes;
    const ibv_global_route& grh = _machine.attr().ah_attr.grh;
    write_frame_headers_ipv6(frame, _s.local.mac, _s.local.ip6, dst_ip6, _udp_src_port,
                             grh.traffic_class, grh.flow_label, grh.hop_limit, roce_len);
    seal_packet(bth, ext, frame, payload_len, roce_len);
    port.end_frame_ipv6(_s.local.vnic, dst_ip6, frame_l2_l4_bytes_ipv6 + roce_len);
}

void queue_pair::publish_stats() {
    _stats.state.store(_machine.state(), std::memory_order_relaxed);
    _stats.next_psn.store(_next_psn, std::memory_order_relaxed);
    _stats.una_psn.store(_una, std::memory_order_relaxed);
    _stats.expected_psn.store(_epsn, std::memory_order_relaxed);
    _stats.msn.store(_msn, std::memory_order_relaxed);
    _stats.rate_bps.store(_rate.rate_bps(), std::memory_order_relaxed);
}

}  // namespace jakiro::rnic
