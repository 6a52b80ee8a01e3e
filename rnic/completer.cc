// The completer: ACKs, NAKs, READ responses and atomic ACKs move `una`; go-back-N, the
// retransmit and RNR timers, and send completions strictly in order (rxe_comp.c).

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

bool queue_pair::psn_sent(uint32_t psn) const {
    return psn_diff(psn, _una) >= 0 && psn_diff(psn, _sent_high) < 0;
}

void queue_pair::on_ack_psn(uint32_t psn, uint64_t now_ns) {
    if (!psn_sent(psn)) {
        return;  // an old ACK, or one for something never sent
    }
    const uint32_t old_una = _una;
    bool rewound_now = false;
    bool answer_missing = false;  // a READ or atomic before `psn` still misses its response
    _una = psn_add(psn, 1);
    verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    for (uint32_t i = ring.send_retired(); i != ring.send_taken(); ++i) {
        send_op& op = _sends[i & mask];
        if (op.local_error != IBV_WC_SUCCESS) {
            break;
        }
        if (op.done) {
            continue;
        }
        const uint32_t last_psn = psn_add(op.first_psn, op.packets - 1);
        if (!psn_before_eq(last_psn, psn)) {
            break;
        }
        if (needs_response(op.wqe)) {
            if (answer_missing) {
                continue;  // asked again with the first one, from which una resumes
            }
            // The responder has executed it, yet responses are missing (lost, or still on
            // the way behind this ACK): ask again for the rest, once until progress. An
            // atomic asked again is answered from the responder's cache, never re-executed.
            answer_missing = true;
            _una = psn_add(op.first_psn, op.read_received);
            if (!_rewound_for_gap) {
                go_back(_una);
                _rewound_for_gap = rewound_now = true;
            }
            continue;
        }
        // Acknowledged, even behind a READ still missing responses: una passes it as soon as
        // that READ completes (skip_acknowledged). Forgetting it would leave the last WRs of
        // a burst waiting for an ACK the responder already sent, until the retransmit timer.
        op.done = true;
    }
    if (_una != old_una) {
        _last_progress_ns = now_ns;
        _retries_left = _machine.attr().retry_cnt;
        _rewound_for_gap = rewound_now;
    }
    if (psn_diff(_una, _next_psn) > 0) {
        move_send_pointer(_una);  // the ACK overtook a rewind: do not resend what it covers
    }
    retire_sends();
}

void queue_pair::on_response(const roce_packet& p, packet_port& port, uint64_t now_ns) {
    (void)port;
    if (p.info->kind == op_kind::read_response) {
        on_read_response(p, now_ns);
        return;
    }
    if (p.info->kind == op_kind::atomic_acknowledge) {
        on_atomic_ack(p, now_ns);
        return;
    }
    if (p.info->kind != op_kind::acknowledge || p.aeth == nullptr) {
        return;
    }
    const auto syndrome = decode_syndrome(p.aeth->syndrome);
    const uint32_t psn = p.psn;
    if (syndrome.kind == aeth_kind::ack) {
        on_ack_psn(psn, now_ns);
        return;
    }
    // A NAK names the PSN it refuses; everything before it is acknowledged.
    if (psn_diff(psn, _una) < 0 || psn_diff(psn, _sent_high) > 0) {
        return;
    }
    if (psn != _una) {
        on_ack_psn(psn_sub(psn, 1), now_ns);
        if (_una != psn) {
            return;  // a READ before it still misses responses: handled by go-back already
        }
    }
    if (syndrome.kind == aeth_kind::rnr_nak) {
        _stats.rnr_naks_received.add(1);
        if (_machine.attr().rnr_retry != rnr_retry_infinite) {
            if (_rnr_retries_left == 0) {
                fail_requester(psn, IBV_WC_RNR_RETRY_EXC_ERR);
                return;
            }
            --_rnr_retries_left;
        }
        go_back(psn);
        _rnr_wait_ns = uint64_t{rnr_timer_us(syndrome.value)} * 1000;
        _rnr_resume_ns = now_ns + _rnr_wait_ns;
        return;
    }
    if (syndrome.kind != aeth_kind::nak) {
        return;
    }
    _stats.naks_received.add(1);
    switch (static_cast<nak_code>(syndrome.value)) {
        case nak_code::psn_sequence_error:
            go_back(psn);
            _last_progress_ns = now_ns;
            return;
        case nak_code::invalid_request:
            fail_requester(psn, IBV_WC_REM_INV_REQ_ERR);
            return;
        case nak_code::remote_access_error:
            fail_requester(psn, IBV_WC_REM_ACCESS_ERR);
            return;
        case nak_code::remote_operational_error:
            fail_requester(psn, IBV_WC_REM_OP_ERR);
            return;
        default:
            fail_requester(psn, IBV_WC_REM_INV_RD_REQ_ERR);
            return;
    }
}

queue_pair::send_op* queue_pair::op_answered_by(uint32_t psn) {
    verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    for (uint32_t i = ring.send_retired(); i != ring.send_taken(); ++i) {
        send_op& op = _sends[i & mask];
        if (op.local_error != IBV_WC_SUCCESS) {
            return nullptr;
        }
        if (op.done) {
            continue;
        }
        if (psn_diff(psn, op.first_psn) >= 0 &&
            psn_diff(psn, psn_add(op.first_psn, op.packets)) < 0) {
            return &op;
        }
        if (needs_response(op.wqe)) {
            return nullptr;  // an earlier READ or atomic still owes its response
        }
        op.done = true;  // responses come in order: everything before was executed
    }
    return nullptr;
}

void queue_pair::response_progress(uint32_t psn, uint64_t now_ns) {
    _una = psn_add(psn, 1);
    skip_acknowledged();
    _last_progress_ns = now_ns;
    _retries_left = _machine.attr().retry_cnt;
    _rewound_for_gap = false;
    if (psn_diff(_una, _next_psn) > 0) {
        move_send_pointer(_una);
    }
    retire_sends();
}

void queue_pair::skip_acknowledged() {
    const verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    for (uint32_t i = ring.send_retired(); i != ring.send_taken(); ++i) {
        const send_op& op = _sends[i & mask];
        if (op.local_error != IBV_WC_SUCCESS) {
            return;
        }
        const uint32_t end = psn_add(op.first_psn, op.packets);
        if (op.packets == 0 || psn_diff(end, _una) <= 0) {
            continue;  // sends nothing, or wholly before una
        }
        if (!op.done || psn_diff(op.first_psn, _una) > 0) {
            return;
        }
        _una = end;
    }
}

void queue_pair::acknowledge_before_response(uint32_t psn, uint64_t now_ns) {
    const verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    for (uint32_t i = ring.send_retired(); i != ring.send_taken(); ++i) {
        const send_op& op = _sends[i & mask];
        if (op.packets == 0 || psn_diff(psn, op.first_psn) < 0 ||
            psn_diff(psn, psn_add(op.first_psn, op.packets)) >= 0) {
            continue;
        }
        if (psn_diff(op.first_psn, _una) > 0) {
            on_ack_psn(psn_sub(op.first_psn, 1), now_ns);
        }
        return;
    }
}

void queue_pair::on_read_response(const roce_packet& p, uint64_t now_ns) {
    const uint32_t psn = p.psn;
    if (!psn_sent(psn)) {
        _stats.duplicates.add(1);
        return;
    }
    if (psn != _una) {
        // Responses come in PSN order and answer every request before them: the SENDs and
        // WRITEs between una and this READ were executed, their ACK coalesced into it.
        acknowledge_before_response(psn, now_ns);
    }
    if (psn != _una) {
        // Earlier responses were lost: ask again from the first missing one, once per gap.
        _stats.out_of_sequence.add(1);
        if (!_rewound_for_gap) {
            go_back(_una);
            _rewound_for_gap = true;
        }
        return;
    }
    send_op* read = op_answered_by(psn);
    if (read == nullptr || !is_read(read->wqe)) {
        return;
    }
    const auto k = static_cast<uint32_t>(psn_diff(psn, read->first_psn));
    const uint64_t offset = uint64_t{k} * _mtu;
    const uint32_t expected =
        static_cast<uint32_t>(std::min<uint64_t>(_mtu, read->length - offset));
    if (k != read->read_received || p.payload.size() != expected) {
        _stats.out_of_sequence.add(1);
        return;
    }
    scatter(read->sge_data.data(), read->sge_len.data(), read->sges, offset, p.payload.data(),
            expected);
    ++read->read_received;
    if (read->read_received == read->packets) {
        read->done = true;
    }
    response_progress(psn, now_ns);
}

void queue_pair::on_atomic_ack(const roce_packet& p, uint64_t now_ns) {
    const uint32_t psn = p.psn;
    if (psn_sent(psn) && psn != _una && p.atomic_ack_eth != nullptr) {
        acknowledge_before_response(psn, now_ns);  // as a READ response does
    }
    if (!psn_sent(psn) || psn != _una || p.atomic_ack_eth == nullptr) {
        _stats.duplicates.add(1);
        return;
    }
    send_op* atomic = op_answered_by(psn);
    if (atomic == nullptr || !is_atomic(atomic->wqe)) {
        return;
    }
    // The original value, in the byte order of the memory it came from (this host's).
    const uint64_t orig = p.atomic_ack_eth->orig();
    scatter(atomic->sge_data.data(), atomic->sge_len.data(), atomic->sges, 0,
            reinterpret_cast<const uint8_t*>(&orig), sizeof(orig));
    atomic->done = true;
    response_progress(psn, now_ns);
}

void queue_pair::go_back(uint32_t psn) {
    const int32_t rewound = psn_diff(_next_psn, psn);
    if (rewound > 0) {
        _stats.retransmitted.add(rewound);
    }
    move_send_pointer(psn);
}

void queue_pair::move_send_pointer(uint32_t psn) {
    verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    for (uint32_t i = ring.send_retired(); i != ring.send_taken(); ++i) {
        const send_op& op = _sends[i & mask];
        if (op.packets == 0) {
            continue;
        }
        if (psn_diff(psn, op.first_psn) >= 0 &&
            psn_diff(psn, psn_add(op.first_psn, op.packets)) < 0) {
            _send_index = i;
            _next_psn = psn;
            return;
        }
    }
    // Past every taken op: nothing left to (re)send.
    _send_index = ring.send_taken();
    _next_psn = _psn_cursor;
}

// A slot is handed back to the shim before the completion that reports it is published: a
// program that sees the CQE may post again at once (perftest counts on it).
bool queue_pair::retire_pending() const {
    const verbs::qp_ring& ring = *_s.ring;
    if (ring.send_retired() == ring.send_taken()) {
        return false;
    }
    const send_op& op = _sends[ring.send_retired() & (ring.sq_capacity() - 1)];
    return op.done || op.local_error != IBV_WC_SUCCESS;
}

unsigned queue_pair::retire_sends(uint32_t budget, unsigned* units) {
    verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    uint32_t unpublished = 0;
    uint32_t advanced = 0;
    unsigned written = 0;  // completions written: the work `units` pays for
    // Only as many completions as the visit has units left for.
    auto may_write = [&] { return units == nullptr || written < *units; };
    for (uint32_t i = ring.send_retired(); i != ring.send_taken() && advanced < budget; ++i) {
        send_op& op = _sends[i & mask];
        if (op.local_error != IBV_WC_SUCCESS) {
            if (!may_write()) {
                break;
            }
            proto::cqe c{};
            c.wr_id = op.wqe.wr_id;
            c.status = op.local_error;
            c.opcode = proto::wc_opcode_of(op.wqe.opcode);
            c.qp_num = _s.qpn;
            ring.retire_send(unpublished + 1);
            unpublished = 0;
            ++advanced;
            ++written;
            complete(*_s.send_cq, c);
            enter_error();
            break;
        }
        if (!op.done || (op.signaled && !may_write())) {
            break;
        }
        for (uint8_t s = 0; s < op.sges; ++s) {
            op.pins[s].reset();
        }
        ++unpublished;
        ++advanced;
        if (op.signaled) {
            proto::cqe c{};
            c.wr_id = op.wqe.wr_id;
            c.status = IBV_WC_SUCCESS;
            c.opcode = proto::wc_opcode_of(op.wqe.opcode);
            c.byte_len = op.length;
            c.qp_num = _s.qpn;
            ring.retire_send(unpublished);
            unpublished = 0;
            ++written;
            complete(*_s.send_cq, c);
        }
    }
    if (unpublished > 0) {
        ring.retire_send(unpublished);
    }
    const uint32_t retired = ring.send_retired();
    if (advanced > 0 && static_cast<int32_t>(_send_index - retired) < 0) {
        _send_index = retired;
    }
    return written;
}

void queue_pair::run_timers(uint64_t now_ns) {
    if (_rnr_resume_ns != 0) {
        if (now_ns < _rnr_resume_ns) {
            return;
        }
        _rnr_resume_ns = 0;
        _last_progress_ns = now_ns;
    }
    if (_una == _next_psn) {
        return;
    }
    const auto timeout = local_ack_timeout_ns(_machine.attr().timeout);
    if (!timeout || now_ns - _last_progress_ns < *timeout) {
        return;
    }
    _stats.timeouts.add(1);
    if (_retries_left == 0) {
        fail_requester(_una, IBV_WC_RETRY_EXC_ERR);
        return;
    }
    --_retries_left;
    go_back(_una);
    _last_progress_ns = now_ns;
}

void queue_pair::fail_requester(uint32_t psn, ibv_wc_status status) {
    (void)psn;  // the oldest unfinished WR is the one that failed: WRs complete in order
    // Everything finished before it completes first, whatever the budget: once per failure,
    // at most a ring.
    retire_sends(UINT32_MAX);
    verbs::qp_ring& ring = *_s.ring;
    if (ring.send_retired() != ring.send_taken()) {
        send_op& op = _sends[ring.send_retired() & (ring.sq_capacity() - 1)];
        proto::cqe c{};
        c.wr_id = op.wqe.wr_id;
        c.status = status;
        c.opcode = proto::wc_opcode_of(op.wqe.opcode);
        c.qp_num = _s.qpn;
        for (uint8_t s = 0; s < op.sges; ++s) {
            op.pins[s].reset();
        }
        ring.retire_send(1);
        complete(*_s.send_cq, c);
    }
    enter_error();
}

}  // namespace jakiro::rnic
