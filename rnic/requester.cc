// The requester: send WQEs taken out of the ring once (local buffers checked and pinned, PSN
// range given), then sent as request packets within the send window (rxe_req.c).

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

unsigned queue_pair::fetch_sends(uint64_t now_ns, unsigned units) {
    if (units == 0) {
        return 0;  // not even a look at the ring: the tenant writes it, the line is cold here
    }
    verbs::qp_ring& ring = *_s.ring;
    const auto pending = ring.send_pending();
    if (pending.corrupt) {
        if (_s.events.raise != nullptr) {
            _s.events.raise(_s.events.context, _s.owner,
                            static_cast<uint32_t>(proto::event_type::qp_fatal), _s.qpn);
        }
        enter_error();
        return 0;
    }
    (void)now_ns;
    const uint32_t mask = ring.sq_capacity() - 1;
    // A bounded number per visit (each is a 512-byte copy and up to 16 MR lookups); the rest
    // waits for the next visit, and has_work() keeps the worker awake for it. No more than
    // the visit has units for: each WQE costs at least one, as a packet or as work alone.
    const uint32_t count = std::min({pending.count, wqe_budget, units});
    unsigned silent = 0;  // WQEs that send nothing: their cost is the fetch
    for (uint32_t i = 0; i < count; ++i) {
        send_op& op = _sends[ring.send_taken() & mask];
        ring.take_send(op.wqe);
        op.done = false;
        op.read_received = 0;
        op.local_error = IBV_WC_SUCCESS;
        op.signaled = _s.sq_sig_all || (op.wqe.send_flags & IBV_SEND_SIGNALED) != 0;
        op.sges = 0;
        op.length = 0;
        switch (op.wqe.opcode) {
            case IBV_WR_SEND:
            case IBV_WR_SEND_WITH_IMM:
                break;
            case IBV_WR_SEND_WITH_INV:
                if (!reliable()) {
                    op.local_error = IBV_WC_LOC_QP_OP_ERR;  // RC only (IB spec 9.4.1.1)
                }
                break;
            case IBV_WR_BIND_MW:
            case IBV_WR_LOCAL_INV:
                // Memory windows (queues/memory_window.hh): executed now, in order with the WRs
                // around them, and never on the wire; done at once or failed.
                op.local_error = verbs::execute_window_wr(*_s.mrs, op.wqe, _s.type, _s.pd, _s.qpn);
                op.done = op.local_error == IBV_WC_SUCCESS;
                op.first_psn = _psn_cursor;
                op.packets = 0;
                ++silent;
                continue;
            case IBV_WR_RDMA_WRITE:
            case IBV_WR_RDMA_WRITE_WITH_IMM:
                if (_s.type == IBV_QPT_UD) {
                    op.local_error = IBV_WC_LOC_QP_OP_ERR;
                }
                break;
            case IBV_WR_RDMA_READ:
            case IBV_WR_ATOMIC_CMP_AND_SWP:
            case IBV_WR_ATOMIC_FETCH_AND_ADD:
            case IBV_WR_ATOMIC_WRITE:
                if (!reliable()) {
                    op.local_error = IBV_WC_LOC_QP_OP_ERR;  // RC only (IB spec 3.7.2)
                }
                break;
            default:
                op.local_error = IBV_WC_LOC_QP_OP_ERR;
                break;
        }
        if (op.local_error == IBV_WC_SUCCESS && is_atomic_write(op.wqe)) {
            // Its value travels in the WQE whatever max_inline_data the QP asked for.
            if ((op.wqe.send_flags & IBV_SEND_INLINE) == 0 ||
                op.wqe.inline_len != atomic_write_bytes) {
                op.local_error = IBV_WC_LOC_LEN_ERR;
            } else {
                op.length = atomic_write_bytes;
            }
        } else if (op.local_error == IBV_WC_SUCCESS) {
            if ((op.wqe.send_flags & IBV_SEND_INLINE) != 0 && !needs_response(op.wqe)) {
                if (op.wqe.inline_len > _s.max_inline) {
                    op.local_error = IBV_WC_LOC_LEN_ERR;
                } else {
                    op.length = op.wqe.inline_len;
                }
            } else {
                check_local_buffers(op);
            }
        }
        if (op.local_error == IBV_WC_SUCCESS && is_atomic(op.wqe) && op.length != 8) {
            op.local_error = IBV_WC_LOC_LEN_ERR;  // the original value needs exactly 8 bytes
        }
        if (op.local_error == IBV_WC_SUCCESS && _s.type == IBV_QPT_UD && op.length > _mtu) {
            op.local_error = IBV_WC_LOC_LEN_ERR;  // a datagram is one packet
        }
        op.first_psn = _psn_cursor;
        op.packets = op.local_error == IBV_WC_SUCCESS ? packets_for(op.length, _mtu) : 0;
        if (op.packets > 0 && is_atomic(op.wqe)) {
            op.packets = 1;
        }
        silent += op.packets == 0 ? 1 : 0;
        _psn_cursor = psn_add(_psn_cursor, op.packets);
    }
    if (silent > 0) {
        _stats.silent_wrs.add(silent);
    }
    return silent;
}

void queue_pair::check_local_buffers(send_op& op) {
    if (op.wqe.num_sge > _s.max_send_sge || op.wqe.num_sge > proto::wqe_max_sge) {
        op.local_error = IBV_WC_LOC_LEN_ERR;
        return;
    }
    // A READ writes into its local buffers; everything else only reads them.
    const uint32_t access = needs_response(op.wqe) ? uint32_t{proto::access_local_write} : 0u;
    uint64_t total = 0;
    for (uint32_t i = 0; i < op.wqe.num_sge; ++i) {
        const proto::wqe_sge& sge = op.wqe.sg[i];
        if (sge.length == 0) {
            continue;
        }
        auto found = _s.mrs->find(_s.pd, sge.lkey, sge.addr, sge.length, access);
        if (!found) {
            op.local_error = verbs::wc_status_for(found.status, verbs::mr_side::local);
            return;
        }
        op.sge_data[op.sges] = found.bytes.data();
        op.sge_len[op.sges] = sge.length;
        op.pins[op.sges] = std::move(found.mr);
        ++op.sges;
        total += sge.length;
    }
    if (total > (1ull << 31)) {  // max_msg_sz
        op.local_error = IBV_WC_LOC_LEN_ERR;
        return;
    }
    op.length = static_cast<uint32_t>(total);
}

unsigned queue_pair::send_packets(packet_port& port, uint64_t now_ns, unsigned budget) {
    verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    if (reliable() && _una == _next_psn && _send_index != ring.send_taken()) {
        // Intra-host shortcut: nothing in flight as packets, the peer is a QP of this engine.
        queue_pair* peer = local_peer(port);
        if (peer != nullptr && !checked_with(*peer)) {
            if (_local.active) {
                return 0;  // mid-message: the engine checks the peer again within a poll or two
            }
            peer = nullptr;
        }
        if (peer == nullptr && _local.active) {
            // The peer went away (destroyed, ERR) mid-message: the packet path sends it whole,
            // and the retry count ends it as it would on the wire.
            _local = local_transfer{};
        }
        if (peer != nullptr) {
            _local_fallback = false;
            const unsigned moved = send_local(*peer, port, now_ns, budget);
            if (!_local_fallback) {
                return moved;
            }
        }
    }
    unsigned sent = 0;
    if (_rnr_resume_ns != 0 && _send_index != ring.send_taken()) {
        _held_back = true;  // the responder had no receive buffer: it may have none for long
    }
    while (sent < budget && _send_index != ring.send_taken() && _rnr_resume_ns == 0 &&
           psn_diff(_next_psn, _una) < static_cast<int32_t>(send_window_packets)) {
        send_op& op = _sends[_send_index & mask];
        if (op.local_error != IBV_WC_SUCCESS) {
            break;  // completes with its error once everything before it has
        }
        const auto k = static_cast<uint32_t>(psn_diff(_next_psn, op.first_psn));
        if (k >= op.packets) {  // nothing of it left to send (a READ resumed at its end)
            ++_send_index;
            continue;
        }
        if (needs_response(op.wqe) && initiator_depth_reached()) {
            break;  // max_rd_atomic READs and atomics already wait for their responses
        }
        if (!pacer_open(now_ns)) {
            _held_back = true;
            break;  // DCQCN: a CNP slowed this QP down
        }
        const bool was_idle = _una == _next_psn;
        // Only a packet that really leaves is charged to the pacer: a refusal by the vNIC's
        // QoS share or a full port must not eat the QP's rate.
        if (!emit_request(port, op, k, now_ns)) {
            break;
        }
        pacer_charge(now_ns, _mtu);
        if (was_idle) {
            _last_progress_ns = now_ns;  // the ACK timer runs from the first packet in flight
        }
        ++sent;
        if (is_read(op.wqe)) {
            _next_psn = psn_add(op.first_psn, op.packets);
            ++_send_index;
        } else {
            _next_psn = psn_add(_next_psn, 1);
            if (k + 1 == op.packets) {
                ++_send_index;
                op.done = !reliable();  // UC, UD: no acknowledgement to wait for
            }
        }
        if (psn_diff(_next_psn, _sent_high) > 0) {
            _sent_high = _next_psn;
        }
        if (!reliable()) {
            _una = _next_psn;
        }
    }
    return sent;
}

// The initiator depth (max_rd_atomic): READs and atomics sent and not yet answered, counted
// over the ops between the oldest unretired one and the next to send (at most the send queue,
// and only while a READ or atomic is next). The responder holds at most max_dest_rd_atomic of
// them (plus a little slack for duplicates) and refuses the rest; ib_read_bw across hosts
// ended in IBV_WC_RETRY_EXC_ERR once the window no longer kept the count down by chance.
// A QP set up with 0 still gets one at a time.
bool queue_pair::initiator_depth_reached() const {
    const verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    const uint32_t depth = std::max<uint32_t>(_machine.attr().max_rd_atomic, 1);
    uint32_t waiting = 0;
    for (uint32_t i = ring.send_retired(); i != _send_index; ++i) {
        const send_op& op = _sends[i & mask];
        if (!op.done && op.local_error == IBV_WC_SUCCESS && needs_response(op.wqe) &&
            ++waiting >= depth) {
            return true;
        }
    }
    return false;
}

bool queue_pair::emit_request(packet_port& port, send_op& op, uint32_t k, uint64_t now_ns) {
    const proto::send_wqe& w = op.wqe;
    const bool first = k == 0;
    const bool last = k + 1 == op.packets;
    const bool imm = has_imm(w);
    uint8_t code = 0;
    uint32_t payload = 0;
    const uint64_t offset = uint64_t{k} * _mtu;
    if (is_read(w)) {
        code = opcode::rc_read_request;
    } else if (is_atomic(w)) {
        code = w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? opcode::rc_fetch_add
                                                       : opcode::rc_compare_swap;
    } else if (is_atomic_write(w)) {
        code = opcode::rc_atomic_write;
        payload = atomic_write_bytes;
    } else {
        payload = static_cast<uint32_t>(std::min<uint64_t>(_mtu, op.length - offset));
        const bool write = w.opcode == IBV_WR_RDMA_WRITE || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
        if (first && last) {
            code = write ? (imm ? opcode::rc_write_only_imm : opcode::rc_write_only)
                         : (imm ? opcode::rc_send_only_imm : opcode::rc_send_only);
        } else if (first) {
            code = write ? opcode::rc_write_first : opcode::rc_send_first;
        } else if (last) {
            code = write ? (imm ? opcode::rc_write_last_imm : opcode::rc_write_last)
                         : (imm ? opcode::rc_send_last_imm : opcode::rc_send_last);
        } else {
            code = write ? opcode::rc_write_middle : opcode::rc_send_middle;
        }
        if (w.opcode == IBV_WR_SEND_WITH_INV && last) {
            code = first ? opcode::rc_send_only_inv : opcode::rc_send_last_inv;
        }
    }
    // The same operation on the QP's transport: UC and UD opcodes differ from RC's in the
    // top three bits only (IB spec 9.2.1).
    const uint8_t operation = code & 0x1F;
    if (_s.type == IBV_QPT_UC) {
        code = opcode::uc | operation;
    }
    ipv6_address ud_ip6{};
    bool ud_ipv6 = false;
    if (_s.type == IBV_QPT_UD) {
        code = opcode::ud | operation;
        std::memcpy(ud_ip6.data(), w.ud_remote_ip6, ud_ip6.size());
        ud_ipv6 = !is_unspecified(ud_ip6);
        // Over IPv6 only from a vNIC that has an IPv6 address, to a peer that can have one.
        const bool permitted = ud_ipv6 ? !is_unspecified(_s.local.ip6) &&
                                             gid_is_routable_ipv6(ud_ip6.data()) &&
                                             port.permits_datagram_ipv6(_s.local.vnic, ud_ip6, true)
                                       : port.permits_datagram(_s.local.vnic, w.ud_remote_ip, true);
        if (!permitted) {
            return true;  // the security groups refuse it (the port counted it): gone, unsent
        }
        set_datagram_family(ud_ipv6);
    }
    if (!port.admit(_s.local.vnic, frame_bytes(code, payload))) {
        return false;  // the vNIC's rdma share is spent for now: paced, not dropped
    }
    uint32_t payload_at = 0;
    uint8_t* frame = begin_packet(port, code, payload, payload_at);
    if (frame == nullptr) {
        _held_back = true;  // the port has no buffer: not the share, the port holds it back
        return false;
    }
    if (payload > 0) {
        if ((w.send_flags & IBV_SEND_INLINE) != 0) {
            std::memcpy(frame + payload_at, w.inline_data + offset, payload);
        } else {
            gather(op.sge_data.data(), op.sge_len.data(), op.sges, offset, frame + payload_at,
                   payload);
        }
    }
    bth_fields bth;
    bth.opcode = code;
    bth.dest_qp = _s.type == IBV_QPT_UD ? w.ud_remote_qpn : _machine.attr().dest_qp_num;
    bth.psn = psn_add(op.first_psn, k);
    bth.ack_req = asks_for_ack(op, last, now_ns);
    bth.solicited = last && (w.send_flags & IBV_SEND_SOLICITED) != 0;
    ext_fields ext;
    if (_s.type == IBV_QPT_UD) {
        // A WR Q_Key with its top bit set means "the QP's own" (IB spec 10.2.5).
        ext.qkey = (w.ud_remote_qkey & 0x8000'0000u) != 0 ? _machine.attr().qkey : w.ud_remote_qkey;
        ext.src_qp = _s.qpn;
        ext.imm_be = w.imm_data;
        if (ud_ipv6) {
            finish_packet_to_ipv6(port, ud_ip6, bth, ext, frame, payload);
        } else {
            finish_packet_to(port, w.ud_remote_ip, bth, ext, frame, payload);
        }
        return true;
    }
    ext.imm_be = w.imm_data;
    ext.inv_rkey = w.imm_data;  // SEND with Invalidate: the rkey, in host order
    ext.va = w.remote_addr + offset;
    ext.rkey = w.rkey;
    ext.dma_len = static_cast<uint32_t>(op.length - (is_read(w) ? offset : 0));
    if (is_atomic(w)) {
        // AtomicETH: FetchAdd carries the addend, CmpSwap the swap value and the compare.
        ext.swap_add = w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? w.compare_add : w.swap;
        ext.compare = w.compare_add;
    }
    finish_packet(port, bth, ext, frame, payload);
    return true;
}

// A message the responder's program sees complete (a SEND, a WRITE with immediate) always
// asks on its last packet: that program may destroy its QP on the completion, and an ACK
// left for a later packet would never come. A plain WRITE's last packet asks only when no
// ready op follows or the interval or the gap is due; the ACK that a later packet asks for
// covers it (ACKs are cumulative). READs and atomics never ask: their responses answer.
bool queue_pair::asks_for_ack(const send_op& op, bool last, uint64_t now_ns) {
    if (!reliable()) {
        return false;
    }
    if (needs_response(op.wqe)) {
        _packets_since_ack_req = 0;  // its response acknowledges every request before it
        return false;
    }
    if (_asking_again || _una == _next_psn) {
        _packets_since_ack_req = 0;  // asked, or everything before this packet is ACKed
    }
    if (_asking_again) {
        return true;
    }
    const bool due =
        _packets_since_ack_req + 1 >= ack_request_interval ||
        (_packets_since_ack_req > 0 && now_ns - _first_unasked_ns >= ack_request_gap_ns);
    const bool ask = due || (last && (op.wqe.opcode != IBV_WR_RDMA_WRITE || !next_op_follows()));
    if (ask) {
        _packets_since_ack_req = 0;
    } else if (_packets_since_ack_req++ == 0) {
        _first_unasked_ns = now_ns;
    }
    return ask;
}

bool queue_pair::next_op_follows() const {
    const verbs::qp_ring& ring = *_s.ring;
    const uint32_t next = _send_index + 1;  // send_packets emits _sends[_send_index]
    if (next == ring.send_taken()) {
        return false;
    }
    const send_op& op = _sends[next & (ring.sq_capacity() - 1)];
    return op.local_error == IBV_WC_SUCCESS && op.packets > 0 && !needs_response(op.wqe);
}

// Coalescing leaves a tail when the op that was to follow does not go after all (the vNIC's
// QoS share, the pacer or a full port holds it, the program moves the QP to SQD): its packets
// went without AckReq and the responder ACKs only when asked. Once nothing has followed them
// for ack_request_gap_ns, the last of them goes again with AckReq, a duplicate the responder
// answers with an ACK for everything up to it (IB spec 9.7.5.1.2). Once per tail: a lost
// probe or ACK is the retransmit timer's, as any lost ACK is.
unsigned queue_pair::ask_again_for_ack(packet_port& port, uint64_t now_ns) {
    if (!awaits_ack_probe() || now_ns - _first_unasked_ns < ack_request_gap_ns) {
        return 0;
    }
    const uint32_t psn = psn_sub(_next_psn, 1);
    const verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    for (uint32_t i = ring.send_retired(); i != ring.send_taken(); ++i) {
        send_op& op = _sends[i & mask];
        if (op.packets == 0 || psn_diff(psn, op.first_psn) < 0 ||
            psn_diff(psn, psn_add(op.first_psn, op.packets)) >= 0) {
            continue;
        }
        _asking_again = true;
        const bool sent =
            emit_request(port, op, static_cast<uint32_t>(psn_diff(psn, op.first_psn)), now_ns);
        _asking_again = false;
        return sent ? 1 : 0;  // refused (port full): the next poll asks again
    }
    _packets_since_ack_req = 0;  // rewound past it: what is sent again asks anew
    return 0;
}

}  // namespace jakiro::rnic
