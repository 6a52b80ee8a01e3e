#include "verbs_shim/post.hh"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "verbs_abi/protocol.hh"
#include "verbs_abi/rings.hh"
#include "verbs_abi/stored_enum.hh"
#include "verbs_shim/ah.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/memory_window.hh"
#include "verbs_shim/pd.hh"
#include "verbs_shim/qp.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

namespace {

// What the engine executes: SEND, WRITE, READ (+imm), the two atomics (atomic_cap HCA),
// ATOMIC WRITE (IBTA 1.5), memory-window binds and invalidation; no TSO (RC has none).
bool supported_opcode(uint32_t op) {
    switch (op) {
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
        case IBV_WR_RDMA_READ:
        case IBV_WR_ATOMIC_CMP_AND_SWP:
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
        case IBV_WR_ATOMIC_WRITE:
        case IBV_WR_BIND_MW:
        case IBV_WR_LOCAL_INV:
        case IBV_WR_SEND_WITH_INV:
            return true;
        default:
            return false;
    }
}

// Memory-window work requests that move no data (the engine executes them when it reaches
// them in the send queue).
bool is_window_op(ibv_wr_opcode op) {
    return op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV;
}

// What each transport carries (IB spec 3.7.2): UC has no READ and no atomics, UD only SENDs.
bool opcode_fits_type(ibv_wr_opcode op, ibv_qp_type type) {
    switch (type) {
        case IBV_QPT_RC:
            return true;
        case IBV_QPT_UC:
            return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE ||
                   op == IBV_WR_RDMA_WRITE_WITH_IMM || is_window_op(op);
        case IBV_QPT_UD:
            return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
        default:
            return false;
    }
}

// IBV_SEND_IP_CSUM asks for checksum offload of raw or IPoIB packets: nothing here has any.
constexpr unsigned rc_send_flags =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

bool has_imm(ibv_wr_opcode op) {
    return op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

bool is_atomic(ibv_wr_opcode op) {
    return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

bool is_rdma(ibv_wr_opcode op) {
    return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ ||
           op == IBV_WR_ATOMIC_WRITE;
}

// A bind's access flags as jakirod takes them: the optional bits (IBV_ACCESS_OPTIONAL_RANGE,
// e.g. relaxed ordering) dropped, as libibverbs drops those a device does not support.
uint32_t window_access(unsigned mw_access_flags) {
    return mw_access_flags & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
}

// ATOMIC WRITE's 8 bytes come from its one SGE (ibv_post_send) or the value ibv_wr_atomic_write
// was given, and are taken now: they travel in the WQE, as inline data does.
constexpr uint32_t atomic_write_bytes = 8;

}  // namespace

// The per-request steps below are shared with the ibv_wr_* API (qp_ex.cc): post.hh.

// Free slots of a queue: jakirod's consumer is read with acquire, so its reads of the slots
// it retired are done. A consumer that runs ahead of us, or more than a ring behind, makes no
// sense: the queue then reads as full rather than letting us overwrite unread slots.
uint32_t free_slots(uint32_t head, const uint32_t& consumer, uint32_t capacity) {
    const uint32_t used = head - proto::load_retired_acquire(consumer);
    return used <= capacity ? capacity - used : 0;
}

// Checks one send work request against the QP; 0 or an errno. `inline_bytes` gets the total
// inline length.
int check_send(const shim_qp& q, const ibv_send_wr& wr, uint64_t& inline_bytes) {
    if (!supported_opcode(proto::stored_value(wr.opcode)) ||
        !opcode_fits_type(wr.opcode, q.qp.qp_type) || (wr.send_flags & ~rc_send_flags) != 0 ||
        wr.num_sge < 0 || (wr.num_sge > 0 && wr.sg_list == nullptr)) {
        return EINVAL;
    }
    if (q.qp.qp_type == IBV_QPT_UD) {
        // The destination: one of our address handles, of this QP's device.
        const shim_ah* ah = to_ah(wr.wr.ud.ah);
        if (ah == nullptr || ah->ah.context != q.qp.context || wr.wr.ud.remote_qpn > 0xFFFFFF) {
            return EINVAL;
        }
    }
    inline_bytes = 0;
    if (wr.opcode == IBV_WR_BIND_MW) {
        // Our window, of this QP's device; an MR of ours unless the bind unbinds (length 0).
        const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
        const shim_mw* w = to_mw(wr.bind_mw.mw);
        if (w == nullptr || w->mw.context != q.qp.context ||
            (window_access(b.mw_access_flags) & ~proto::mw_access_all) != 0) {
            return EINVAL;
        }
        if (b.length != 0 && (to_mr(b.mr) == nullptr || b.mr->context != q.qp.context)) {
            return EINVAL;
        }
        return 0;
    }
    if (wr.opcode == IBV_WR_LOCAL_INV) {
        return 0;
    }
    const auto sges = static_cast<uint32_t>(wr.num_sge);
    const uint32_t most =
        wr.opcode == IBV_WR_RDMA_READ ? std::min(q.max_send_sge, q.max_sge_rd) : q.max_send_sge;
    if (sges > most) {
        return EINVAL;
    }
    // An atomic returns the original 8 bytes into exactly one 8-byte local buffer.
    if (is_atomic(wr.opcode) && (sges != 1 || wr.sg_list[0].length != 8)) {
        return EINVAL;
    }
    inline_bytes = 0;
    if (wr.opcode == IBV_WR_ATOMIC_WRITE) {
        if (sges != 1 || wr.sg_list[0].length != atomic_write_bytes) {
            return EINVAL;
        }
        inline_bytes = atomic_write_bytes;  // whatever max_inline_data the QP has
        return 0;
    }
    if ((wr.send_flags & IBV_SEND_INLINE) != 0) {
        // Inline data goes out of the WQE: a READ or an atomic has nothing to send.
        if (wr.opcode == IBV_WR_RDMA_READ || is_atomic(wr.opcode)) {
            return EINVAL;
        }
        for (uint32_t i = 0; i < sges; ++i) {
            inline_bytes += wr.sg_list[i].length;
        }
        if (inline_bytes > q.max_inline_data) {
            return EINVAL;
        }
    }
    return 0;
}

// Writes one checked send work request into its slot. The data of an inline request is
// copied now, as hardware copies it into the WQE: the program may reuse its buffer as soon
// as ibv_post_send returns.
void write_send(proto::send_wqe& slot, const ibv_send_wr& wr, uint64_t inline_bytes,
                ibv_qp_type type) {
    std::memset(&slot, 0, proto::send_wqe_header_bytes);
    slot.wr_id = wr.wr_id;
    slot.opcode = wr.opcode;
    slot.send_flags = wr.send_flags;
    if (has_imm(wr.opcode)) {
        slot.imm_data = wr.imm_data;  // network order both sides
    }
    if (wr.opcode == IBV_WR_LOCAL_INV || wr.opcode == IBV_WR_SEND_WITH_INV) {
        slot.imm_data = wr.invalidate_rkey;  // host order, as the verbs API has it
    }
    if (wr.opcode == IBV_WR_BIND_MW) {
        const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
        slot.mw_handle = wr.bind_mw.mw->handle;
        slot.rkey = wr.bind_mw.rkey;
        slot.remote_addr = b.addr;
        slot.compare_add = b.length;
        slot.mw_mr_lkey = b.length != 0 ? b.mr->lkey : 0;
        slot.mw_access = window_access(b.mw_access_flags);
        return;  // no data
    }
    if (wr.opcode == IBV_WR_LOCAL_INV) {
        return;
    }
    if (is_rdma(wr.opcode)) {
        slot.remote_addr = wr.wr.rdma.remote_addr;
        slot.rkey = wr.wr.rdma.rkey;
    }
    if (type == IBV_QPT_UD) {
        write_ud_destination(slot, *to_ah(wr.wr.ud.ah), wr.wr.ud.remote_qpn, wr.wr.ud.remote_qkey);
    } else if (is_atomic(wr.opcode)) {
        slot.remote_addr = wr.wr.atomic.remote_addr;
        slot.rkey = wr.wr.atomic.rkey;
        slot.compare_add = wr.wr.atomic.compare_add;
        slot.swap = wr.wr.atomic.swap;
    }
    const auto sges = static_cast<uint32_t>(wr.num_sge);
    if (wr.opcode == IBV_WR_ATOMIC_WRITE) {
        slot.send_flags |= IBV_SEND_INLINE;
    }
    if ((slot.send_flags & IBV_SEND_INLINE) != 0) {
        slot.num_sge = 0;
        slot.inline_len = static_cast<uint32_t>(inline_bytes);
        std::size_t at = 0;
        for (uint32_t i = 0; i < sges; ++i) {
            const ibv_sge& s = wr.sg_list[i];
            std::memcpy(slot.inline_data + at, reinterpret_cast<const void*>(s.addr), s.length);
            at += s.length;
        }
        return;
    }
    slot.num_sge = sges;
    for (uint32_t i = 0; i < sges; ++i) {
        slot.sg[i] = {wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
    }
}

// After publishing: ring the doorbell for this QP if jakirod parked it or sleeps (a bit in the
// vNIC's page; a futex wake only while the worker sleeps, whose sleep ends at its timeout anyway).
void ring_doorbell_if_wanted(const shim_qp& q) {
    if (proto::doorbell_wanted_after_publish(*q.ring)) {
        proto::ring_doorbell(*q.doorbell, q.qp.qp_num);
    }
}

// States in which each queue accepts work (IB spec 10.8.2 via the rdma-core providers): the
// send queue from RTS on (SQD and ERR too: the engine holds or flushes), the receive queue
// from INIT on.
bool send_queue_open(int state) {
    return state != IBV_QPS_RESET && state != IBV_QPS_INIT && state != IBV_QPS_RTR;
}
bool recv_queue_open(int state) {
    return state != IBV_QPS_RESET;
}

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    shim_qp* q = to_qp(qp);
    int error = 0;
    ibv_send_wr* failed = nullptr;
    if (q == nullptr) {
        error = EINVAL;
        failed = wr;
    } else if (wr != nullptr) {
        const std::lock_guard lock(q->sq_lock);
        if (q->context->death->check()) {
            error = EIO;  // jakirod is gone (device_death.hh); checked under the queue's lock
            failed = wr;
        } else if (!send_queue_open(q->state.load(std::memory_order_relaxed))) {
            error = EINVAL;
            failed = wr;
        } else {
            uint32_t head = q->sq_head;
            uint32_t room = 0;  // looked up when needed: jakirod retires slots meanwhile
            for (; wr != nullptr; wr = wr->next) {
                if (room == 0) {
                    room = free_slots(head, q->ring->sq_consumer, q->sq_capacity);
                }
                uint64_t inline_bytes = 0;
                error = room == 0 ? ENOMEM : check_send(*q, *wr, inline_bytes);
                if (error != 0) {
                    failed = wr;
                    break;
                }
                write_send(q->sq[head & (q->sq_capacity - 1)], *wr, inline_bytes, q->qp.qp_type);
                ++head;
                --room;
            }
            if (head != q->sq_head) {
                q->sq_head = head;
                proto::publish_wqes(q->ring->sq_producer, head);
                ring_doorbell_if_wanted(*q);
            }
        }
    }
    if (error != 0 && bad_wr != nullptr) {
        *bad_wr = failed;
    }
    return error;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    shim_qp* q = to_qp(qp);
    int error = 0;
    ibv_recv_wr* failed = nullptr;
    if (q == nullptr || q->qp.srq != nullptr) {  // a QP on an SRQ has no receive queue
        error = EINVAL;
        failed = wr;
    } else if (wr != nullptr) {
        const std::lock_guard lock(q->rq_lock);
        if (q->context->death->check()) {
            error = EIO;  // jakirod is gone (device_death.hh); checked under the queue's lock
            failed = wr;
        } else if (!recv_queue_open(q->state.load(std::memory_order_relaxed))) {
            error = EINVAL;
            failed = wr;
        } else {
            uint32_t head = q->rq_head;
            uint32_t room = 0;
            for (; wr != nullptr; wr = wr->next) {
                if (room == 0) {
                    room = free_slots(head, q->ring->rq_consumer, q->rq_capacity);
                }
                if (room == 0) {
                    error = ENOMEM;
                } else if (wr->num_sge < 0 ||
                           static_cast<uint32_t>(wr->num_sge) > q->max_recv_sge ||
                           (wr->num_sge > 0 && wr->sg_list == nullptr)) {
                    error = EINVAL;
                }
                if (error != 0) {
                    failed = wr;
                    break;
                }
                proto::recv_wqe& slot = q->rq[head & (q->rq_capacity - 1)];
                std::memset(&slot, 0, offsetof(proto::recv_wqe, sg));
                slot.wr_id = wr->wr_id;
                slot.num_sge = static_cast<uint32_t>(wr->num_sge);
                for (int i = 0; i < wr->num_sge; ++i) {
                    slot.sg[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
                }
                ++head;
                --room;
            }
            if (head != q->rq_head) {
                q->rq_head = head;
                proto::publish_wqes(q->ring->rq_producer, head);
                // Rung only if jakirod wants receives rung too (a QP in ERR flushes them); any
                // other QP takes a receive when its message comes, so the post costs neither a
                // write to the page nor a wake-up (verbs_abi/rings.hh "Receives").
                if (proto::doorbell_wanted_after_publishing_receives(*q->ring)) {
                    proto::ring_doorbell(*q->doorbell, q->qp.qp_num);
                }
            }
        }
    }
    if (error != 0 && bad_wr != nullptr) {
        *bad_wr = failed;
    }
    return error;
}

}  // namespace jakiro::verbs_shim
