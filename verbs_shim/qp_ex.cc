#include "verbs_shim/qp_ex.hh"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>

#include "verbs_abi/rings.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/device_death.hh"
#include "verbs_shim/post.hh"
#include "verbs_shim/qp.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

static_assert(offsetof(shim_qp, qp_ex) == 0 && offsetof(ibv_qp_ex, qp_base) == 0,
              "ibv_qp is the prefix of ibv_qp_ex, as libibverbs' verbs_qp relies on");

// One critical region's work (ibv_wr_start .. ibv_wr_complete / ibv_wr_abort). Owned by its
// QP; touched only by the thread holding the QP's sq_lock.
struct qp_ex_state {
    bool open;       // inside ibv_wr_start .. complete/abort
    bool pending;    // `wr` was started by a builder and is not in the ring yet
    int error;       // the first error of the region: ibv_wr_complete's return
    uint32_t head;   // the next slot; published only by ibv_wr_complete
    uint32_t room;   // free slots from `head` on, as last looked up
    ibv_send_wr wr;  // the request being built
    ibv_sge sges[proto::wqe_max_sge];
    ibv_sge inline_sge;  // the staged inline bytes, as one SGE
    uint8_t inline_bytes[proto::wqe_max_inline];
};

namespace {

constexpr uint64_t rc_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                            IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                            IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_WRITE |
                            IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
                            IBV_QP_EX_WITH_SEND_WITH_INV;
constexpr uint64_t uc_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                            IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                            IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
constexpr uint64_t ud_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

shim_qp& qp_of(ibv_qp_ex* qpx) {
    return *reinterpret_cast<shim_qp*>(qpx);
}

void fail(qp_ex_state& s, int error) {
    if (s.error == 0) {
        s.error = error;
    }
}

// Checks the request being built and writes it into the next slot (post.cc's own code).
void flush(shim_qp& q, qp_ex_state& s) {
    if (!s.pending) {
        return;
    }
    s.pending = false;
    if (s.error != 0) {
        return;
    }
    if (s.room == 0) {
        s.room = free_slots(s.head, q.ring->sq_consumer, q.sq_capacity);
    }
    if (s.room == 0) {
        fail(s, ENOMEM);
        return;
    }
    uint64_t inline_bytes = 0;
    if (const int error = check_send(q, s.wr, inline_bytes); error != 0) {
        fail(s, error);
        return;
    }
    write_send(q.sq[s.head & (q.sq_capacity - 1)], s.wr, inline_bytes, q.qp.qp_type);
    ++s.head;
    --s.room;
}

// Every builder: the previous request goes into the ring, a new one starts with the wr_id and
// wr_flags the program set in ibv_qp_ex.
ibv_send_wr* begin(ibv_qp_ex* qpx, ibv_wr_opcode opcode) {
    shim_qp& q = qp_of(qpx);
    qp_ex_state& s = *q.ex;
    if (!s.open) {
        fail(s, EINVAL);  // outside ibv_wr_start .. complete: nothing to add it to
        return nullptr;
    }
    flush(q, s);
    if (s.error != 0) {
        return nullptr;
    }
    s.wr = ibv_send_wr{};
    s.wr.wr_id = qpx->wr_id;
    s.wr.send_flags = qpx->wr_flags;
    s.wr.opcode = opcode;
    s.wr.sg_list = s.sges;
    s.wr.num_sge = 0;
    s.pending = true;
    return &s.wr;
}

// Every setter: the request the last builder started, or nullptr (the region fails).
ibv_send_wr* building(ibv_qp_ex* qpx) {
    qp_ex_state& s = *qp_of(qpx).ex;
    if (!s.open || !s.pending) {
        fail(s, EINVAL);
        return nullptr;
    }
    return s.error == 0 ? &s.wr : nullptr;
}

// ---- builders

void wr_send(ibv_qp_ex* qpx) {
    begin(qpx, IBV_WR_SEND);
}

void wr_send_imm(ibv_qp_ex* qpx, __be32 imm_data) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_SEND_WITH_IMM)) {
        wr->imm_data = imm_data;
    }
}

void wr_send_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_SEND_WITH_INV)) {
        wr->invalidate_rkey = invalidate_rkey;
    }
}

void wr_local_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_LOCAL_INV)) {
        wr->invalidate_rkey = invalidate_rkey;
    }
}

void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* bind_info) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_BIND_MW)) {
        if (bind_info == nullptr) {
            fail(*qp_of(qpx).ex, EINVAL);
            return;
        }
        wr->bind_mw.mw = mw;
        wr->bind_mw.rkey = rkey;
        wr->bind_mw.bind_info = *bind_info;
    }
}

void wr_send_tso(ibv_qp_ex* qpx, void*, uint16_t, uint16_t) {
    begin(qpx, IBV_WR_TSO);
}

void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_RDMA_WRITE)) {
        wr->wr.rdma.rkey = rkey;
        wr->wr.rdma.remote_addr = remote_addr;
    }
}

void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, __be32 imm_data) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_RDMA_WRITE_WITH_IMM)) {
        wr->wr.rdma.rkey = rkey;
        wr->wr.rdma.remote_addr = remote_addr;
        wr->imm_data = imm_data;
    }
}

void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_RDMA_READ)) {
        wr->wr.rdma.rkey = rkey;
        wr->wr.rdma.remote_addr = remote_addr;
    }
}

void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_ATOMIC_CMP_AND_SWP)) {
        wr->wr.atomic.rkey = rkey;
        wr->wr.atomic.remote_addr = remote_addr;
        wr->wr.atomic.compare_add = compare;
        wr->wr.atomic.swap = swap;
    }
}

void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
    if (ibv_send_wr* wr = begin(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD)) {
        wr->wr.atomic.rkey = rkey;
        wr->wr.atomic.remote_addr = remote_addr;
        wr->wr.atomic.compare_add = add;
    }
}

// The value is taken now (the caller's buffer may be gone by ibv_wr_complete), staged where
// inline data is, as the request's one 8-byte SGE.
void wr_atomic_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, const void* atomic_wr) {
    ibv_send_wr* wr = begin(qpx, IBV_WR_ATOMIC_WRITE);
    if (wr == nullptr) {
        return;
    }
    qp_ex_state& s = *qp_of(qpx).ex;
    if (atomic_wr == nullptr) {
        fail(s, EINVAL);
        return;
    }
    wr->wr.rdma.rkey = rkey;
    wr->wr.rdma.remote_addr = remote_addr;
    std::memcpy(s.inline_bytes, atomic_wr, 8);
    s.inline_sge = {reinterpret_cast<uint64_t>(s.inline_bytes), 8, 0};
    wr->sg_list = &s.inline_sge;
    wr->num_sge = 1;
}

// ---- setters

void wr_set_sge_list(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
    ibv_send_wr* wr = building(qpx);
    if (wr == nullptr) {
        return;
    }
    qp_ex_state& s = *qp_of(qpx).ex;
    if (num_sge > proto::wqe_max_sge || (num_sge > 0 && sg_list == nullptr)) {
        fail(s, EINVAL);
        return;
    }
    if (num_sge > 0) {
        std::memcpy(s.sges, sg_list, num_sge * sizeof(ibv_sge));
    }
    wr->sg_list = s.sges;
    wr->num_sge = static_cast<int>(num_sge);
    wr->send_flags &= ~static_cast<unsigned>(IBV_SEND_INLINE);
}

void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
    const ibv_sge sge{addr, length, lkey};
    wr_set_sge_list(qpx, 1, &sge);
}

// Copies the bytes now (the man page: the caller may reuse its buffers at once); the request
// then reads as an IBV_SEND_INLINE one whose single SGE is the staged copy, which write_send
// copies into the slot exactly as it would the program's SGEs.
void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* buf_list) {
    ibv_send_wr* wr = building(qpx);
    if (wr == nullptr) {
        return;
    }
    shim_qp& q = qp_of(qpx);
    qp_ex_state& s = *q.ex;
    if (num_buf > 0 && buf_list == nullptr) {
        fail(s, EINVAL);
        return;
    }
    std::size_t total = 0;
    for (size_t i = 0; i < num_buf; ++i) {
        const std::size_t length = buf_list[i].length;
        if (length > q.max_inline_data - total) {
            fail(s, EINVAL);  // more than the QP's max_inline_data
            return;
        }
        if (length > 0) {
            std::memcpy(s.inline_bytes + total, buf_list[i].addr, length);
        }
        total += length;
    }
    s.inline_sge =
        ibv_sge{reinterpret_cast<uintptr_t>(s.inline_bytes), static_cast<uint32_t>(total), 0};
    wr->sg_list = &s.inline_sge;
    wr->num_sge = total > 0 ? 1 : 0;
    wr->send_flags |= IBV_SEND_INLINE;
}

void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
    const ibv_data_buf buf{addr, length};
    wr_set_inline_data_list(qpx, 1, &buf);
}

// UD: the destination goes where ibv_post_send takes it from (wr.ud); write_send turns the
// AH into the WQE's address. Only UD QPs have it (the union shares its bytes with wr.rdma).
void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
    ibv_send_wr* wr = building(qpx);
    if (wr == nullptr) {
        return;
    }
    if (qpx->qp_base.qp_type != IBV_QPT_UD) {
        fail(*qp_of(qpx).ex, EINVAL);
        return;
    }
    wr->wr.ud.ah = ah;
    wr->wr.ud.remote_qpn = remote_qpn;
    wr->wr.ud.remote_qkey = remote_qkey;
}

// There are no XRC QPs.
void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t) {
    fail(*qp_of(qpx).ex, EINVAL);
}

// ---- the region

void wr_start(ibv_qp_ex* qpx) {
    shim_qp& q = qp_of(qpx);
    q.sq_lock.lock();
    qp_ex_state& s = *q.ex;
    s.open = true;
    s.pending = false;
    s.error = send_queue_open(q.state.load(std::memory_order_relaxed)) ? 0 : EINVAL;
    s.head = q.sq_head;
    s.room = 0;  // looked up when needed: jakirod retires slots meanwhile
}

int wr_complete(ibv_qp_ex* qpx) {
    shim_qp& q = qp_of(qpx);
    qp_ex_state& s = *q.ex;
    if (!s.open) {
        return EINVAL;  // no ibv_wr_start: we do not hold the lock
    }
    flush(q, s);
    if (q.context->death->check()) {
        fail(s, EIO);  // jakirod is gone (device_death.hh): nothing is posted
    }
    const int error = s.error;
    if (error == 0 && s.head != q.sq_head) {
        q.sq_head = s.head;
        proto::publish_wqes(q.ring->sq_producer, s.head);
        ring_doorbell_if_wanted(q);
    }
    s.open = false;
    s.pending = false;
    s.error = 0;
    q.sq_lock.unlock();
    return error;
}

void wr_abort(ibv_qp_ex* qpx) {
    shim_qp& q = qp_of(qpx);
    qp_ex_state& s = *q.ex;
    if (!s.open) {
        return;
    }
    // The slots written since ibv_wr_start stay unpublished: jakirod never reads them, and
    // the next region overwrites them.
    s.open = false;
    s.pending = false;
    s.error = 0;
    q.sq_lock.unlock();
}

}  // namespace

int check_send_ops(ibv_qp_type type, uint64_t send_ops) {
    uint64_t offered = 0;
    switch (type) {
        case IBV_QPT_RC:
            offered = rc_ops;
            break;
        case IBV_QPT_UC:
            offered = uc_ops;
            break;
        case IBV_QPT_UD:
            offered = ud_ops;
            break;
        default:
            break;
    }
    return (send_ops & ~offered) == 0 ? 0 : EOPNOTSUPP;
}

qp_ex_state* new_qp_ex_state() {
    return new (std::nothrow) qp_ex_state{};
}

void delete_qp_ex_state(qp_ex_state* state) {
    delete state;
}

void attach_qp_ex(shim_qp& q, qp_ex_state* state) {
    ibv_qp_ex& x = q.qp_ex;
    x.comp_mask = 0;
    x.wr_id = 0;
    x.wr_flags = 0;
    x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x.wr_atomic_fetch_add = wr_atomic_fetch_add;
    x.wr_atomic_write = wr_atomic_write;
    x.wr_bind_mw = wr_bind_mw;
    x.wr_local_inv = wr_local_inv;
    x.wr_rdma_read = wr_rdma_read;
    x.wr_rdma_write = wr_rdma_write;
    x.wr_rdma_write_imm = wr_rdma_write_imm;
    x.wr_send = wr_send;
    x.wr_send_imm = wr_send_imm;
    x.wr_send_inv = wr_send_inv;
    x.wr_send_tso = wr_send_tso;
    x.wr_set_ud_addr = wr_set_ud_addr;
    x.wr_set_xrc_srqn = wr_set_xrc_srqn;
    x.wr_set_inline_data = wr_set_inline_data;
    x.wr_set_inline_data_list = wr_set_inline_data_list;
    x.wr_set_sge = wr_set_sge;
    x.wr_set_sge_list = wr_set_sge_list;
    x.wr_start = wr_start;
    x.wr_complete = wr_complete;
    x.wr_abort = wr_abort;
    q.ex = state;
}

void release_qp_ex(shim_qp& q) {
    delete q.ex;
    q.ex = nullptr;
}

ibv_qp_ex* qp_to_qp_ex(ibv_qp* qp) {
    shim_qp* q = to_qp(qp);
    return q != nullptr && q->ex != nullptr ? &q->qp_ex : nullptr;
}

}  // namespace jakiro::verbs_shim
