// A QP across a restart of jakirod: its protocol state written into the state image
// (handover/image.hh) by the running process, and read back by its successor into a new queue_pair
// over the same shared rings, CQs and MRs.
//
// What is saved: everything the peer or the tenant has seen and cannot be asked for again.
// The attributes and the state machine; the PSNs (next, una, the sent high-water mark, the
// cursor of the next WQE, the responder's expected PSN and MSN); the retry counts; the ring
// indices the engine keeps to itself (what it took and retired: the shared consumer index is
// the tenant's to read, and a tenant may write it); the requester's copies of every WQE taken
// and not retired with their PSN ranges and progress; the responder's message in progress,
// the READs it owes and the atomic replay cache; DCQCN's rate; the policy generation the peer
// was admitted under; the counters, which never go down.
//
// What is not: pointers (a WQE's buffers, a WRITE's or READ's target are looked up again by key
// and address through the restored MR table, and pinned again, as when they were first
// taken), the frames in flight (lost in the gap and recovered as any loss on the fabric:
// go-back-N from una after the ACK timeout, duplicates re-ACKed or answered from the caches),
// and the timers, which restart at the restored QP's first poll or packet.
//
// The responder keeps its message in progress rather than rolling back to the message's first
// packet. A rollback would be simpler but is not correct for RC: the responder coalesces ACKs
// (one per poll, and the requester asks every ack_request_interval packets), so some packets of
// a long message may already be acknowledged, and acknowledgements are cumulative (IB spec
// 9.7.5.1): the requester has moved una past them and never sends them again. A responder whose
// expected PSN went back below una would NAK a sequence error the requester ignores as older
// than una, and the QP would end in IBV_WC_RETRY_EXC_ERR. Kept, the message simply continues at
// the expected PSN, with the bytes already placed in the tenant's memory (shared, so carried).
// UC and UD keep theirs the same way; UC still loses a message whose packets fell in the gap
// (IB spec 9.7.5.2.2 lets it), UD the datagrams that did.

#include <algorithm>
#include <cstddef>
#include <string>

#include "handover/image.hh"
#include "rnic/queue_pair.hh"
#include "rnic/queue_pair_parts.hh"
#include "rnic/wire/psn.hh"

namespace jakiro::rnic {

using namespace queue_pair_parts;

namespace {

// The QP record inside its caller's section: a tag, so that a record read at the wrong place is
// refused rather than misread, and its own version (bump it when the fields change).
constexpr uint32_t record_tag = 0x50514352;  // "RCQP"
constexpr uint16_t record_version = 1;

constexpr uint32_t counter_count = [] {
    uint32_t n = 0;
#define JAKIRO_QP_COUNTER(name) ++n;
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
    return n;
}();
// A reader takes at most this many counters (a newer writer's extra ones are skipped).
constexpr uint32_t max_counters = 256;

bool valid_psn(uint32_t psn) {
    return (psn & ~psn_mask) == 0;
}

// The enums of ibv_qp_attr, read as the bytes they are (handover::raw_field) before anything
// reads them as enums: each must lie within its type's range of values (states 0-7, MTUs 0-7,
// migration states 0-3).
bool enums_hold_values(const ibv_qp_attr& a) {
    using handover::raw_field;
    return raw_field<uint32_t>(a, offsetof(ibv_qp_attr, qp_state)) <= IBV_QPS_UNKNOWN &&
           raw_field<uint32_t>(a, offsetof(ibv_qp_attr, cur_qp_state)) <= IBV_QPS_UNKNOWN &&
           raw_field<uint32_t>(a, offsetof(ibv_qp_attr, path_mtu)) <= 7 &&
           raw_field<uint32_t>(a, offsetof(ibv_qp_attr, path_mig_state)) <= 3;
}

bool valid_mtu(uint32_t mtu) {
    return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

bool valid_status(uint32_t status) {
    return status <= IBV_WC_TM_RNDV_INCOMPLETE;
}

}  // namespace

void queue_pair::save(handover::image_writer& w) const {
    const verbs::qp_ring& ring = *_s.ring;
    w.u32(record_tag);
    w.u16(record_version);
    // Identity: restore() checks the setup it is given is this QP's.
    w.u32(_s.type);
    w.u32(_s.qpn);
    w.u32(ring.sq_capacity());
    w.u32(ring.rq_capacity());
    w.pod(_machine.attr());
    w.u32(_remote_ip_be);
    w.u32(_admitted_generation);
    w.boolean(_revoked);
    w.u16(_udp_src_port);
    w.u32(_mtu);
    w.u32(ring.send_taken());
    w.u32(ring.send_retired());
    w.u32(ring.recv_taken());
    w.u32(ring.recv_retired());

    // Requester.
    w.u32(_send_index);
    w.u32(_psn_cursor);
    w.u32(_next_psn);
    w.u32(_una);
    w.u32(_sent_high);
    w.u32(_packets_since_ack_req);
    w.u32(_retries_left);
    w.u32(_rnr_retries_left);
    w.boolean(_rnr_resume_ns != 0);
    w.u64(_rnr_wait_ns);
    w.boolean(_rewound_for_gap);
    w.boolean(_local.active);
    w.u32(_local.moved);
    const uint32_t mask = ring.sq_capacity() - 1;
    w.u32(ring.send_taken() - ring.send_retired());
    for (uint32_t i = ring.send_retired(); i != ring.send_taken(); ++i) {
        const send_op& op = _sends[i & mask];
        w.pod(op.wqe);
        w.u32(op.length);
        w.u32(op.first_psn);
        w.u32(op.packets);
        w.u32(op.read_received);
        w.u32(op.local_error);
        w.boolean(op.done);
        w.boolean(op.signaled);
        w.u8(op.sges);
    }

    // Responder.
    w.u32(_epsn);
    w.u32(_msn);
    w.boolean(_nak_sent);
    w.boolean(_ack_pending);
    w.u32(_ack_psn);
    w.boolean(_in_send);
    w.boolean(_recv_held);
    w.boolean(_discarding);
    if (_in_send || _recv_held) {
        w.pod(_recv.wqe);
        w.u32(_recv.length);
        w.u32(_recv.local_error);
        w.u8(_recv.sges);
        w.u32(_recv_offset);
    }
    w.boolean(_in_write);
    if (_in_write) {
        w.u32(_write_length);
        w.u32(_write_offset);
        w.boolean(_write_through_window);
        w.u32(_write_rkey);
        w.u64(_write_va);
    }
    // An atomic's queued ACK is not saved: the requester asks again, the cache answers.
    w.u32(static_cast<uint32_t>(
        std::count_if(_reads.begin(), _reads.end(), [](const read_job& j) { return !j.atomic; })));
    for (const read_job& job : _reads) {
        if (job.atomic) {
            continue;
        }
        w.u32(job.psn);
        w.u32(job.remaining_packets);
        w.u32(job.first_offset_packets);
        w.u32(job.total_packets);
        w.u32(job.length);
        w.u32(job.msn);
        w.u32(job.rkey);
        w.u64(job.va);
    }
    w.u32(_atomic_next);
    w.u32(static_cast<uint32_t>(_atomic_replies.size()));
    for (const atomic_reply& a : _atomic_replies) {
        w.u32(a.psn);
        w.u64(a.orig);
        w.boolean(a.valid);
    }
    w.boolean(_comm_established);
    w.boolean(_last_wqe_reached);

    // Congestion control: the rate and where recovery stands (its timers restart).
    w.u64(_line_rate_bps);
    w.u64(_rate.params().line_rate_bps);
    const qos::dcqcn_rate::carried c = _rate.carry();
    w.u64(c.rate_bps);
    w.u64(c.target_bps);
    w.u64(c.bytes_since);
    w.u64(c.cnps);
    w.u32(c.alpha);
    w.u32(c.time_stage);
    w.u32(c.byte_stage);
    w.u64(_measured_bps);
    w.boolean(_ceiling_lowered);

    w.u32(counter_count);
#define JAKIRO_QP_COUNTER(name) w.u64(_stats.name.read());
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
}

std::unique_ptr<queue_pair> queue_pair::restore(queue_pair_setup setup,
                                                handover::section_reader& r) {
    if (setup.ring == nullptr || setup.send_cq == nullptr || setup.recv_cq == nullptr ||
        setup.mrs == nullptr || !qp_type_supported(setup.type)) {
        r.fail("QP " + std::to_string(setup.qpn) + ": restored without its rings, CQs or MRs");
        if (setup.ring != nullptr) {
            setup.ring->leave_pages_to_successor();
        }
        return nullptr;
    }
    auto qp = std::make_unique<queue_pair>(std::move(setup));
    if (!qp->restore_fields(r) || !r.ok()) {
        if (r.ok()) {
            r.fail("QP " + std::to_string(qp->_s.qpn) + ": state that cannot be restored");
        }
        // The ring's memory is the tenant's and the previous process's, which keeps serving
        // after a refused take-over: never punch it out from here.
        qp->_s.ring->leave_pages_to_successor();
        return nullptr;
    }
    qp->publish_stats();
    return qp;
}

bool queue_pair::restore_fields(handover::section_reader& r) {
    const std::string who = "QP " + std::to_string(_s.qpn) + ": ";
    auto bad = [&](const std::string& why) {
        r.fail(who + why);
        return false;
    };
    verbs::qp_ring& ring = *_s.ring;
    if (r.u32() != record_tag) {
        return bad("not a QP record");
    }
    if (const uint16_t v = r.u16(); v != record_version) {
        return bad("QP record version " + std::to_string(v) + "; this binary reads version " +
                   std::to_string(record_version));
    }
    const uint32_t type = r.u32();
    const uint32_t qpn = r.u32();
    const uint32_t sq_cap = r.u32();
    const uint32_t rq_cap = r.u32();
    if (!r.ok()) {
        return false;
    }
    if (type != static_cast<uint32_t>(_s.type) || qpn != _s.qpn || sq_cap != ring.sq_capacity() ||
        rq_cap != ring.rq_capacity()) {
        return bad("the record is of another QP (type, number or ring capacities differ)");
    }
    const auto attr = r.pod<ibv_qp_attr>();
    if (r.ok() && !enums_hold_values(attr)) {
        return bad("attributes with a state, MTU or migration state out of range");
    }
    if (!r.ok() || !_machine.resume(attr)) {
        return r.ok() ? bad("attributes no modify could have set") : false;
    }
    _remote_ip_be = r.u32();
    // An IPv6 peer is its GID, which the attributes hold (modify() took it from there too).
    const uint8_t* dgid = attr.ah_attr.grh.dgid.raw;
    _remote_is_ipv6 = _s.type != IBV_QPT_UD && attr.ah_attr.is_global != 0 &&
                      !gid_is_ipv4_mapped(dgid) && gid_is_routable_ipv6(dgid);
    _remote_ip6 = {};
    if (_remote_is_ipv6) {
        std::memcpy(_remote_ip6.data(), dgid, _remote_ip6.size());
    }
    _frame_l2_l4 = frame_l2_l4_bytes_for(_remote_is_ipv6);
    _admitted_generation = r.u32();
    _revoked = r.boolean();
    _udp_src_port = r.u16();
    _mtu = r.u32();
    if (!valid_mtu(_mtu) || (_s.type == IBV_QPT_UD && _mtu != mtu_bytes(_s.limits.max_mtu))) {
        return bad("path MTU " + std::to_string(_mtu));
    }
    const uint32_t sq_taken = r.u32();
    const uint32_t sq_retired = r.u32();
    const uint32_t rq_taken = r.u32();
    const uint32_t rq_retired = r.u32();
    if (!r.ok()) {
        return false;
    }
    // A QP on an SRQ never takes from its own RQ, yet its completions retire slots there
    // (responder.cc): that RQ's indices mean nothing and may have crossed.
    if (!ring.resume(sq_taken, sq_retired, _s.srq != nullptr ? rq_retired : rq_taken, rq_retired)) {
        return bad("ring indices beyond the ring");
    }

    // Requester.
    _send_index = r.u32();
    _psn_cursor = r.u32();
    _next_psn = r.u32();
    _una = r.u32();
    _sent_high = r.u32();
    _packets_since_ack_req = r.u32();
    _retries_left = r.u32();
    _rnr_retries_left = r.u32();
    const bool rnr_waiting = r.boolean();
    _rnr_wait_ns = r.u64();
    _rewound_for_gap = r.boolean();
    _local.active = r.boolean();
    _local.moved = r.u32();
    if (!r.ok()) {
        return false;
    }
    if (!valid_psn(_psn_cursor) || !valid_psn(_next_psn) || !valid_psn(_una) ||
        !valid_psn(_sent_high) || _send_index - sq_retired > sq_taken - sq_retired ||
        _retries_left > 7 || _rnr_retries_left > 7) {
        return bad("requester state out of range");
    }
    // The wait itself restarts: it ends one RNR timer after the first poll (restart_clock).
    _rnr_resume_ns = rnr_waiting ? UINT64_MAX : 0;
    const uint32_t ops = r.count(ring.sq_capacity());
    if (!r.ok()) {
        return false;
    }
    if (ops != sq_taken - sq_retired) {
        return bad("send WQEs saved do not match the ring's indices");
    }
    const uint32_t mask = ring.sq_capacity() - 1;
    for (uint32_t i = sq_retired; i != sq_taken; ++i) {
        send_op& op = _sends[i & mask];
        op.wqe = r.pod<proto::send_wqe>();
        op.length = r.u32();
        op.first_psn = r.u32();
        op.packets = r.u32();
        op.read_received = r.u32();
        const uint32_t status = r.u32();
        op.done = r.boolean();
        op.signaled = r.boolean();
        op.sges = r.u8();
        if (!r.ok()) {
            return false;
        }
        if (!valid_status(status) || !valid_psn(op.first_psn) || op.read_received > op.packets) {
            return bad("send WQE state out of range");
        }
        op.local_error = static_cast<ibv_wc_status>(status);
        if (!repin_send(op)) {
            return bad("a send WQE that does not match its buffers");
        }
    }
    if (_local.active &&
        (_send_index == sq_taken || _local.moved > _sends[_send_index & mask].length)) {
        return bad("an intra-host message past its WQE");
    }

    // Responder.
    _epsn = r.u32();
    _msn = r.u32();
    _nak_sent = r.boolean();
    _ack_pending = r.boolean();
    _ack_psn = r.u32();
    _in_send = r.boolean();
    _recv_held = r.boolean();
    _discarding = r.boolean();
    if (!r.ok()) {
        return false;
    }
    if (!valid_psn(_epsn) || !valid_psn(_msn) || !valid_psn(_ack_psn)) {
        return bad("responder PSNs out of range");
    }
    bool lost_buffers = false;
    if (_in_send || _recv_held) {
        _recv.wqe = r.pod<proto::recv_wqe>();
        _recv.wr_id = _recv.wqe.wr_id;
        _recv.length = r.u32();
        const uint32_t status = r.u32();
        _recv.sges = r.u8();
        _recv_offset = r.u32();
        if (!r.ok()) {
            return false;
        }
        if (!valid_status(status) || _recv_offset > _recv.length) {
            return bad("receive in progress out of range");
        }
        _recv.local_error = static_cast<ibv_wc_status>(status);
        const uint8_t saved_sges = _recv.sges;
        const uint32_t saved_length = _recv.length;
        if (!repin_recv()) {
            lost_buffers = true;
        } else if (_recv.local_error == IBV_WC_SUCCESS &&
                   (_recv.sges != saved_sges || _recv.length != saved_length)) {
            return bad("a receive in progress that does not match its buffers");
        }
    }
    _in_write = r.boolean();
    if (_in_write) {
        _write_length = r.u32();
        _write_offset = r.u32();
        _write_through_window = r.boolean();
        _write_rkey = r.u32();
        _write_va = r.u64();
        if (!r.ok()) {
            return false;
        }
        if (_write_offset > _write_length) {
            return bad("WRITE in progress out of range");
        }
        lost_buffers = lost_buffers || !repin_write();
    }
    const uint32_t reads = r.count(_s.limits.max_qp_rd_atom + read_job_slack);
    for (uint32_t i = 0; i < reads && r.ok(); ++i) {
        read_job job;
        job.psn = r.u32();
        job.remaining_packets = r.u32();
        job.first_offset_packets = r.u32();
        job.total_packets = r.u32();
        job.length = r.u32();
        job.msn = r.u32();
        job.rkey = r.u32();
        job.va = r.u64();
        if (!r.ok()) {
            return false;
        }
        if (!valid_psn(job.psn) || job.total_packets != packets_for(job.length, _mtu) ||
            job.remaining_packets == 0 || job.remaining_packets > job.total_packets) {
            return bad("READ response state out of range");
        }
        // A READ whose memory went meanwhile is not answered from here: the requester asks
        // again and the duplicate is checked as it comes (replay_read).
        if (repin_read(job)) {
            _reads.push_back(std::move(job));
        }
    }
    _atomic_next = r.u32();
    if (r.u32() != _atomic_replies.size()) {
        return r.ok() ? bad("atomic replay cache of another size") : false;
    }
    for (atomic_reply& a : _atomic_replies) {
        a.psn = r.u32();
        a.orig = r.u64();
        a.valid = r.boolean();
    }
    _comm_established = r.boolean();
    _last_wqe_reached = r.boolean();

    // Congestion control.
    _line_rate_bps = r.u64();
    qos::dcqcn_params p = dcqcn_defaults();
    p.line_rate_bps = r.u64();
    qos::dcqcn_rate::carried c;
    c.rate_bps = r.u64();
    c.target_bps = r.u64();
    c.bytes_since = r.u64();
    c.cnps = r.u64();
    c.alpha = r.u32();
    c.time_stage = r.u32();
    c.byte_stage = r.u32();
    _measured_bps = r.u64();
    _ceiling_lowered = r.boolean();
    if (!r.ok()) {
        return false;
    }
    if (_line_rate_bps == 0 || p.line_rate_bps == 0) {
        return bad("no DCQCN line rate");
    }
    // Resumed at 0 for now; restart_clock resumes it again at the first poll's time.
    _rate = qos::dcqcn_rate::resumed(p, c, 0);

    const uint32_t counters = r.count(max_counters);
    uint32_t index = 0;
    auto next_counter = [&](stats::counter& counter) {
        if (index++ < counters) {
            counter.restore(r.u64());
        }
    };
#define JAKIRO_QP_COUNTER(name) next_counter(_stats.name);
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
    for (; index < counters && r.ok(); ++index) {
        (void)r.u64();  // a newer writer's counter this binary does not have
    }
    if (!r.ok()) {
        return false;
    }

    if (lost_buffers && _machine.state() != IBV_QPS_RESET) {
        // The memory of a message in progress is no longer registered (its MR went while the
        // message was under way, which the program may do only at its own risk): the message
        // cannot go on, and the QP fails as after any local protection error: in ERR, the
        // receive in progress and what is outstanding flushed.
        _in_write = false;
        _write_pin.reset();
        _machine.enter_error();
    }
    _clock_restarts = true;
    return true;
}

bool queue_pair::repin_send(send_op& op) {
    const uint8_t saved_sges = op.sges;
    const uint32_t saved_length = op.length;
    op.sges = 0;
    if (op.wqe.num_sge > proto::wqe_max_sge || op.wqe.inline_len > proto::wqe_max_inline ||
        saved_sges > proto::wqe_max_sge) {
        return false;
    }
    // Ops that never had buffers of their own: failed when taken, memory-window WRs (executed
    // when taken), inline data and ATOMIC WRITE (the bytes are in the WQE copy).
    if (op.local_error != IBV_WC_SUCCESS) {
        return true;  // completes with its error, moving nothing: no buffers to look up
    }
    if (op.packets == 0) {
        const bool window = op.wqe.opcode == IBV_WR_BIND_MW || op.wqe.opcode == IBV_WR_LOCAL_INV;
        return window && op.done && saved_sges == 0;
    }
    const uint32_t expected_packets = is_atomic(op.wqe) ? 1 : packets_for(saved_length, _mtu);
    if (op.packets != expected_packets) {
        return false;
    }
    if (is_atomic_write(op.wqe) ||
        ((op.wqe.send_flags & IBV_SEND_INLINE) != 0 && !needs_response(op.wqe))) {
        return saved_sges == 0 && saved_length == op.wqe.inline_len &&
               saved_length <= proto::wqe_max_inline;
    }
    // Looked up as when it was taken (check_local_buffers): the same keys, addresses and
    // rights, pinned again so that the MR stays charged to its vNIC while the WR is out.
    check_local_buffers(op);
    if (op.local_error != IBV_WC_SUCCESS) {
        // The MR went after the WR was taken (the program deregistered memory a WR still
        // names). A WR already finished completes as it finished; one still to move data
        // fails, as it would have had the MR gone before it was taken.
        for (uint8_t s = 0; s < op.sges; ++s) {
            op.pins[s].reset();
        }
        op.sges = 0;
        op.length = saved_length;
        if (op.done) {
            op.local_error = IBV_WC_SUCCESS;
        } else {
            op.local_error = IBV_WC_LOC_PROT_ERR;
        }
        return true;
    }
    return op.sges == saved_sges && op.length == saved_length;
}

bool queue_pair::repin_recv() {
    const proto::recv_wqe& w = _recv.wqe;
    const uint32_t pd = _s.srq != nullptr ? _s.srq->pd() : _s.pd;
    const uint32_t max_sge = _s.srq != nullptr ? _s.srq->max_sge() : _s.max_recv_sge;
    _recv.sges = 0;
    if (_recv.local_error != IBV_WC_SUCCESS) {
        _recv.length = 0;
        return true;  // refused when taken: nothing of it was ever looked up
    }
    // The same lookups as when the responder took it (responder.cc): a buffer that no longer
    // resolves fails the restore of this QP's message in progress.
    resolve_recv(w, pd, max_sge, _recv);
    if (_recv.local_error != IBV_WC_SUCCESS) {
        release_recv_pins();
        _recv.sges = 0;
        _recv.local_error = IBV_WC_SUCCESS;
        return false;
    }
    return true;
}

bool queue_pair::repin_write() {
    auto found = remote_target(_write_rkey, _write_va, _write_length, proto::access_remote_write);
    if (!found || found.bytes.size() != _write_length) {
        return false;
    }
    _write_data = found.bytes.data();
    _write_pin = std::move(found.mr);
    return true;
}

bool queue_pair::repin_read(read_job& job) {
    auto found = remote_target(job.rkey, job.va, job.length, proto::access_remote_read);
    if (!found || found.bytes.size() != job.length) {
        return false;
    }
    job.data = found.bytes.data();
    job.pin = std::move(found.mr);
    return true;
}

void queue_pair::restart_clock(uint64_t now_ns) {
    _clock_restarts = false;
    _last_progress_ns = now_ns;  // the ACK timeout runs afresh for what is in flight
    _first_unasked_ns = now_ns;
    if (_rnr_resume_ns != 0) {
        _rnr_resume_ns = now_ns + _rnr_wait_ns;
    }
    _window_start_ns = 0;  // the sending rate is measured again
    _window_bytes = 0;
    _last_cnp_ns = now_ns;  // a lowered ceiling stays for ceiling_restore_ns from here
    _rate = qos::dcqcn_rate::resumed(_rate.params(), _rate.carry(), now_ns);
}

}  // namespace jakiro::rnic
