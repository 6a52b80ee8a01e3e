// The RC responder: the PSN check (expected, duplicate, ahead), the operation sequence, then
// SEND, WRITE, READ and atomics executed through the MR table, ACKs coalesced, errors as NAKs
// (rxe_resp.c).

#include "rnic/rc_qp.hh"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "rnic/engine.hh"
#include "rnic/packet_port.hh"
#include "rnic/queues/memory_window.hh"
#include "rnic/rc_qp_parts.hh"
#include "rnic/timers.hh"
#include "rnic/wire/aeth.hh"
#include "rnic/wire/psn.hh"
#include "verbs_abi/wc_opcode.hh"

namespace jakiro::roce {

using namespace rc_qp_parts;

void rc_qp::on_request(const roce_packet& p, packet_port& port, uint64_t now_ns) {
    (void)now_ns;
    const op_kind kind = p.info->kind;
    switch (classify_request_psn(p.psn, _epsn)) {
        case psn_class::ahead:
            _stats.out_of_sequence.fetch_add(1, std::memory_order_relaxed);
            if (!_nak_sent) {
                send_ack(port, syndrome_nak(nak_code::psn_sequence_error), _epsn);
                _stats.naks_sent.fetch_add(1, std::memory_order_relaxed);
                _nak_sent = true;
            }
            return;
        case psn_class::duplicate:
            _stats.duplicates.fetch_add(1, std::memory_order_relaxed);
            if (kind == op_kind::read_request) {
                start_read(p, p.psn, true, port);
            } else if (kind == op_kind::compare_swap || kind == op_kind::fetch_add) {
                replay_atomic(p, port);
            } else {
                _ack_pending = true;
                _ack_psn = psn_sub(_epsn, 1);
            }
            return;
        case psn_class::expected:
            break;
    }
    _nak_sent = false;
    const uint8_t pos = p.info->position;
    const bool continues = (pos & position::first) == 0;
    if ((_in_send && !(kind == op_kind::send && continues)) ||
        (_in_write && !(kind == op_kind::write && continues)) ||
        (!_in_send && !_in_write && continues && pos != 0)) {
        responder_error(port, proto::event_type::qp_req_err,
                        syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
        return;
    }
    bool advance = false;
    switch (kind) {
        case op_kind::send:
            advance = execute_send(p, port);
            break;
        case op_kind::write:
            advance = execute_write(p, port);
            break;
        case op_kind::read_request:
            start_read(p, _epsn, false, port);
            return;
        case op_kind::compare_swap:
        case op_kind::fetch_add:
            execute_atomic_request(p, port);
            return;
        case op_kind::atomic_write:
            advance = execute_atomic_write(p, port);
            break;
        default:
            responder_error(port, proto::event_type::qp_req_err,
                            syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
            return;
    }
    if (!advance) {
        return;
    }
    _epsn = psn_add(_epsn, 1);
    if (!p.ack_req) {
        return;
    }
    if ((pos & position::last) != 0) {
        // A message ended (and may have completed a receive): ACK it now. Deferred to the
        // next poll, the ACK would be lost if the program destroyed the QP on seeing that
        // completion, and the requester would retry into a QP that no longer exists.
        send_ack(port, syndrome_ack(credits_invalid), p.psn);
        _ack_pending = false;
        return;
    }
    _ack_pending = true;  // mid-message: coalesced, one ACK per poll
    _ack_psn = p.psn;
}

// Duplicates are ACKed again and never placed twice (on_request): the program may have
// changed the word since.
bool rc_qp::execute_atomic_write(const roce_packet& p, packet_port& port) {
    if (p.payload.size() != atomic_write_bytes || p.reth->dma_len() != atomic_write_bytes ||
        p.reth->va() % atomic_write_bytes != 0) {
        responder_error(port, proto::event_type::qp_req_err,
                        syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
        return false;
    }
    auto found = _s.mrs->find_remote(_s.pd, _s.qpn, p.reth->rkey(), p.reth->va(),
                                     atomic_write_bytes, proto::access_remote_write);
    if (!found || !grants(IBV_ACCESS_REMOTE_WRITE)) {
        responder_error(port, proto::event_type::qp_access_err,
                        syndrome_nak(nak_code::remote_access_error), IBV_WC_REM_ACCESS_ERR);
        return false;
    }
    store_atomic_write(found.bytes.data(), p.payload.data());
    return true;
}

void rc_qp::execute_atomic_request(const roce_packet& p, packet_port& port) {
    const uint64_t va = p.atomic_eth->va();
    if (va % 8 != 0) {
        responder_error(port, proto::event_type::qp_req_err,
                        syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
        return;
    }
    auto found = _s.mrs->find_remote(_s.pd, _s.qpn, p.atomic_eth->rkey(), va, 8,
                                     proto::access_remote_atomic);
    if (!found || !grants(IBV_ACCESS_REMOTE_ATOMIC)) {
        responder_error(port, proto::event_type::qp_access_err,
                        syndrome_nak(nak_code::remote_access_error), IBV_WC_REM_ACCESS_ERR);
        return;
    }
    const uint32_t wr_opcode =
        p.opcode == opcode::rc_fetch_add ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
    const uint64_t compare_add = wr_opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? p.atomic_eth->swap_add()
                                                                          : p.atomic_eth->compare();
    const uint64_t orig =
        execute_atomic(found.bytes.data(), wr_opcode, compare_add, p.atomic_eth->swap_add());
    // Remembered so that a retransmitted request is answered, never executed twice.
    _atomic_replies[_atomic_next++ % _atomic_replies.size()] = {p.psn, orig, true};
    _epsn = psn_add(_epsn, 1);
    _msn = psn_add(_msn, 1);
    send_atomic_ack(port, p.psn, orig);
}

void rc_qp::replay_atomic(const roce_packet& p, packet_port& port) {
    for (const auto& r : _atomic_replies) {
        if (r.valid && r.psn == p.psn) {
            send_atomic_ack(port, r.psn, r.orig);
            return;
        }
    }
    // Older than the cache: the requester has long had this answer.
}

void rc_qp::send_atomic_ack(packet_port& port, uint32_t psn, uint64_t orig) {
    uint32_t payload_at = 0;
    uint8_t* frame = begin_packet(port, opcode::rc_atomic_acknowledge, 0, payload_at);
    if (frame == nullptr) {
        return;  // the requester asks again; the cache answers
    }
    bth_fields bth;
    bth.opcode = opcode::rc_atomic_acknowledge;
    bth.dest_qp = _machine.attr().dest_qp_num;
    bth.psn = psn;
    ext_fields ext;
    ext.syndrome = syndrome_ack(credits_invalid);
    ext.msn = _msn;
    ext.orig = orig;
    finish_packet(port, bth, ext, frame, 0);
}

bool rc_qp::take_recv(recv_op& out) {
    proto::recv_wqe w;
    uint32_t pd = _s.pd;
    uint32_t max_sge = _s.max_recv_sge;
    if (_s.srq != nullptr) {
        // On an SRQ: its WQE, checked against its PD. The slot is free once taken; the
        // retire_recv calls that follow a completion land on our own (unused) RQ.
        if (!_s.srq->take(w)) {
            return false;  // nothing posted: the caller answers RNR
        }
        pd = _s.srq->pd();
        max_sge = _s.srq->max_sge();
    } else {
        verbs::qp_ring& ring = *_s.ring;
        const auto pending = ring.recv_pending();
        if (pending.corrupt) {
            // A receive producer index that makes no sense: the QP's rings are broken, as
            // for the send queue (fetch_sends).
            if (_s.events.raise != nullptr) {
                _s.events.raise(_s.events.context, _s.owner,
                                static_cast<uint32_t>(proto::event_type::qp_fatal), _s.qpn);
            }
            enter_error();
            return false;
        }
        if (pending.count == 0) {
            return false;
        }
        ring.take_recv(w);
    }
    out.wr_id = w.wr_id;
    out.local_error = IBV_WC_SUCCESS;
    out.sges = 0;
    out.length = 0;
    if (w.num_sge > max_sge || w.num_sge > proto::wqe_max_sge) {
        out.local_error = IBV_WC_LOC_LEN_ERR;
        return true;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < w.num_sge; ++i) {
        if (w.sg[i].length == 0) {
            continue;
        }
        auto found =
            _s.mrs->find(pd, w.sg[i].lkey, w.sg[i].addr, w.sg[i].length, proto::access_local_write);
        if (!found) {
            out.local_error = verbs::wc_status_for(found.status, verbs::mr_side::local);
            return true;
        }
        out.sge_data[out.sges] = found.bytes.data();
        out.sge_len[out.sges] = w.sg[i].length;
        out.pins[out.sges] = std::move(found.mr);
        ++out.sges;
        total += w.sg[i].length;
    }
    out.length = static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX));
    return true;
}

bool rc_qp::execute_send(const roce_packet& p, packet_port& port) {
    const uint8_t pos = p.info->position;
    const auto payload = static_cast<uint32_t>(p.payload.size());
    if (payload > _mtu || ((pos & position::last) == 0 && payload != _mtu)) {
        responder_error(port, proto::event_type::qp_req_err,
                        syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
        return false;
    }
    if ((pos & position::first) != 0) {
        if (_recv_held) {
            _recv_held = false;  // UC: the WQE an abandoned message had taken
        } else if (!reliable() && !take_recv(_recv)) {
            abandon_message();  // UC: no RNR, the message is lost
            return false;
        } else if (reliable() && !take_recv(_recv)) {
            send_ack(port, syndrome_rnr_nak(_machine.attr().min_rnr_timer), p.psn);
            _stats.rnr_naks_sent.fetch_add(1, std::memory_order_relaxed);
            return false;
        }
        _recv_offset = 0;
        _in_send = true;
        if (_recv.local_error != IBV_WC_SUCCESS) {
            responder_error(port, proto::event_type::qp_fatal,
                            syndrome_nak(nak_code::remote_operational_error), _recv.local_error);
            return false;
        }
    }
    if (uint64_t{_recv_offset} + payload > _recv.length) {
        responder_error(port, proto::event_type::qp_req_err,
                        syndrome_nak(nak_code::invalid_request), IBV_WC_LOC_LEN_ERR);
        return false;
    }
    scatter(_recv.sge_data.data(), _recv.sge_len.data(), _recv.sges, _recv_offset, p.payload.data(),
            payload);
    _recv_offset += payload;
    if ((pos & position::last) == 0) {
        return true;
    }
    proto::cqe c{};
    c.wr_id = _recv.wr_id;
    c.status = IBV_WC_SUCCESS;
    c.opcode = IBV_WC_RECV;
    c.byte_len = _recv_offset;
    c.qp_num = _s.qpn;
    c.src_qp = _machine.attr().dest_qp_num;
    c.solicited = p.solicited ? 1 : 0;
    if (p.immdt != nullptr) {
        c.imm_data = p.immdt->imm_be();
        c.wc_flags = IBV_WC_WITH_IMM;
    }
    if (p.ieth != nullptr) {
        // A duplicate never gets here (on_request re-ACKs it): the window is freed once.
        if (!verbs::invalidate_window(*_s.mrs, p.ieth->rkey(), _s.pd)) {
            responder_error(port, proto::event_type::qp_req_err,
                            syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
            return false;
        }
        c.imm_data = p.ieth->rkey();  // ibv_wc.invalidated_rkey, host order
        c.wc_flags = IBV_WC_WITH_INV;
    }
    for (uint8_t s = 0; s < _recv.sges; ++s) {
        _recv.pins[s].reset();
    }
    _in_send = false;
    _msn = psn_add(_msn, 1);
    _s.ring->retire_recv(1);
    complete(*_s.recv_cq, c);
    return true;
}

verbs::mr_lookup rc_qp::remote_target(uint32_t rkey, uint64_t va, uint64_t length,
                                      uint32_t access) const {
    if (length == 0) {
        verbs::mr_lookup nothing;
        nothing.status = verbs::mr_status::ok;
        return nothing;
    }
    return _s.mrs->find_remote(_s.pd, _s.qpn, rkey, va, length, access);
}

bool rc_qp::execute_write(const roce_packet& p, packet_port& port) {
    const uint8_t pos = p.info->position;
    const auto payload = static_cast<uint32_t>(p.payload.size());
    if (payload > _mtu || ((pos & position::last) == 0 && payload != _mtu)) {
        responder_error(port, proto::event_type::qp_req_err,
                        syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
        return false;
    }
    if ((pos & position::first) != 0) {
        const uint32_t length = p.reth->dma_len();
        auto found =
            remote_target(p.reth->rkey(), p.reth->va(), length, proto::access_remote_write);
        if (!found || !grants(IBV_ACCESS_REMOTE_WRITE)) {
            responder_error(port, proto::event_type::qp_access_err,
                            syndrome_nak(nak_code::remote_access_error), IBV_WC_REM_ACCESS_ERR);
            return false;
        }
        _write_data = found.bytes.data();
        _write_length = length;
        _write_offset = 0;
        _write_pin = std::move(found.mr);
    }
    const bool last = (pos & position::last) != 0;
    if (uint64_t{_write_offset} + payload > _write_length ||
        (last && _write_offset + payload != _write_length)) {
        responder_error(port, proto::event_type::qp_req_err,
                        syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
        return false;
    }
    // WRITE with immediate consumes a receive WQE: check for one before touching memory, so
    // an RNR NAK leaves nothing half done.
    recv_op imm_recv;
    bool have_recv = false;
    if (last && p.immdt != nullptr && _recv_held) {
        // UC: the WQE an abandoned SEND had taken is the oldest: receives complete in order.
        imm_recv = std::move(_recv);
        _recv_held = false;
        have_recv = true;
    }
    if (last && p.immdt != nullptr && !have_recv && !take_recv(imm_recv)) {
        if (!reliable()) {
            abandon_message();  // UC: no RNR, the message is lost
            return false;
        }
        if ((pos & position::first) != 0) {
            _write_pin.reset();  // an ONLY packet: it comes again, RETH and all
        }
        send_ack(port, syndrome_rnr_nak(_machine.attr().min_rnr_timer), p.psn);
        _stats.rnr_naks_sent.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    if (payload > 0) {
        std::memcpy(_write_data + _write_offset, p.payload.data(), payload);
    }
    _write_offset += payload;
    if (!last) {
        _in_write = true;
        return true;
    }
    _in_write = false;
    _write_pin.reset();
    _msn = psn_add(_msn, 1);
    if (p.immdt != nullptr) {
        proto::cqe c{};
        c.wr_id = imm_recv.wr_id;
        c.status = IBV_WC_SUCCESS;
        c.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
        c.byte_len = _write_length;
        c.imm_data = p.immdt->imm_be();
        c.wc_flags = IBV_WC_WITH_IMM;
        c.qp_num = _s.qpn;
        c.src_qp = _machine.attr().dest_qp_num;
        c.solicited = p.solicited ? 1 : 0;
        _s.ring->retire_recv(1);
        complete(*_s.recv_cq, c);
    }
    return true;
}

void rc_qp::start_read(const roce_packet& p, uint32_t psn, bool duplicate, packet_port& port) {
    const uint32_t length = p.reth->dma_len();
    const uint32_t packets = packets_for(length, _mtu);
    if (duplicate && psn_diff(psn_add(psn, packets), _epsn) > 0) {
        return;  // claims PSNs that were never requested: not a retransmission
    }
    auto found = remote_target(p.reth->rkey(), p.reth->va(), length, proto::access_remote_read);
    if (!found || !grants(IBV_ACCESS_REMOTE_READ)) {
        if (!duplicate) {
            responder_error(port, proto::event_type::qp_access_err,
                            syndrome_nak(nak_code::remote_access_error), IBV_WC_REM_ACCESS_ERR);
        }
        return;
    }
    if (duplicate) {
        // The requester went back to P: it asks again for everything from P on, so responses
        // still queued for P or later would only be duplicates of what is coming.
        std::erase_if(_reads, [&](const read_job& j) {
            const uint32_t start = psn_sub(j.psn, j.total_packets - j.remaining_packets);
            return psn_diff(start, psn) >= 0;
        });
    }
    if (_reads.size() >= _s.limits.max_qp_rd_atom + read_job_slack) {
        if (!duplicate) {
            responder_error(port, proto::event_type::qp_req_err,
                            syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
        }
        return;
    }
    read_job job;
    job.psn = psn;
    job.remaining_packets = packets;
    job.total_packets = packets;
    job.length = length;
    job.data = found.bytes.data();
    job.pin = std::move(found.mr);
    if (!duplicate) {
        _epsn = psn_add(_epsn, packets);
        _msn = psn_add(_msn, 1);
    }
    job.msn = _msn;
    _reads.push_back(std::move(job));
}

unsigned rc_qp::send_read_responses(packet_port& port, uint64_t now_ns, unsigned budget) {
    unsigned sent = 0;
    while (sent < budget && !_reads.empty()) {
        read_job& job = _reads.front();
        const uint32_t k = job.total_packets - job.remaining_packets;
        const uint64_t offset = uint64_t{k} * _mtu;
        const uint32_t payload =
            static_cast<uint32_t>(std::min<uint64_t>(_mtu, job.length - offset));
        uint8_t code = opcode::rc_read_response_middle;
        if (job.total_packets == 1) {
            code = opcode::rc_read_response_only;
        } else if (k == 0) {
            code = opcode::rc_read_response_first;
        } else if (job.remaining_packets == 1) {
            code = opcode::rc_read_response_last;
        }
        if (!pacer_open(now_ns) || !port.admit(_s.local.vnic, frame_bytes(code, payload))) {
            break;
        }
        pacer_charge(now_ns, frame_bytes(code, payload));
        uint32_t payload_at = 0;
        uint8_t* frame = begin_packet(port, code, payload, payload_at);
        if (frame == nullptr) {
            break;
        }
        if (payload > 0) {
            std::memcpy(frame + payload_at, job.data + offset, payload);
        }
        bth_fields bth;
        bth.opcode = code;
        bth.dest_qp = _machine.attr().dest_qp_num;
        bth.psn = job.psn;
        ext_fields ext;
        ext.syndrome = syndrome_ack(credits_invalid);
        ext.msn = job.msn;
        finish_packet(port, bth, ext, frame, payload);
        ++sent;
        job.psn = psn_add(job.psn, 1);
        if (--job.remaining_packets == 0) {
            _reads.erase(_reads.begin());
        }
    }
    return sent;
}

void rc_qp::send_ack(packet_port& port, uint8_t syndrome, uint32_t psn) {
    uint32_t payload_at = 0;
    uint8_t* frame = begin_packet(port, opcode::rc_acknowledge, 0, payload_at);
    if (frame == nullptr) {
        return;  // the requester's timer recovers
    }
    bth_fields bth;
    bth.opcode = opcode::rc_acknowledge;
    bth.dest_qp = _machine.attr().dest_qp_num;
    bth.psn = psn;
    ext_fields ext;
    ext.syndrome = syndrome;
    ext.msn = _msn;
    finish_packet(port, bth, ext, frame, 0);
}

void rc_qp::responder_error(packet_port& port, proto::event_type event, uint8_t syndrome,
                            ibv_wc_status recv_status) {
    if (!reliable()) {
        // UC (IB spec 9.9.3): what the requester did wrong drops its message, silently; only
        // the responder's own errors (a bad receive WQE, a receive too small) end the QP.
        if (recv_status == IBV_WC_REM_INV_REQ_ERR || recv_status == IBV_WC_REM_ACCESS_ERR) {
            abandon_message();
            return;
        }
    } else {
        send_ack(port, syndrome, _epsn);
        _stats.naks_sent.fetch_add(1, std::memory_order_relaxed);
    }
    if (_in_send) {
        proto::cqe c{};
        c.wr_id = _recv.wr_id;
        c.status = recv_status == IBV_WC_REM_INV_REQ_ERR || recv_status == IBV_WC_REM_ACCESS_ERR
                       ? IBV_WC_LOC_QP_OP_ERR
                       : recv_status;
        c.opcode = IBV_WC_RECV;
        c.qp_num = _s.qpn;
        for (uint8_t s = 0; s < _recv.sges; ++s) {
            _recv.pins[s].reset();
        }
        _in_send = false;
        _s.ring->retire_recv(1);
        complete(*_s.recv_cq, c);
    }
    if (_s.events.raise != nullptr) {
        _s.events.raise(_s.events.context, _s.owner, static_cast<uint32_t>(event), _s.qpn);
    }
    enter_error();
}

}  // namespace jakiro::roce
