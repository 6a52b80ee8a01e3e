// The responder of RC and UC: every inbound request walks the same named steps (check_psn,
// check_op_seq, check_op_valid, check_length, check_rkey, check_resource, execute,
// complete_request, acknowledge), as rxe_resp.c's states; each returns a verdict, and
// answer() turns a refusal into what the wire and the QP see: a NAK, an RNR NAK, a duplicate
// answered again, a UC message dropped. Then the READ responses, ACKs and the error path.

#include "rnic/queue_pair.hh"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "rnic/engine.hh"
#include "rnic/packet_port.hh"
#include "rnic/queue_pair_parts.hh"
#include "rnic/queues/memory_window.hh"
#include "rnic/timers.hh"
#include "rnic/wire/aeth.hh"
#include "rnic/wire/psn.hh"
#include "verbs_abi/wc_opcode.hh"

namespace jakiro::rnic {

using namespace queue_pair_parts;

// An inbound request, RC or UC, goes through the steps below in this order, as rxe_resp.c's
// states do; each returns a verdict and the first that is not `proceed` ends the walk
// (answer() acts on it). rxe takes the receive WQE before the length and rkey checks; here it
// is taken after them, so a request refused for its length or its key never consumes one.
void queue_pair::on_request(const roce_packet& p, packet_port& port) {
    inbound_request r{p};
    verdict v = check_psn(r);
    if (v == verdict::proceed) {
        v = check_op_seq(r);
    }
    if (v == verdict::proceed) {
        v = check_op_valid(r);
    }
    if (v == verdict::proceed) {
        v = check_length(r);
    }
    if (v == verdict::proceed) {
        v = check_rkey(r);
    }
    if (v == verdict::proceed) {
        v = check_resource(r);
    }
    if (v == verdict::proceed) {
        v = execute(r, port);
    }
    if (v == verdict::proceed) {
        v = complete_request(r);
    }
    if (v == verdict::proceed) {
        acknowledge(r, port);
        return;
    }
    answer(v, r, port);
}

// RC (IB spec 9.7.5.1.2): the expected PSN proceeds, an older one is a duplicate (answered
// again, never executed twice), a newer one is NAKed as a sequence error (once, until the
// expected PSN comes). UC (9.7.5.2.2) never answers: a copy the fabric made is dropped, and a
// gap loses the message in progress while the packet after it is taken as it comes.
queue_pair::verdict queue_pair::check_psn(inbound_request& r) {
    switch (classify_request_psn(r.p.psn, _epsn)) {
        case psn_class::duplicate:
            _stats.duplicates.add(1);
            return verdict::duplicate;
        case psn_class::ahead:
            _stats.out_of_sequence.add(1);
            if (reliable()) {
                return verdict::nak_sequence_error;
            }
            if (_in_send || _in_write) {
                abandon_message();  // packets of it were lost
            }
            break;
        case psn_class::expected:
            break;
    }
    if (reliable()) {
        _nak_sent = false;
        _nak_owed = false;  // what it would have asked for has come
    } else {
        _epsn = psn_add(r.p.psn, 1);
    }
    return verdict::proceed;
}

// A middle or last packet continues the SEND or WRITE under way, and nothing else may come
// while one is. RC: anything else is an invalid request. UC: a first packet starts afresh (a
// message whose last packet was lost is abandoned); the rest of a lost message is dropped up
// to the next first packet.
queue_pair::verdict queue_pair::check_op_seq(inbound_request& r) {
    const op_kind kind = r.p.info->kind;
    const uint8_t pos = r.p.info->position;
    const bool continues = (pos & position::first) == 0;
    if (!reliable()) {
        if (!continues) {
            if (_in_send || _in_write) {
                abandon_message();  // its last packet was lost
            }
            _discarding = false;
            return verdict::proceed;
        }
        if (_discarding ||
            !((_in_send && kind == op_kind::send) || (_in_write && kind == op_kind::write))) {
            _discarding = true;  // the rest of a message that is already lost
            return verdict::drop;
        }
        return verdict::proceed;
    }
    if ((_in_send && !(kind == op_kind::send && continues)) ||
        (_in_write && !(kind == op_kind::write && continues)) ||
        (!_in_send && !_in_write && continues && pos != 0)) {
        return verdict::nak_invalid_request;
    }
    return verdict::proceed;
}

// The operations the transport has: RC all of them, UC SEND and WRITE only.
queue_pair::verdict queue_pair::check_op_valid(inbound_request& r) {
    switch (r.p.info->kind) {
        case op_kind::send:
        case op_kind::write:
            return verdict::proceed;
        case op_kind::read_request:
        case op_kind::compare_swap:
        case op_kind::fetch_add:
        case op_kind::atomic_write:
            return reliable() ? verdict::proceed : verdict::nak_invalid_request;
        default:
            return verdict::nak_invalid_request;
    }
}

// The packet's own sizes: a SEND or WRITE packet carries at most the path MTU and exactly it
// unless it is the last; an atomic names an aligned 8-byte word, an ATOMIC WRITE carries 8
// bytes for one.
queue_pair::verdict queue_pair::check_length(inbound_request& r) {
    const roce_packet& p = r.p;
    switch (p.info->kind) {
        case op_kind::send:
        case op_kind::write: {
            const auto payload = static_cast<uint32_t>(p.payload.size());
            if (payload > _mtu || ((p.info->position & position::last) == 0 && payload != _mtu)) {
                return verdict::nak_invalid_request;
            }
            return verdict::proceed;
        }
        case op_kind::atomic_write:
            if (p.payload.size() != atomic_write_bytes || p.reth->dma_len() != atomic_write_bytes ||
                p.reth->va() % atomic_write_bytes != 0) {
                return verdict::nak_invalid_request;
            }
            return verdict::proceed;
        case op_kind::compare_swap:
        case op_kind::fetch_add:
            return p.atomic_eth->va() % 8 != 0 ? verdict::nak_invalid_request : verdict::proceed;
        default:
            return verdict::proceed;
    }
}

// The memory a WRITE, READ or atomic touches: its rkey names an MR or a memory window of the
// QP's PD that grants the right over the whole range (mr_table::find_remote; a type-2 window
// only to the QP it is bound to), and the QP's own access flags grant it too. A WRITE is
// looked up at its first packet and kept (_write_*); every packet of it must stay inside the
// length its RETH announced, and the last must end there.
queue_pair::verdict queue_pair::check_rkey(inbound_request& r) {
    const roce_packet& p = r.p;
    switch (p.info->kind) {
        case op_kind::write: {
            if ((p.info->position & position::first) != 0) {
                const uint32_t length = p.reth->dma_len();
                auto found =
                    remote_target(p.reth->rkey(), p.reth->va(), length, proto::access_remote_write);
                if (!found || !grants(IBV_ACCESS_REMOTE_WRITE)) {
                    return verdict::nak_remote_access;
                }
                _write_data = found.bytes.data();
                _write_length = length;
                _write_offset = 0;
                // An rkey that is not its MR's key named a window.
                _write_through_window = found.mr != nullptr && found.mr->key != p.reth->rkey();
                _write_rkey = p.reth->rkey();
                _write_va = p.reth->va();
                _write_pin = std::move(found.mr);
            }
            const auto payload = static_cast<uint32_t>(p.payload.size());
            const bool last = (p.info->position & position::last) != 0;
            if (uint64_t{_write_offset} + payload > _write_length ||
                (last && _write_offset + payload != _write_length)) {
                return verdict::nak_invalid_request;
            }
            if ((p.info->position & position::first) == 0 && _write_through_window && payload > 0) {
                // Still the same bytes through the same window? (MR targets need no second
                // look: the pin keeps the mapping, and the MR's owner gave the key out whole.)
                const auto still = remote_target(_write_rkey, _write_va + _write_offset, payload,
                                                 proto::access_remote_write);
                if (!still || still.bytes.data() != _write_data + _write_offset) {
                    return verdict::nak_remote_access;
                }
            }
            return verdict::proceed;
        }
        case op_kind::read_request:
            r.target = remote_target(p.reth->rkey(), p.reth->va(), p.reth->dma_len(),
                                     proto::access_remote_read);
            return r.target && grants(IBV_ACCESS_REMOTE_READ) ? verdict::proceed
                                                              : verdict::nak_remote_access;
        case op_kind::atomic_write:
            r.target = remote_target(p.reth->rkey(), p.reth->va(), atomic_write_bytes,
                                     proto::access_remote_write);
            return r.target && grants(IBV_ACCESS_REMOTE_WRITE) ? verdict::proceed
                                                               : verdict::nak_remote_access;
        case op_kind::compare_swap:
        case op_kind::fetch_add:
            r.target = remote_target(p.atomic_eth->rkey(), p.atomic_eth->va(), 8,
                                     proto::access_remote_atomic);
            return r.target && grants(IBV_ACCESS_REMOTE_ATOMIC) ? verdict::proceed
                                                                : verdict::nak_remote_access;
        default:
            return verdict::proceed;
    }
}

// What the request consumes besides memory: a SEND's first packet takes the next receive WQE
// (a bad one is the responder's own error: remote operational error), the last packet of a
// WRITE with immediate takes one for its completion, before any byte lands, so an RNR leaves
// nothing half done; a READ takes a slot in the queue of READs owed.
queue_pair::verdict queue_pair::check_resource(inbound_request& r) {
    const roce_packet& p = r.p;
    const uint8_t pos = p.info->position;
    switch (p.info->kind) {
        case op_kind::send:
            if ((pos & position::first) == 0) {
                return verdict::proceed;
            }
            if (_recv_held) {
                _recv_held = false;  // UC: the WQE an abandoned message had taken
            } else if (!take_recv(_recv)) {
                return verdict::rnr;
            }
            _recv_offset = 0;
            _in_send = true;
            return _recv.local_error == IBV_WC_SUCCESS ? verdict::proceed
                                                       : verdict::nak_remote_operation;
        case op_kind::write:
            if ((pos & position::last) == 0 || p.immdt == nullptr) {
                return verdict::proceed;
            }
            if (_recv_held) {
                // UC: the WQE an abandoned SEND had taken is the oldest: receives complete in
                // order.
                _recv_held = false;
                return verdict::proceed;
            }
            if (!take_recv(_recv)) {
                if ((pos & position::first) != 0) {
                    _write_pin.reset();  // an ONLY packet: it comes again, RETH and all
                }
                return verdict::rnr;
            }
            return verdict::proceed;
        case op_kind::read_request:
            return _reads.size() >= _s.limits.max_qp_rd_atom + read_job_slack
                       ? verdict::nak_invalid_request
                       : verdict::proceed;
        default:
            return verdict::proceed;
    }
}

// Places or fetches the bytes. A SEND that overflows its receive WQE is a length error. A READ
// is queued (its responses are its answer) and an atomic answered at once: both `answered`.
queue_pair::verdict queue_pair::execute(inbound_request& r, packet_port& port) {
    const roce_packet& p = r.p;
    const auto payload = static_cast<uint32_t>(p.payload.size());
    switch (p.info->kind) {
        case op_kind::send:
            if (uint64_t{_recv_offset} + payload > _recv.length) {
                return verdict::nak_length_error;
            }
            scatter(_recv.sge_data.data(), _recv.sge_len.data(), _recv.sges, _recv_offset,
                    p.payload.data(), payload);
            _recv_offset += payload;
            return verdict::proceed;
        case op_kind::write:
            if (payload > 0) {
                std::memcpy(_write_data + _write_offset, p.payload.data(), payload);
            }
            _write_offset += payload;
            return verdict::proceed;
        case op_kind::read_request: {
            const uint32_t psn = _epsn;
            _epsn = psn_add(_epsn, packets_for(p.reth->dma_len(), _mtu));
            _msn = psn_add(_msn, 1);
            queue_read(r, psn);
            return verdict::answered;
        }
        case op_kind::atomic_write:
            // Duplicates are ACKed again and never placed twice (check_psn): the program may
            // have changed the word since.
            store_atomic_write(r.target.bytes.data(), p.payload.data());
            return verdict::proceed;
        case op_kind::compare_swap:
        case op_kind::fetch_add: {
            const uint32_t wr_opcode = p.opcode == opcode::rc_fetch_add
                                           ? IBV_WR_ATOMIC_FETCH_AND_ADD
                                           : IBV_WR_ATOMIC_CMP_AND_SWP;
            const uint64_t compare_add = wr_opcode == IBV_WR_ATOMIC_FETCH_AND_ADD
                                             ? p.atomic_eth->swap_add()
                                             : p.atomic_eth->compare();
            const uint64_t orig = execute_atomic(r.target.bytes.data(), wr_opcode, compare_add,
                                                 p.atomic_eth->swap_add());
            // Remembered so that a retransmitted request is answered, never executed twice.
            _atomic_replies[_atomic_next++ % _atomic_replies.size()] = {p.psn, orig, true};
            _epsn = psn_add(_epsn, 1);
            _msn = psn_add(_msn, 1);
            answer_atomic(port, p.psn, orig);
            return verdict::answered;
        }
        default:
            return verdict::nak_invalid_request;  // check_op_valid let nothing else through
    }
}

// The last packet of a SEND or WRITE with immediate completes its receive WQE; a SEND with
// invalidate first frees the memory window it names (refused: an invalid request).
queue_pair::verdict queue_pair::complete_request(inbound_request& r) {
    const roce_packet& p = r.p;
    const bool last = (p.info->position & position::last) != 0;
    switch (p.info->kind) {
        case op_kind::send: {
            if (!last) {
                return verdict::proceed;
            }
            proto::cqe c = recv_completion(IBV_WC_SUCCESS, IBV_WC_RECV, _recv_offset);
            c.src_qp = _machine.attr().dest_qp_num;
            c.solicited = p.solicited ? 1 : 0;
            if (p.immdt != nullptr) {
                c.imm_data = p.immdt->imm_be();
                c.wc_flags = IBV_WC_WITH_IMM;
            }
            if (p.ieth != nullptr) {
                // A duplicate never gets here (check_psn): the window is freed once.
                if (!verbs::invalidate_window(*_s.mrs, p.ieth->rkey(), _s.pd)) {
                    return verdict::nak_invalid_request;
                }
                c.imm_data = p.ieth->rkey();  // ibv_wc.invalidated_rkey, host order
                c.wc_flags = IBV_WC_WITH_INV;
            }
            _in_send = false;
            _msn = psn_add(_msn, 1);
            complete_recv(c);
            return verdict::proceed;
        }
        case op_kind::write: {
            if (!last) {
                _in_write = true;
                return verdict::proceed;
            }
            _in_write = false;
            _write_pin.reset();
            _msn = psn_add(_msn, 1);
            if (p.immdt == nullptr) {
                return verdict::proceed;
            }
            proto::cqe c =
                recv_completion(IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, _write_length);
            c.imm_data = p.immdt->imm_be();
            c.wc_flags = IBV_WC_WITH_IMM;
            c.src_qp = _machine.attr().dest_qp_num;
            c.solicited = p.solicited ? 1 : 0;
            complete_recv(c);
            return verdict::proceed;
        }
        default:
            return verdict::proceed;
    }
}

// RC: the expected PSN moves on; a message's last packet that asks for an ACK gets it now
// (deferred to the next poll, the ACK would be lost if the program destroyed the QP on seeing
// the completion, and the requester would retry into a QP that no longer exists), unless READ
// responses for earlier PSNs are still owed: answers leave in PSN order (IB spec 9.7.5.1.1),
// so it follows them (send_due_ack). Mid-message ACKs are coalesced, one per poll. UC
// acknowledges nothing (check_psn moved its PSN).
void queue_pair::acknowledge(inbound_request& r, packet_port& port) {
    if (!reliable()) {
        return;
    }
    _epsn = psn_add(_epsn, 1);
    if (!r.p.ack_req) {
        return;
    }
    _ack_pending = true;
    _ack_psn = r.p.psn;
    if ((r.p.info->position & position::last) != 0) {
        send_due_ack(port);
    }
}

// An ACK for PSN n says every request before n was answered, READs included: one that left
// ahead of READ responses it follows makes the requester take those responses for lost and go
// back for them (an implied NAK), resending everything after them too.
bool queue_pair::send_due_ack(packet_port& port) {
    if (_nak_owed && _reads.empty()) {
        send_ack(port, _owed_nak, _epsn);
        _nak_owed = false;
        _ack_pending = false;  // a NAK at the expected PSN acknowledges everything before it
        return true;
    }
    if (!_ack_pending || (!_reads.empty() && psn_diff(_reads.front().psn, _ack_psn) <= 0)) {
        return false;
    }
    send_ack(port, syndrome_ack(credits_invalid), _ack_psn);
    _ack_pending = false;
    return true;
}

// A NAK says every request before its PSN was answered, as an ACK does: ahead of READ responses
// owed before it, the requester takes those for lost and cannot act on the NAK until it has
// them (it stays at the READ), so what the NAK asks for waits for the ACK timeout.
void queue_pair::send_nak(packet_port& port, uint8_t syndrome) {
    if (_reads.empty()) {
        send_ack(port, syndrome, _epsn);
        return;
    }
    _nak_owed = true;
    _owed_nak = syndrome;
}

// What a step's verdict means on the wire and for the QP. The NAKs move an RC QP to ERR
// (responder_error); on UC what the requester did wrong drops its message.
void queue_pair::answer(verdict v, inbound_request& r, packet_port& port) {
    switch (v) {
        case verdict::proceed:
        case verdict::answered:
        case verdict::drop:
            return;
        case verdict::duplicate:
            if (reliable()) {
                duplicate_request(r, port);
            }
            return;  // UC never retransmits: a copy the fabric made
        case verdict::nak_sequence_error:
            if (!_nak_sent) {
                send_nak(port, syndrome_nak(nak_code::psn_sequence_error));
                _stats.naks_sent.add(1);
                _nak_sent = true;
            }
            return;
        case verdict::nak_invalid_request:
            responder_error(port, proto::event_type::qp_req_err,
                            syndrome_nak(nak_code::invalid_request), IBV_WC_REM_INV_REQ_ERR);
            return;
        case verdict::nak_length_error:
            responder_error(port, proto::event_type::qp_req_err,
                            syndrome_nak(nak_code::invalid_request), IBV_WC_LOC_LEN_ERR);
            return;
        case verdict::nak_remote_access:
            responder_error(port, proto::event_type::qp_access_err,
                            syndrome_nak(nak_code::remote_access_error), IBV_WC_REM_ACCESS_ERR);
            return;
        case verdict::nak_remote_operation:
            responder_error(port, proto::event_type::qp_fatal,
                            syndrome_nak(nak_code::remote_operational_error), _recv.local_error);
            return;
        case verdict::rnr:
            if (!reliable()) {
                abandon_message();  // UC: no RNR, the message is lost
                return;
            }
            send_nak(port, syndrome_rnr_nak(_machine.attr().min_rnr_timer));  // r.p.psn: expected
            _stats.rnr_naks_sent.add(1);
            return;
    }
}

// RC: a request the requester sent again because an answer was lost. A READ is executed again
// from its PSN, an atomic answered from the cache, anything else ACKed again (at the next
// poll, coalesced).
void queue_pair::duplicate_request(inbound_request& r, packet_port& port) {
    switch (r.p.info->kind) {
        case op_kind::read_request:
            replay_read(r);
            return;
        case op_kind::compare_swap:
        case op_kind::fetch_add:
            replay_atomic(r.p, port);
            return;
        default:
            _ack_pending = true;
            _ack_psn = psn_sub(_epsn, 1);
            return;
    }
}

// A READ asked again: checked as a new one would be, but never NAKed (a refusal would already
// have been NAKed the first time) and never moving the expected PSN.
void queue_pair::replay_read(inbound_request& r) {
    const uint32_t psn = r.p.psn;
    const uint32_t packets = packets_for(r.p.reth->dma_len(), _mtu);
    if (psn_diff(psn_add(psn, packets), _epsn) > 0) {
        return;  // claims PSNs that were never requested: not a retransmission
    }
    if (check_rkey(r) != verdict::proceed) {
        return;
    }
    // The requester went back to P: it asks again for everything from P on, so responses
    // still queued for P or later would only be duplicates of what is coming.
    std::erase_if(_reads, [&](const read_job& j) {
        const uint32_t start = psn_sub(j.psn, j.total_packets - j.remaining_packets);
        return psn_diff(start, psn) >= 0;
    });
    if (check_resource(r) != verdict::proceed) {
        return;
    }
    queue_read(r, psn);
}

// Queues the responses of the READ `r` (checked) from `psn` on.
void queue_pair::queue_read(inbound_request& r, uint32_t psn) {
    const uint32_t length = r.p.reth->dma_len();
    const uint32_t packets = packets_for(length, _mtu);
    read_job job;
    job.psn = psn;
    job.remaining_packets = packets;
    job.total_packets = packets;
    job.length = length;
    job.data = r.target.bytes.data();
    job.pin = std::move(r.target.mr);
    job.msn = _msn;
    job.rkey = r.p.reth->rkey();
    job.va = r.p.reth->va();
    _reads.push_back(std::move(job));
}

void queue_pair::release_recv_pins() {
    for (uint8_t s = 0; s < _recv.sges; ++s) {
        _recv.pins[s].reset();
    }
}

proto::cqe queue_pair::recv_completion(ibv_wc_status status, uint32_t opcode,
                                       uint32_t byte_len) const {
    proto::cqe c{};
    c.wr_id = _recv.wr_id;
    c.status = status;
    c.opcode = opcode;
    c.byte_len = byte_len;
    c.qp_num = _s.qpn;
    return c;
}

void queue_pair::complete_recv(const proto::cqe& c) {
    release_recv_pins();
    _s.ring->retire_recv(1);
    complete(*_s.recv_cq, c);
}

void queue_pair::replay_atomic(const roce_packet& p, packet_port& port) {
    for (const auto& r : _atomic_replies) {
        if (r.valid && r.psn == p.psn) {
            answer_atomic(port, r.psn, r.orig);
            return;
        }
    }
    // Older than the cache: the requester has long had this answer.
}

void queue_pair::answer_atomic(packet_port& port, uint32_t psn, uint64_t orig) {
    if (_reads.empty()) {
        send_atomic_ack(port, psn, orig);
        return;
    }
    // Bounded as READs are: the requester keeps at most max_rd_atomic READs and atomics
    // unanswered; beyond the slack a retransmitted one is answered when asked again.
    if (_reads.size() >= _s.limits.max_qp_rd_atom + read_job_slack) {
        return;
    }
    read_job job;
    job.psn = psn;
    job.remaining_packets = 1;
    job.total_packets = 1;
    job.msn = _msn;
    job.atomic = true;
    job.orig = orig;
    _reads.push_back(std::move(job));
}

void queue_pair::send_atomic_ack(packet_port& port, uint32_t psn, uint64_t orig) {
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

bool queue_pair::take_recv(recv_op& out) {
    proto::recv_wqe& w = out.wqe;
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
    resolve_recv(w, pd, max_sge, out);
    return true;
}

void queue_pair::resolve_recv(const proto::recv_wqe& w, uint32_t pd, uint32_t max_sge,
                              recv_op& out) const {
    out.wr_id = w.wr_id;
    out.local_error = IBV_WC_SUCCESS;
    out.sges = 0;
    out.length = 0;
    if (w.num_sge > max_sge || w.num_sge > proto::wqe_max_sge) {
        out.local_error = IBV_WC_LOC_LEN_ERR;
        return;
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
            return;
        }
        out.sge_data[out.sges] = found.bytes.data();
        out.sge_len[out.sges] = w.sg[i].length;
        out.pins[out.sges] = std::move(found.mr);
        ++out.sges;
        total += w.sg[i].length;
    }
    out.length = static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX));
}

verbs::mr_lookup queue_pair::remote_target(uint32_t rkey, uint64_t va, uint64_t length,
                                           uint32_t access) const {
    if (length == 0) {
        verbs::mr_lookup nothing;
        nothing.status = verbs::mr_status::ok;
        return nothing;
    }
    return _s.mrs->find_remote(_s.pd, _s.qpn, rkey, va, length, access);
}

unsigned queue_pair::send_read_responses(packet_port& port, uint64_t now_ns, unsigned budget) {
    unsigned sent = 0;
    unsigned acks = 0;  // a pending ACK leaves in its place among the responses
    while (sent < budget && !_reads.empty()) {
        acks += send_due_ack(port) ? 1 : 0;
        read_job& job = _reads.front();
        if (job.atomic) {
            send_atomic_ack(port, job.psn, job.orig);  // as any ACK: not charged to the share
            _reads.erase(_reads.begin());
            ++sent;
            continue;
        }
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
    acks += send_due_ack(port) ? 1 : 0;
    return sent + acks;
}

void queue_pair::send_ack(packet_port& port, uint8_t syndrome, uint32_t psn) {
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

void queue_pair::responder_error(packet_port& port, proto::event_type event, uint8_t syndrome,
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
        _stats.naks_sent.add(1);
    }
    if (_in_send) {
        _in_send = false;
        complete_recv(recv_completion(
            recv_status == IBV_WC_REM_INV_REQ_ERR || recv_status == IBV_WC_REM_ACCESS_ERR
                ? IBV_WC_LOC_QP_OP_ERR
                : recv_status,
            IBV_WC_RECV, 0));
    }
    if (_s.events.raise != nullptr) {
        _s.events.raise(_s.events.context, _s.owner, static_cast<uint32_t>(event), _s.qpn);
    }
    enter_error();
}

}  // namespace jakiro::rnic
