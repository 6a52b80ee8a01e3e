#include "rnic/rc_qp.hh"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "rnic/engine.hh"
#include "rnic/packet_port.hh"
#include "rnic/queues/memory_window.hh"
#include "rnic/timers.hh"
#include "rnic/wire/aeth.hh"
#include "rnic/wire/psn.hh"
#include "verbs_abi/wc_opcode.hh"

namespace jakiro::roce {

namespace {

namespace proto = verbs_proto;

// Unacknowledged packets a requester keeps in flight per QP: enough to cover the RTT of a
// software path, small enough that one QP cannot drain the mbuf pool.
constexpr uint32_t send_window_packets = 1024;
// The requester asks for an ACK at least this often inside long messages, so the window
// opens before the message ends.
constexpr uint32_t ack_request_interval = 64;
// READs the responder queues beyond max_dest_rd_atomic (re-executed duplicates).
constexpr std::size_t read_job_slack = 4;
// What a UD receive buffer holds before the payload: the GRH, or on RoCE v2 over IPv4 its
// 40-byte area (IB spec 11.4.1.2, and what every RoCE v2 NIC delivers).
constexpr uint32_t ud_grh_bytes = 40;
// What RoCE NICs (mlx5's CQE l3 header type) report in a UD receive's wc.sl: the network
// header the datagram came with, 0 IB GRH, 1 RoCE v2 over IPv6, 2 RoCE v2 over IPv4. UCX
// (uct_ud_iface_check_grh) reads it to find the destination: with 2 the IPv4 address at bytes
// 36-39 of the GRH area, otherwise bytes 24-39 as a GID, which would drop every datagram.
constexpr uint8_t ud_network_header_roce_v2_ipv4 = 2;

bool gid_is_ipv4_mapped(const uint8_t* gid) {
    static constexpr uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(gid, prefix, sizeof(prefix)) == 0;
}

// Copies `len` bytes from position `offset` of a gather list into `out`.
void gather(const std::byte* const* data, const uint32_t* lens, uint8_t n, uint64_t offset,
            uint8_t* out, uint32_t len) {
    for (uint8_t i = 0; i < n && len > 0; ++i) {
        if (offset >= lens[i]) {
            offset -= lens[i];
            continue;
        }
        const uint32_t chunk = std::min<uint64_t>(len, lens[i] - offset);
        std::memcpy(out, data[i] + offset, chunk);
        out += chunk;
        len -= chunk;
        offset = 0;
    }
}

// Copies `len` bytes into position `offset` of a scatter list.
void scatter(std::byte* const* data, const uint32_t* lens, uint8_t n, uint64_t offset,
             const uint8_t* in, uint32_t len) {
    for (uint8_t i = 0; i < n && len > 0; ++i) {
        if (offset >= lens[i]) {
            offset -= lens[i];
            continue;
        }
        const uint32_t chunk = std::min<uint64_t>(len, lens[i] - offset);
        std::memcpy(data[i] + offset, in, chunk);
        in += chunk;
        len -= chunk;
        offset = 0;
    }
}

uint32_t packets_for(uint64_t length, uint32_t mtu) {
    return length == 0 ? 1 : static_cast<uint32_t>((length + mtu - 1) / mtu);
}

bool is_read(const proto::send_wqe& w) {
    return w.opcode == IBV_WR_RDMA_READ;
}

bool is_atomic(const proto::send_wqe& w) {
    return w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// IBTA 1.5 ATOMIC WRITE: 8 bytes the responder places as one store; the shim carries them in
// the WQE (ibv_wr_atomic_write takes the value, not a buffer), ACKed as a WRITE is.
bool is_atomic_write(const proto::send_wqe& w) {
    return w.opcode == IBV_WR_ATOMIC_WRITE;
}
constexpr uint32_t atomic_write_bytes = 8;

// Places an ATOMIC WRITE's 8 bytes with one store: a program reading the word at the same
// time sees the old or the new value, never a mix (a memcpy gives no such promise).
void store_atomic_write(std::byte* at, const uint8_t* value) {
    uint64_t word = 0;
    std::memcpy(&word, value, sizeof(word));
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at))
        .store(word, std::memory_order_release);
}

// Operations whose completion needs a response from the responder (READ data, atomic ACK):
// an ACK for a later PSN does not complete them.
bool needs_response(const proto::send_wqe& w) {
    return is_read(w) || is_atomic(w);
}

// Executes one atomic on 8 bytes of registered memory; returns the value found there. The
// engine thread runs every QP of the host, so atomics are atomic with respect to each other;
// std::atomic_ref also keeps them atomic with respect to the CPU of a program touching the
// word at the same time.
uint64_t execute_atomic(std::byte* at, uint32_t wr_opcode, uint64_t compare_add, uint64_t swap) {
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(at));
    if (wr_opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        return word.fetch_add(compare_add, std::memory_order_seq_cst);
    }
    uint64_t expected = compare_add;
    word.compare_exchange_strong(expected, swap, std::memory_order_seq_cst);
    return expected;  // the old value, whether or not it was swapped
}

bool has_imm(const proto::send_wqe& w) {
    return w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

}  // namespace

namespace {
// Where DCQCN starts and what it recovers to: above anything one software worker sends, so it
// never limits a QP that no receiver complains about.
constexpr uint64_t dcqcn_line_rate_bps = 25'000'000'000;
// After this long without a CNP a lowered ceiling goes back to the line rate.
constexpr uint64_t ceiling_restore_ns = 10'000'000;

qos::dcqcn_params dcqcn_defaults() {
    qos::dcqcn_params p;
    p.line_rate_bps = dcqcn_line_rate_bps;
    return p;
}
}  // namespace

rc_qp::rc_qp(rc_qp_setup setup)
    : _s(std::move(setup)),
      _machine(_s.type, _s.limits),
      _sends(_s.ring->sq_capacity()),
      _rate(dcqcn_defaults(), 0) {
    _reads.reserve(_s.limits.max_qp_rd_atom + read_job_slack);
    if (_s.type == IBV_QPT_UD) {
        // A UD QP has no path: its datagrams are at most the port's MTU, and its source
        // port (ECMP entropy) is fixed per QP.
        _mtu = mtu_bytes(_s.limits.max_mtu);
        _udp_src_port = static_cast<uint16_t>(0xC000 | (_s.qpn & 0x3FFF));
    }
}

void rc_qp::on_cnp(uint64_t now_ns) {
    _stats.cnps_received.fetch_add(1, std::memory_order_relaxed);
    // DCQCN cuts relative to the current rate, which on hardware is what the QP sends. A
    // software QP rarely sends at its nominal line rate, so the first cuts would not bite:
    // bring the ceiling down to a little above what the QP really sends, then cut.
    if (_measured_bps > 0 && _rate.rate_bps() > _measured_bps + _measured_bps / 4) {
        _rate.set_line_rate(now_ns, std::max<uint64_t>(_measured_bps + _measured_bps / 4,
                                                       _rate.params().min_rate_bps));
        _ceiling_lowered = true;
    }
    _rate.on_cnp(now_ns);
    _last_cnp_ns = now_ns;
}

bool rc_qp::pacer_open(uint64_t now_ns) {
    if (_ceiling_lowered && now_ns - _last_cnp_ns > ceiling_restore_ns) {
        // Quiet for a while: let recovery climb back towards the nominal line rate.
        _rate.set_line_rate(now_ns, dcqcn_line_rate_bps);
        _ceiling_lowered = false;
    }
    return _rate.grant(now_ns) > 0;
}

void rc_qp::pacer_charge(uint64_t now_ns, uint32_t frame_len) {
    _rate.on_sent(frame_len);
    // What the QP really sends, averaged over ~100 µs windows (EWMA, 1/4 per window).
    _window_bytes += frame_len;
    if (_window_start_ns == 0) {
        _window_start_ns = now_ns;
    } else if (now_ns - _window_start_ns >= 100'000) {
        const uint64_t bps = _window_bytes * 8'000'000'000 / (now_ns - _window_start_ns);
        _measured_bps = _measured_bps == 0 ? bps : (_measured_bps * 3 + bps) / 4;
        _window_bytes = 0;
        _window_start_ns = now_ns;
    }
}

void rc_qp::send_cnp(packet_port& port) {
    uint32_t payload_at = 0;
    uint8_t* frame = begin_packet(port, opcode::cnp, 0, payload_at);
    if (frame == nullptr) {
        return;
    }
    bth_fields bth;
    bth.opcode = opcode::cnp;
    bth.dest_qp = _machine.attr().dest_qp_num;  // the QP that sends too fast
    ext_fields ext;
    finish_packet(port, bth, ext, frame, 0);
    _stats.cnps_sent.fetch_add(1, std::memory_order_relaxed);
}

rc_qp::~rc_qp() = default;

int rc_qp::modify(const ibv_qp_attr& attr, int mask) {
    if ((mask & IBV_QP_AV) != 0 &&
        (!attr.ah_attr.is_global || !gid_is_ipv4_mapped(attr.ah_attr.grh.dgid.raw))) {
        return EINVAL;  // RoCE v2 over IPv4: the peer is an IPv4-mapped GID
    }
    const ibv_qp_state before = _machine.state();
    if (const int error = _machine.modify(attr, mask); error != 0) {
        return error;
    }
    const ibv_qp_attr& a = _machine.attr();
    if ((mask & IBV_QP_AV) != 0) {
        std::memcpy(&_remote_ip_be, a.ah_attr.grh.dgid.raw + 12, 4);
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
    return 0;
}

void rc_qp::query(ibv_qp_attr& attr, ibv_qp_cap& cap, bool& sq_sig_all) const {
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

bool rc_qp::has_work() const {
    const ibv_qp_state st = _machine.state();
    if (_ack_pending || !_reads.empty()) {
        return true;
    }
    if (st == IBV_QPS_ERR) {
        return flush_pending();
    }
    if (st != IBV_QPS_RTS) {
        return false;
    }
    return _s.ring->send_pending().count > 0 || retire_pending() ||
           (_send_index != _s.ring->send_taken() && _rnr_resume_ns == 0 &&
            psn_diff(_next_psn, _una) < static_cast<int32_t>(send_window_packets));
}

unsigned rc_qp::poll(packet_port& port, uint64_t now_ns, unsigned budget) {
    const ibv_qp_state st = _machine.state();
    if (st == IBV_QPS_ERR) {
        flush();
        publish_stats();
        return 0;
    }
    if (st == IBV_QPS_RESET || st == IBV_QPS_INIT) {
        return 0;
    }
    unsigned sent = 0;
    if (_ack_pending) {
        send_ack(port, syndrome_ack(credits_invalid), _ack_psn);
        _ack_pending = false;
        ++sent;
    }
    sent += send_read_responses(port, now_ns, budget);
    if (st == IBV_QPS_RTS && _machine.state() == IBV_QPS_RTS) {
        fetch_sends(now_ns);
        retire_sends();  // a WR that failed locally completes as soon as its turn comes
        if (reliable()) {
            run_timers(now_ns);
        }
        if (_machine.state() == IBV_QPS_RTS && sent < budget) {
            sent += send_packets(port, now_ns, budget - sent);
            if (!reliable()) {
                retire_sends();  // nothing to wait for: sent is done
            }
        }
    }
    if (_machine.state() == IBV_QPS_ERR) {
        flush();
    }
    publish_stats();
    return sent;
}

// ---------------------------------------------------------------- requester

void rc_qp::fetch_sends(uint64_t now_ns) {
    verbs::qp_ring& ring = *_s.ring;
    const auto pending = ring.send_pending();
    if (pending.corrupt) {
        if (_s.events.raise != nullptr) {
            _s.events.raise(_s.events.context, _s.owner,
                            static_cast<uint32_t>(proto::event_type::qp_fatal), _s.qpn);
        }
        enter_error();
        return;
    }
    (void)now_ns;
    const uint32_t mask = ring.sq_capacity() - 1;
    // A bounded number per visit (each is a 512-byte copy and up to 16 MR lookups); the rest
    // waits for the next visit, and has_work() keeps the worker awake for it.
    const uint32_t count = std::min(pending.count, wqe_budget);
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
                // Memory windows (verbs/memory_window.hh): executed now, in order with the WRs
                // around them, and never on the wire; done at once or failed.
                op.local_error = verbs::execute_window_wr(*_s.mrs, op.wqe, _s.type, _s.pd, _s.qpn);
                op.done = op.local_error == IBV_WC_SUCCESS;
                op.first_psn = _psn_cursor;
                op.packets = 0;
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
        _psn_cursor = psn_add(_psn_cursor, op.packets);
    }
}

void rc_qp::check_local_buffers(send_op& op) {
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

unsigned rc_qp::send_packets(packet_port& port, uint64_t now_ns, unsigned budget) {
    verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    if (reliable() && _una == _next_psn && _send_index != ring.send_taken()) {
        // Intra-host shortcut: nothing in flight as packets, the peer is a QP of this engine.
        rc_qp* peer = local_peer(port);
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
            const unsigned moved = send_local(*peer, port, budget);
            if (!_local_fallback) {
                return moved;
            }
        }
    }
    unsigned sent = 0;
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
        if (!pacer_open(now_ns)) {
            break;  // DCQCN: a CNP slowed this QP down
        }
        const bool was_idle = _una == _next_psn;
        // Only a packet that really leaves is charged to the pacer: a refusal by the vNIC's
        // QoS share or a full port must not eat the QP's rate.
        if (!emit_request(port, op, k)) {
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

bool rc_qp::emit_request(packet_port& port, send_op& op, uint32_t k) {
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
    } else if (_s.type == IBV_QPT_UD) {
        code = opcode::ud | operation;
        if (!port.permits_datagram(_s.local.vnic, w.ud_remote_ip, true)) {
            return true;  // the security groups refuse it (the port counted it): gone, unsent
        }
    }
    if (!port.admit(_s.local.vnic, frame_bytes(code, payload))) {
        return false;  // the vNIC's rdma share is spent for now: paced, not dropped
    }
    uint32_t payload_at = 0;
    uint8_t* frame = begin_packet(port, code, payload, payload_at);
    if (frame == nullptr) {
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
    bth.ack_req = reliable() && !needs_response(w) && (last || (k + 1) % ack_request_interval == 0);
    bth.solicited = last && (w.send_flags & IBV_SEND_SOLICITED) != 0;
    ext_fields ext;
    if (_s.type == IBV_QPT_UD) {
        // A WR Q_Key with its top bit set means "the QP's own" (IB spec 10.2.5).
        ext.qkey = (w.ud_remote_qkey & 0x8000'0000u) != 0 ? _machine.attr().qkey : w.ud_remote_qkey;
        ext.src_qp = _s.qpn;
        ext.imm_be = w.imm_data;
        finish_packet_to(port, w.ud_remote_ip, bth, ext, frame, payload);
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

// ---------------------------------------------------------------- intra-host shortcut

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

rc_qp* rc_qp::local_peer(packet_port& port) const {
    if (_engine == nullptr) {
        return nullptr;
    }
    const uint16_t slot = port.local_vnic(_s.local.vnic, _remote_ip_be);
    if (slot == packet_port::no_local_vnic) {
        return nullptr;
    }
    rc_qp* peer = _engine->find(slot, _machine.attr().dest_qp_num);
    // Only a peer connected back to this very QP (RCFT, both ways) and able to receive.
    if (peer == nullptr || peer == this || peer->_remote_ip_be != _s.local.ip_be ||
        peer->_machine.attr().dest_qp_num != _s.qpn || !peer->_machine.accepts_inbound()) {
        return nullptr;
    }
    return peer;
}

bool rc_qp::checked_with(const rc_qp& peer) const {
    // A peer not yet checked again after a policy change takes the packet path, where the
    // engine checks it first.
    return peer._admitted_generation == _engine->policy_generation() &&
           _admitted_generation == _engine->policy_generation();
}

unsigned rc_qp::send_local(rc_qp& peer, packet_port& port, unsigned budget) {
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
        if (!port.admit(_s.local.vnic, packets * frame_bytes(opcode::rc_write_middle, 0) + slice)) {
            break;
        }
        if (!_local.active) {
            ibv_wc_status status = IBV_WC_SUCCESS;
            const local_result r = peer.begin_local(op, *this, _local, status);
            if (r == local_result::rnr) {
                _stats.rnr_naks_received.fetch_add(1, std::memory_order_relaxed);
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
        _stats.bytes_sent.fetch_add(op.length, std::memory_order_relaxed);
        peer._stats.bytes_received.fetch_add(op.length, std::memory_order_relaxed);
        port.count_local(_s.local.vnic, peer._s.local.vnic, op.length);
    }
    retire_sends();
    return moved;
}

void rc_qp::complete_local_recv(recv_op& r, const send_op& op, const rc_qp& requester,
                                ibv_wc_status status, uint32_t opcode, uint32_t len) {
    const proto::send_wqe& w = op.wqe;
    proto::cqe c{};
    c.wr_id = r.wr_id;
    c.status = status;
    c.opcode = opcode;
    c.byte_len = len;
    c.qp_num = _s.qpn;
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
    for (uint8_t s = 0; s < r.sges; ++s) {
        r.pins[s].reset();
    }
    _s.ring->retire_recv(1);
    complete(*_s.recv_cq, c);
}

rc_qp::local_result rc_qp::begin_local(const send_op& op, const rc_qp& requester, local_transfer& t,
                                       ibv_wc_status& status) {
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
                complete_local_recv(_recv, op, requester, _recv.local_error, IBV_WC_RECV, 0);
                return fail(proto::event_type::qp_fatal, IBV_WC_REM_OP_ERR);
            }
            if (op.length > _recv.length) {
                complete_local_recv(_recv, op, requester, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0);
                return fail(proto::event_type::qp_req_err, IBV_WC_REM_INV_REQ_ERR);
            }
            if (w.opcode == IBV_WR_SEND_WITH_INV &&
                !verbs::invalidate_window(*_s.mrs, w.imm_data, _s.pd)) {
                complete_local_recv(_recv, op, requester, IBV_WC_LOC_QP_OP_ERR, IBV_WC_RECV, 0);
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

bool rc_qp::continues_local(const send_op& op) const {
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

void rc_qp::place_local(const send_op& op, local_transfer& t, uint32_t len) {
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

void rc_qp::finish_local(const send_op& op, const rc_qp& requester, local_transfer& t) {
    switch (op.wqe.opcode) {
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_SEND_WITH_INV:
            _in_send = false;
            complete_local_recv(_recv, op, requester, IBV_WC_SUCCESS, IBV_WC_RECV, op.length);
            break;
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            _recv_held = false;
            complete_local_recv(_recv, op, requester, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
                                op.length);
            break;
        default:
            break;
    }
    t.pin.reset();
}

bool rc_qp::psn_sent(uint32_t psn) const {
    return psn_diff(psn, _una) >= 0 && psn_diff(psn, _sent_high) < 0;
}

void rc_qp::on_ack_psn(uint32_t psn, uint64_t now_ns) {
    if (!psn_sent(psn)) {
        return;  // an old ACK, or one for something never sent
    }
    const uint32_t old_una = _una;
    bool rewound_now = false;
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
            // The responder has executed it, yet responses are missing (lost, or still on
            // the way behind this ACK): ask again for the rest, once until progress. An
            // atomic asked again is answered from the responder's cache, never re-executed.
            _una = psn_add(op.first_psn, op.read_received);
            if (!_rewound_for_gap) {
                go_back(_una);
                _rewound_for_gap = rewound_now = true;
            }
            break;
        }
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

void rc_qp::on_response(const roce_packet& p, packet_port& port, uint64_t now_ns) {
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
        _stats.rnr_naks_received.fetch_add(1, std::memory_order_relaxed);
        if (_machine.attr().rnr_retry != rnr_retry_infinite) {
            if (_rnr_retries_left == 0) {
                fail_requester(psn, IBV_WC_RNR_RETRY_EXC_ERR);
                return;
            }
            --_rnr_retries_left;
        }
        go_back(psn);
        _rnr_resume_ns = now_ns + uint64_t{rnr_timer_us(syndrome.value)} * 1000;
        return;
    }
    if (syndrome.kind != aeth_kind::nak) {
        return;
    }
    _stats.naks_received.fetch_add(1, std::memory_order_relaxed);
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

rc_qp::send_op* rc_qp::op_answered_by(uint32_t psn) {
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

void rc_qp::response_progress(uint32_t psn, uint64_t now_ns) {
    _una = psn_add(psn, 1);
    _last_progress_ns = now_ns;
    _retries_left = _machine.attr().retry_cnt;
    _rewound_for_gap = false;
    if (psn_diff(_una, _next_psn) > 0) {
        move_send_pointer(_una);
    }
    retire_sends();
}

void rc_qp::on_read_response(const roce_packet& p, uint64_t now_ns) {
    const uint32_t psn = p.psn;
    if (!psn_sent(psn)) {
        _stats.duplicates.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    if (psn != _una) {
        // Earlier responses were lost: ask again from the first missing one, once per gap.
        _stats.out_of_sequence.fetch_add(1, std::memory_order_relaxed);
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
        _stats.out_of_sequence.fetch_add(1, std::memory_order_relaxed);
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

void rc_qp::on_atomic_ack(const roce_packet& p, uint64_t now_ns) {
    const uint32_t psn = p.psn;
    if (!psn_sent(psn) || psn != _una || p.atomic_ack_eth == nullptr) {
        _stats.duplicates.fetch_add(1, std::memory_order_relaxed);
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

void rc_qp::go_back(uint32_t psn) {
    const int32_t rewound = psn_diff(_next_psn, psn);
    if (rewound > 0) {
        _stats.retransmitted.fetch_add(rewound, std::memory_order_relaxed);
    }
    move_send_pointer(psn);
}

void rc_qp::move_send_pointer(uint32_t psn) {
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
bool rc_qp::retire_pending() const {
    const verbs::qp_ring& ring = *_s.ring;
    if (ring.send_retired() == ring.send_taken()) {
        return false;
    }
    const send_op& op = _sends[ring.send_retired() & (ring.sq_capacity() - 1)];
    return op.done || op.local_error != IBV_WC_SUCCESS;
}

void rc_qp::retire_sends(uint32_t budget) {
    verbs::qp_ring& ring = *_s.ring;
    const uint32_t mask = ring.sq_capacity() - 1;
    uint32_t unpublished = 0;
    uint32_t advanced = 0;
    for (uint32_t i = ring.send_retired(); i != ring.send_taken() && advanced < budget; ++i) {
        send_op& op = _sends[i & mask];
        if (op.local_error != IBV_WC_SUCCESS) {
            proto::cqe c{};
            c.wr_id = op.wqe.wr_id;
            c.status = op.local_error;
            c.opcode = proto::wc_opcode_of(op.wqe.opcode);
            c.qp_num = _s.qpn;
            ring.retire_send(unpublished + 1);
            unpublished = 0;
            ++advanced;
            complete(*_s.send_cq, c);
            enter_error();
            break;
        }
        if (!op.done) {
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
}

void rc_qp::run_timers(uint64_t now_ns) {
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
    _stats.timeouts.fetch_add(1, std::memory_order_relaxed);
    if (_retries_left == 0) {
        fail_requester(_una, IBV_WC_RETRY_EXC_ERR);
        return;
    }
    --_retries_left;
    go_back(_una);
    _last_progress_ns = now_ns;
}

void rc_qp::fail_requester(uint32_t psn, ibv_wc_status status) {
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

// ---------------------------------------------------------------- responder

void rc_qp::receive(const roce_packet& p, packet_port& port, uint64_t now_ns) {
    _stats.packets_received.fetch_add(1, std::memory_order_relaxed);
    _stats.bytes_received.fetch_add(p.payload.size(), std::memory_order_relaxed);
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
    switch (_s.type) {
        case IBV_QPT_UD:
            on_datagram(p);
            return;
        case IBV_QPT_UC:
            on_unreliable_request(p, port);
            return;
        default:
            on_request(p, port, now_ns);
            return;
    }
}

// ---------------------------------------------------------------- UC and UD responders

void rc_qp::abandon_message() {
    _stats.messages_dropped.fetch_add(1, std::memory_order_relaxed);
    if (_in_send) {
        _recv_held = true;  // the next message fills it from the start
        _in_send = false;
    }
    _in_write = false;
    _write_pin.reset();
    _discarding = true;
}

void rc_qp::on_unreliable_request(const roce_packet& p, packet_port& port) {
    const op_kind kind = p.info->kind;
    const bool first = (p.info->position & position::first) != 0;
    switch (classify_request_psn(p.psn, _epsn)) {
        case psn_class::duplicate:
            _stats.duplicates.fetch_add(1, std::memory_order_relaxed);
            return;  // UC never retransmits: a copy the fabric made
        case psn_class::ahead:
            _stats.out_of_sequence.fetch_add(1, std::memory_order_relaxed);
            if (_in_send || _in_write) {
                abandon_message();  // packets of it were lost
            }
            break;
        case psn_class::expected:
            break;
    }
    _epsn = psn_add(p.psn, 1);
    if (first) {
        if (_in_send || _in_write) {
            abandon_message();  // its last packet was lost
        }
        _discarding = false;
    } else if (_discarding ||
               !((_in_send && kind == op_kind::send) || (_in_write && kind == op_kind::write))) {
        _discarding = true;  // the rest of a message that is already lost
        return;
    }
    if (kind == op_kind::send) {
        execute_send(p, port);
    } else if (kind == op_kind::write) {
        execute_write(p, port);
    } else {
        abandon_message();  // not a UC operation (the engine checked the transport)
    }
}

void rc_qp::on_datagram(const roce_packet& p) {
    // IB spec 10.2.5: a datagram whose Q_Key is not the QP's is dropped, silently.
    if (p.deth == nullptr || p.deth->qkey() != _machine.attr().qkey) {
        _stats.messages_dropped.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    recv_op r;
    if (!take_recv(r)) {
        _stats.messages_dropped.fetch_add(1, std::memory_order_relaxed);
        return;  // no receive posted: UD has no RNR, the datagram is lost
    }
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
        _stats.messages_dropped.fetch_add(1, std::memory_order_relaxed);
    } else {
        // The GRH area as RoCE v2 NICs fill it for IPv4: 20 bytes of nothing, then the IPv4
        // header (ibv_init_ah_from_wc reads the sender's address there).
        uint8_t grh[ud_grh_bytes] = {};
        if (p.ipv4 != nullptr) {
            std::memcpy(grh + ud_grh_bytes - 20, p.ipv4, 20);
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

// ---------------------------------------------------------------- both

bool rc_qp::complete(verbs::completion_queue& cq, const proto::cqe& c) {
    _stats.completions.fetch_add(1, std::memory_order_relaxed);
    if (c.status != IBV_WC_SUCCESS) {
        _stats.error_completions.fetch_add(1, std::memory_order_relaxed);
    }
    if (cq.complete(c)) {
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

void rc_qp::enter_error() {
    _machine.enter_error();
}

bool rc_qp::flush_pending() const {
    const verbs::qp_ring& ring = *_s.ring;
    const auto sends = ring.send_pending();
    const auto recvs = ring.recv_pending();
    return ring.send_retired() != ring.send_taken() || sends.count > 0 || sends.corrupt ||
           recvs.count > 0 || recvs.corrupt || _in_send || _recv_held;
}

bool rc_qp::connected() const {
    if (_s.type == IBV_QPT_UD) {
        return false;  // no peer: each datagram is checked (packet_port::permits_datagram)
    }
    const ibv_qp_state st = _machine.state();
    return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE;
}

void rc_qp::revoke() {
    if (_s.events.raise != nullptr) {
        _s.events.raise(_s.events.context, _s.owner,
                        static_cast<uint32_t>(proto::event_type::qp_fatal), _s.qpn);
    }
    _revoked = true;
    enter_error();  // the next poll flushes every outstanding WR
}

void rc_qp::flush() {
    verbs::qp_ring& ring = *_s.ring;
    // At most wqe_budget WRs per visit, oldest first: a client that filled its rings (or keeps
    // posting into an ERR QP) gets the rest flushed on its next visits, never the worker.
    uint32_t budget = wqe_budget;
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
}

void rc_qp::reset() {
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
    _local = local_transfer{};
    _rnr_resume_ns = 0;
    _rewound_for_gap = false;
    _epsn = _msn = 0;
    _nak_sent = _ack_pending = _in_send = _in_write = _recv_held = _discarding = false;
    _write_pin.reset();
    _reads.clear();
    _comm_established = false;
    _last_wqe_reached = false;
}

uint32_t rc_qp::frame_bytes(uint8_t code, uint32_t payload_len) {
    return frame_l2_l4_bytes + opcode_info_of(code).header_bytes + payload_len +
           pad_count(payload_len) + icrc_bytes;
}

uint8_t* rc_qp::begin_packet(packet_port& port, uint8_t code, uint32_t payload_len,
                             uint32_t& payload_offset) {
    const opcode_info& info = opcode_info_of(code);
    const uint32_t roce_len = info.header_bytes + payload_len + pad_count(payload_len) + icrc_bytes;
    payload_offset = frame_l2_l4_bytes + info.header_bytes;
    return port.begin_frame(frame_l2_l4_bytes + roce_len);
}

void rc_qp::finish_packet(packet_port& port, const bth_fields& bth, const ext_fields& ext,
                          uint8_t* frame, uint32_t payload_len) {
    finish_packet_to(port, _remote_ip_be, bth, ext, frame, payload_len);
}

void rc_qp::finish_packet_to(packet_port& port, uint32_t dst_ip_be, const bth_fields& bth_in,
                             const ext_fields& ext, uint8_t* frame, uint32_t payload_len) {
    const opcode_info& info = opcode_info_of(bth_in.opcode);
    const uint8_t pad = pad_count(payload_len);
    const uint32_t roce_len = info.header_bytes + payload_len + pad + icrc_bytes;
    bth_fields bth = bth_in;
    bth.pad = pad;
    write_frame_headers(frame, _s.local.mac, _s.local.ip_be, dst_ip_be, _udp_src_port,
                        _machine.attr().ah_attr.grh.traffic_class, roce_len);
    build_roce_headers(frame + frame_l2_l4_bytes, info.header_bytes, bth, ext);
    std::memset(frame + frame_l2_l4_bytes + info.header_bytes + payload_len, 0, pad);
    seal_icrc(frame, roce_len);
    port.end_frame(_s.local.vnic, dst_ip_be, frame_l2_l4_bytes + roce_len);
    _stats.packets_sent.fetch_add(1, std::memory_order_relaxed);
    _stats.bytes_sent.fetch_add(payload_len, std::memory_order_relaxed);
}

void rc_qp::publish_stats() {
    _stats.state.store(_machine.state(), std::memory_order_relaxed);
    _stats.next_psn.store(_next_psn, std::memory_order_relaxed);
    _stats.una_psn.store(_una, std::memory_order_relaxed);
    _stats.expected_psn.store(_epsn, std::memory_order_relaxed);
    _stats.msn.store(_msn, std::memory_order_relaxed);
    _stats.rate_bps.store(_rate.rate_bps(), std::memory_order_relaxed);
}

}  // namespace jakiro::roce
