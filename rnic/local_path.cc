// The intra-host path: a message between two QPs of this engine moved memory to memory, in
// slices of what one visit's packets would carry, with the wire's checks and completions.

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

namespace {

// Copies `len` bytes from position `offset` of a send WQE's data (inline or its SGEs).
template <typename Op>
void gather_op(const Op& op, uint64_t offset, std::byte* out, uint32_t len) {
    if ((op.wqe.send_flags & IBV_SEND_INLINE) != 0) {
        std::memcpy(out, op.wqe.inline_data + offset, len);
    } else {
        gather(op.sge_data.data(), op.sge_len.data(), op.sges, offset,
               reinterpret_cast<uint8_t*>(out), len);
    }
}

// Copies bytes [offset, offset + len) of a send WQE's message to the same place of a receive
// WQE's buffers.
template <typename Send, typename Recv>
void copy_to_recv(const Send& op, const Recv& r, uint64_t offset, uint32_t len) {
    uint64_t sge_start = 0;
    for (uint8_t i = 0; i < r.sges && len > 0; ++i) {
        const uint64_t sge_end = sge_start + r.sge_len[i];
        if (offset < sge_end) {
            const auto n = static_cast<uint32_t>(std::min<uint64_t>(len, sge_end - offset));
            gather_op(op, offset, r.sge_data[i] + (offset - sge_start), n);
            offset += n;
            len -= n;
        }
        sge_start = sge_end;
    }
}

}  // namespace

queue_pair* queue_pair::local_peer(packet_port& port) const {
    if (_engine == nullptr) {
        return nullptr;
    }
    const uint16_t slot = _remote_is_ipv6 ? port.local_vnic_ipv6(_s.local.vnic, _remote_ip6)
                                          : port.local_vnic(_s.local.vnic, _remote_ip_be);
    if (slot == packet_port::no_local_vnic) {
        return nullptr;
    }
    queue_pair* peer = _engine->find(slot, _machine.attr().dest_qp_num);
    // Only a peer connected back to this very QP (RCFT, both ways) and able to receive.
    const auto connected_back_to_us = [this](const queue_pair& p) {
        return _remote_is_ipv6 ? p._remote_is_ipv6 && p._remote_ip6 == _s.local.ip6
                               : !p._remote_is_ipv6 && p._remote_ip_be == _s.local.ip_be;
    };
    if (peer == nullptr || peer == this || !connected_back_to_us(*peer) ||
        peer->_machine.attr().dest_qp_num != _s.qpn || !peer->_machine.accepts_inbound()) {
        return nullptr;
    }
    return peer;
}

bool queue_pair::checked_with(const queue_pair& peer) const {
    // A peer not yet checked again after a policy change takes the packet path, where the
    // engine checks it first.
    return peer._admitted_generation == _engine->policy_generation() &&
           _admitted_generation == _engine->policy_generation();
}

// The ingress meter of the vNIC the data goes to (the peer's; ours for a READ) sees the
// message as the packets it would have been, and what the wire would do follows: above its rdma
// share the receiving QP's CNP pacer lets a CNP through and this QP, which drives the local
// exchange either way, cuts its rate (on_cnp) as if that CNP had come back over the fabric. So
// a peer on the same host cannot take more of a shaped vNIC's ingress than one across it.
void queue_pair::meter_local(queue_pair& receiver, packet_port& port, uint64_t now_ns,
                             uint32_t packets, uint32_t frames_bytes) {
    if (qos::ingress_meter* meter = port.receiving_meter(receiver._s.local.vnic)) {
        const auto verdict = meter->on_packet(now_ns, qos::traffic_class::rdma,
                                              frames_bytes + packets * qos::charged_bytes(0),
                                              qos::ecn::ect0, &receiver.cnp_pacer());
        if (verdict.send_cnp) {
            receiver._stats.cnps_sent.add(1);
            on_cnp(now_ns);
        }
    }
    if (dcqcn_slowed()) {
        pacer_charge(now_ns, frames_bytes);
    }
}

unsigned queue_pair::send_local(queue_pair& peer, packet_port& port, uint64_t now_ns,
                                unsigned budget) {
    verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    unsigned moved = 0;  // in packets' worth, the unit of the budget
    while (moved < budget && _send_index != ring.send_taken()) {
        send_op& op = _sends[_send_index & mask];
        if (op.local_error != IBV_WC_SUCCESS) {
            break;  // completes with its error in retire_sends
        }
        if (op.packets == 0) {  // a memory-window WR: executed when fetched
            ++_send_index;
            continue;
        }
        if (!_local.active) {
            // Both sides must be between messages at the same PSN; otherwise packets are (or
            // were) on the way and the packet path finishes what it started.
            if (_next_psn != op.first_psn || peer._epsn != op.first_psn || peer._in_send ||
                peer._in_write || peer._recv_held || !peer._reads.empty() || peer._ack_pending) {
                _local_fallback = moved == 0;
                break;
            }
        } else if (!peer.continues_local(op)) {
            // The peer was reset under the message: the packet path sends it whole.
            _local = local_transfer{};
            _local_fallback = moved == 0;
            break;
        }
        const uint32_t slice = std::min(op.length - _local.moved, (budget - moved) * _mtu);
        const uint32_t packets = std::max(1u, (slice + _mtu - 1) / _mtu);
        // Charged as the packets it replaces would have been.
        const uint32_t header = frame_bytes(opcode::rc_write_middle, 0);
        const uint32_t frames_bytes = packets * header + slice;
        if (dcqcn_slowed() && !pacer_open(now_ns)) {
            break;  // a CNP slowed this QP: its rate holds memory to memory too
        }
        if (!port.admit(_s.local.vnic, frames_bytes)) {
            break;
        }
        if (!_local.active) {
            ibv_wc_status status = IBV_WC_SUCCESS;
            const local_result r = peer.begin_local(op, *this, _local, status);
            if (r == local_result::rnr) {
                _stats.rnr_naks_received.add(1);
                break;  // no receive posted yet: the next poll tries again (the RNR wait)
            }
            if (r == local_result::failed) {
                fail_requester(op.first_psn, status);
                return moved + 1;
            }
            _local.active = true;
            if (r == local_result::done) {
                _local.moved = op.length;  // an atomic: executed whole
            }
        }
        if (_local.moved > 0 && _local.remote == nullptr) {
            // Restored mid-message (a restart keeps how far it got, not the peer's address):
            // the rkey is looked up again, and still_reaches then checks it as any slice.
            peer.resume_local(op, _local);
        }
        if (_local.moved > 0 && !peer.still_reaches(op, _local)) {
            // The peer's window (or MR) was invalidated, rebound or deregistered mid-message:
            // no byte moves through it once its owner let it go. What the wire's responder
            // would answer had the rkey been refused: a remote access error at both ends.
            if (peer._s.events.raise != nullptr) {
                peer._s.events.raise(peer._s.events.context, peer._s.owner,
                                     static_cast<uint32_t>(proto::event_type::qp_access_err),
                                     peer._s.qpn);
            }
            peer.enter_error();
            _local = local_transfer{};
            fail_requester(op.first_psn, IBV_WC_REM_ACCESS_ERR);
            return moved + 1;
        }
        meter_local(is_read(op.wqe) ? *this : peer, port, now_ns, packets, frames_bytes);
        if (_local.moved < op.length) {
            peer.place_local(op, _local, slice);
        }
        moved += packets;
        if (_local.moved < op.length) {
            continue;  // the rest on the next pass or visit: has_work() keeps the worker awake
        }
        peer.finish_local(op, *this, _local);
        _local = local_transfer{};
        const uint32_t end = psn_add(op.first_psn, op.packets);
        peer._epsn = end;
        peer._msn = psn_add(peer._msn, 1);
        if (needs_response(op.wqe)) {
            op.read_received = op.packets;
        }
        op.done = true;
        _next_psn = _una = _sent_high = end;
        ++_send_index;
        _stats.bytes_sent.add(op.length);
        peer._stats.bytes_received.add(op.length);
        port.count_local(_s.local.vnic, peer._s.local.vnic, op.length);
    }
    retire_sends();
    return moved;
}

void queue_pair::complete_local_recv(const send_op& op, const queue_pair& requester,
                                     ibv_wc_status status, uint32_t opcode, uint32_t len) {
    const proto::send_wqe& w = op.wqe;
    proto::cqe c = recv_completion(status, opcode, len);
    c.src_qp = requester._s.qpn;
    c.solicited = (w.send_flags & IBV_SEND_SOLICITED) != 0 ? 1 : 0;
    if (status == IBV_WC_SUCCESS && has_imm(w)) {
        c.imm_data = w.imm_data;
        c.wc_flags = IBV_WC_WITH_IMM;
    }
    if (status == IBV_WC_SUCCESS && w.opcode == IBV_WR_SEND_WITH_INV) {
        c.imm_data = w.imm_data;  // the invalidated rkey, host order
        c.wc_flags = IBV_WC_WITH_INV;
    }
    complete_recv(c);
}

queue_pair::local_result queue_pair::begin_local(const send_op& op, const queue_pair& requester,
                                                 local_transfer& t, ibv_wc_status& status) {
    const proto::send_wqe& w = op.wqe;
    auto fail = [&](proto::event_type event, ibv_wc_status requester_status) {
        if (_s.events.raise != nullptr) {
            _s.events.raise(_s.events.context, _s.owner, static_cast<uint32_t>(event), _s.qpn);
        }
        enter_error();
        status = requester_status;
        return local_result::failed;
    };
    switch (w.opcode) {
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_SEND_WITH_INV: {
            if (!take_recv(_recv)) {
                return local_result::rnr;
            }
            if (_recv.local_error != IBV_WC_SUCCESS) {
                complete_local_recv(op, requester, _recv.local_error, IBV_WC_RECV, 0);
                return fail(proto::event_type::qp_fatal, IBV_WC_REM_OP_ERR);
            }
            if (op.length > _recv.length) {
                complete_local_recv(op, requester, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0);
                return fail(proto::event_type::qp_req_err, IBV_WC_REM_INV_REQ_ERR);
            }
            if (w.opcode == IBV_WR_SEND_WITH_INV &&
                !verbs::invalidate_window(*_s.mrs, w.imm_data, _s.pd)) {
                complete_local_recv(op, requester, IBV_WC_LOC_QP_OP_ERR, IBV_WC_RECV, 0);
                return fail(proto::event_type::qp_req_err, IBV_WC_REM_INV_REQ_ERR);
            }
            // The peer's message in progress, as if its first packet had come: should the
            // peer fail before the end, its flush completes the receive WQE.
            _in_send = true;
            _recv_offset = 0;
            return local_result::started;
        }
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM: {
            auto found =
                remote_target(w.rkey, w.remote_addr, op.length, proto::access_remote_write);
            if (!found || !grants(IBV_ACCESS_REMOTE_WRITE)) {
                return fail(proto::event_type::qp_access_err, IBV_WC_REM_ACCESS_ERR);
            }
            // WRITE with immediate consumes a receive WQE: taken before any byte lands, so
            // an RNR leaves nothing half done. Held as the packet path holds one.
            if (has_imm(w)) {
                if (!take_recv(_recv)) {
                    return local_result::rnr;
                }
                _recv_held = true;
            }
            t.remote = found.bytes.data();
            t.pin = std::move(found.mr);
            return local_result::started;
        }
        case IBV_WR_RDMA_READ: {
            auto found = remote_target(w.rkey, w.remote_addr, op.length, proto::access_remote_read);
            if (!found || !grants(IBV_ACCESS_REMOTE_READ)) {
                return fail(proto::event_type::qp_access_err, IBV_WC_REM_ACCESS_ERR);
            }
            t.remote = found.bytes.data();
            t.pin = std::move(found.mr);
            return local_result::started;
        }
        case IBV_WR_ATOMIC_WRITE: {
            if (w.remote_addr % atomic_write_bytes != 0) {
                return fail(proto::event_type::qp_req_err, IBV_WC_REM_INV_REQ_ERR);
            }
            auto found = _s.mrs->find_remote(_s.pd, _s.qpn, w.rkey, w.remote_addr,
                                             atomic_write_bytes, proto::access_remote_write);
            if (!found || !grants(IBV_ACCESS_REMOTE_WRITE)) {
                return fail(proto::event_type::qp_access_err, IBV_WC_REM_ACCESS_ERR);
            }
            store_atomic_write(found.bytes.data(), w.inline_data);
            return local_result::done;
        }
        case IBV_WR_ATOMIC_CMP_AND_SWP:
        case IBV_WR_ATOMIC_FETCH_AND_ADD: {
            if (w.remote_addr % 8 != 0) {
                return fail(proto::event_type::qp_req_err, IBV_WC_REM_INV_REQ_ERR);
            }
            auto found = _s.mrs->find_remote(_s.pd, _s.qpn, w.rkey, w.remote_addr, 8,
                                             proto::access_remote_atomic);
            if (!found || !grants(IBV_ACCESS_REMOTE_ATOMIC)) {
                return fail(proto::event_type::qp_access_err, IBV_WC_REM_ACCESS_ERR);
            }
            const uint64_t orig =
                execute_atomic(found.bytes.data(), w.opcode, w.compare_add, w.swap);
            scatter(op.sge_data.data(), op.sge_len.data(), op.sges, 0,
                    reinterpret_cast<const uint8_t*>(&orig), sizeof(orig));
            return local_result::done;
        }
        default:
            return fail(proto::event_type::qp_req_err, IBV_WC_REM_INV_REQ_ERR);
    }
}

void queue_pair::resume_local(const send_op& op, local_transfer& t) const {
    const bool write =
        op.wqe.opcode == IBV_WR_RDMA_WRITE || op.wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (!write && !is_read(op.wqe)) {
        return;  // a SEND lands in the receive WQE the peer restored with its message
    }
    const uint32_t access = is_read(op.wqe) ? uint32_t{proto::access_remote_read}
                                            : uint32_t{proto::access_remote_write};
    auto found = remote_target(op.wqe.rkey, op.wqe.remote_addr, op.length, access);
    if (found) {
        t.remote = found.bytes.data();
        t.pin = std::move(found.mr);
    }
}

bool queue_pair::still_reaches(const send_op& op, const local_transfer& t) const {
    const bool write =
        op.wqe.opcode == IBV_WR_RDMA_WRITE || op.wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (!write && !is_read(op.wqe)) {
        return true;  // a SEND lands in a receive WQE taken once; an atomic moves whole
    }
    // The rest of the message, looked up again as its first slice was: the same memory must
    // still be granted (a window rebound elsewhere names other bytes).
    const uint32_t access = is_read(op.wqe) ? uint32_t{proto::access_remote_read}
                                            : uint32_t{proto::access_remote_write};
    const auto found =
        remote_target(op.wqe.rkey, op.wqe.remote_addr + t.moved, op.length - t.moved, access);
    return found && found.bytes.data() == t.remote + t.moved;
}

bool queue_pair::continues_local(const send_op& op) const {
    switch (op.wqe.opcode) {
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_SEND_WITH_INV:
            return _in_send;
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            return _recv_held;
        default:
            return true;  // the requester holds the peer's memory pinned
    }
}

void queue_pair::place_local(const send_op& op, local_transfer& t, uint32_t len) {
    switch (op.wqe.opcode) {
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_SEND_WITH_INV:
            copy_to_recv(op, _recv, t.moved, len);
            _recv_offset += len;
            break;
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            gather_op(op, t.moved, t.remote + t.moved, len);
            break;
        case IBV_WR_RDMA_READ:
            scatter(op.sge_data.data(), op.sge_len.data(), op.sges, t.moved,
                    reinterpret_cast<const uint8_t*>(t.remote + t.moved), len);
            break;
        default:
            break;
    }
    t.moved += len;
}

void queue_pair::finish_local(const send_op& op, const queue_pair& requester, local_transfer& t) {
    switch (op.wqe.opcode) {
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_SEND_WITH_INV:
            _in_send = false;
            complete_local_recv(op, requester, IBV_WC_SUCCESS, IBV_WC_RECV, op.length);
            break;
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            _recv_held = false;
            complete_local_recv(op, requester, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
                                op.length);
            break;
        default:
            break;
    }
    t.pin.reset();
}

}  // namespace jakiro::rnic
