#include "verbs_shim/qp.hh"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <new>
#include <type_traits>

#include "verbs_abi/qp_attr_wire.hh"
#include "verbs_abi/stored_enum.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/cq.hh"
#include "verbs_shim/debug.hh"
#include "verbs_shim/pd.hh"
#include "verbs_shim/qp_ex.hh"
#include "verbs_shim/srq.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;
using verbs_proto::from_wire;
using verbs_proto::known_qp_attr_mask;
using verbs_proto::masked;
using verbs_proto::to_wire;

static_assert(std::is_standard_layout_v<shim_qp> && offsetof(shim_qp, qp) == 0);
static_assert(int{proto::qpt_rc} == int{IBV_QPT_RC} && int{proto::qpt_uc} == int{IBV_QPT_UC} &&
              int{proto::qpt_ud} == int{IBV_QPT_UD});
static_assert(std::atomic<int>::is_always_lock_free);

namespace {

// Asks jakirod to drop a QP the shim could not take into use (a malformed ring).
void abandon_qp(shim_context* c, uint32_t handle) {
    destroy_object(c, proto::opcode::destroy_qp, handle);
}

// RC, UC and UD run on the engine; the other types of verbs.h fail as unsupported (a vNIC has
// no raw Ethernet queue, XRC domains are not built); anything else is invalid.
int check_type(uint32_t type) {
    switch (type) {
        case IBV_QPT_RC:
        case IBV_QPT_UC:
        case IBV_QPT_UD:
            return 0;
        case IBV_QPT_RAW_PACKET:
        case IBV_QPT_XRC_SEND:
        case IBV_QPT_XRC_RECV:
        case IBV_QPT_DRIVER:
            debug("ibv_create_qp: RC, UC and UD queue pairs are supported (asked for type %u)",
                  type);
            return EOPNOTSUPP;
    }
    return EINVAL;
}

// The caps asked for, against what the device advertises and what a ring slot can hold.
// Inline data is bounded by the slot alone (the bytes travel in it), as jakirod's create_qp
// checks; hello's max_inline_data is not consulted (ibv_device_attr has no such field).
int check_caps(const ibv_qp_cap& cap, const proto::limits& lim) {
    const uint32_t max_sge = std::min(lim.max_sge, proto::wqe_max_sge);
    const uint32_t max_inline = proto::wqe_max_inline;
    if (cap.max_send_wr > lim.max_qp_wr || cap.max_recv_wr > lim.max_qp_wr ||
        cap.max_send_sge > max_sge || cap.max_recv_sge > max_sge ||
        cap.max_inline_data > max_inline) {
        debug(
            "ibv_create_qp: caps %u/%u WRs, %u/%u SGEs, %u inline exceed the device's "
            "%u WRs, %u SGEs, %u inline bytes",
            cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge,
            cap.max_inline_data, lim.max_qp_wr, max_sge, max_inline);
        return EINVAL;
    }
    return 0;
}

// What jakirod promised must be at least what was asked and fit the ring's slots.
bool reply_fits(const proto::create_qp_reply& r, const ibv_qp_cap& cap, const proto::limits& lim) {
    const uint32_t most_slots = std::bit_ceil(std::max(lim.max_qp_wr, 1u));
    return proto::is_power_of_two(r.sq_capacity) && proto::is_power_of_two(r.rq_capacity) &&
           r.sq_capacity >= cap.max_send_wr && r.rq_capacity >= cap.max_recv_wr &&
           r.sq_capacity <= most_slots && r.rq_capacity <= most_slots &&
           r.max_send_sge >= cap.max_send_sge && r.max_send_sge <= proto::wqe_max_sge &&
           r.max_recv_sge >= cap.max_recv_sge && r.max_recv_sge <= proto::wqe_max_sge &&
           r.max_inline_data >= cap.max_inline_data && r.max_inline_data <= proto::wqe_max_inline &&
           r.ring_bytes == proto::qp_ring_bytes(r.sq_capacity, r.rq_capacity);
}

// Maps and checks the ring jakirod sent: size, identity, capacities, layout. nullptr (errno
// set) if it is not the ring that was promised.
proto::qp_ring_header* map_ring(int fd, const proto::create_qp_reply& reply) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<uint64_t>(st.st_size) != reply.ring_bytes) {
        errno = EPROTO;
        return nullptr;
    }
    void* base = mmap(nullptr, reply.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        return nullptr;
    }
    auto* h = static_cast<proto::qp_ring_header*>(base);
    if (h->magic != proto::qp_ring_magic || h->version != proto::qp_ring_version ||
        h->sq_capacity != reply.sq_capacity || h->rq_capacity != reply.rq_capacity ||
        h->slot_size != proto::wqe_size || h->sq_offset != sizeof(proto::qp_ring_header) ||
        h->rq_offset != sizeof(proto::qp_ring_header) + reply.sq_capacity * proto::wqe_size ||
        h->qp_num != reply.qp_num) {
        munmap(base, reply.ring_bytes);
        errno = EPROTO;
        return nullptr;
    }
    return h;
}

// The doorbell is the engine's page: a memfd (a regular file) of exactly one page, sealed so
// nobody can shrink it under a mapping. Mapped shared; nullptr if it is anything else.
proto::doorbell_page* map_doorbell(int fd) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<std::size_t>(st.st_size) != proto::doorbell_bytes) {
        return nullptr;
    }
    const int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
        return nullptr;
    }
    void* page = mmap(nullptr, proto::doorbell_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return page == MAP_FAILED ? nullptr : static_cast<proto::doorbell_page*>(page);
}

}  // namespace

shim_qp* to_qp(ibv_qp* qp) {
    auto* q = reinterpret_cast<shim_qp*>(qp);
    return q != nullptr && q->magic == qp_magic ? q : nullptr;
}

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    shim_pd* p = to_pd(pd);
    if (p == nullptr || attr == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    shim_context* c = p->context;
    if (const int error = check_type(proto::stored_value(attr->qp_type)); error != 0) {
        errno = error;
        return nullptr;
    }
    if (attr->srq != nullptr) {
        const shim_srq* srq = to_srq(attr->srq);
        if (srq == nullptr || srq->context != c) {
            errno = EINVAL;
            return nullptr;
        }
        // Receives come from the SRQ: the receive caps are ignored (and reported as 0).
        attr->cap.max_recv_wr = 0;
        attr->cap.max_recv_sge = 0;
    }
    shim_cq* send_cq = to_cq(attr->send_cq);
    shim_cq* recv_cq = to_cq(attr->recv_cq);
    if (send_cq == nullptr || recv_cq == nullptr || send_cq->context != c ||
        recv_cq->context != c) {
        errno = EINVAL;
        return nullptr;
    }
    if (const int error = check_caps(attr->cap, c->hello.lim); error != 0) {
        errno = error;
        return nullptr;
    }
    auto* q = new (std::nothrow) shim_qp{};
    if (q == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    auto req = proto::make_message<proto::create_qp_request>(
        static_cast<uint16_t>(proto::opcode::create_qp), 0);
    req.pd_handle = pd->handle;
    req.send_cq = attr->send_cq->handle;
    req.recv_cq = attr->recv_cq->handle;
    req.max_send_wr = attr->cap.max_send_wr;
    req.max_recv_wr = attr->cap.max_recv_wr;
    req.max_send_sge = attr->cap.max_send_sge;
    req.max_recv_sge = attr->cap.max_recv_sge;
    req.max_inline_data = attr->cap.max_inline_data;
    req.qp_type = static_cast<uint8_t>(attr->qp_type);
    req.srq = attr->srq != nullptr ? attr->srq->handle : 0;
    req.sq_sig_all = attr->sq_sig_all != 0 ? 1 : 0;
    proto::create_qp_reply reply;
    int fds[2] = {-1, -1};  // the ring memfd, then the doorbell page
    if (const int error = c->chan->call_with_fds(&req, sizeof(req), &reply, sizeof(reply), fds);
        error != 0) {
        delete q;
        errno = error;
        return nullptr;
    }
    proto::qp_ring_header* ring = nullptr;
    proto::doorbell_page* doorbell = nullptr;
    int map_error = EPROTO;
    if (!reply_fits(reply, attr->cap, c->hello.lim)) {
        debug(
            "ibv_create_qp: jakirod's caps for QP %#x (%u/%u slots, %u/%u SGEs, %u inline, "
            "%llu bytes) do not fit the request",
            reply.qp_handle, reply.sq_capacity, reply.rq_capacity, reply.max_send_sge,
            reply.max_recv_sge, reply.max_inline_data,
            static_cast<unsigned long long>(reply.ring_bytes));
    } else if ((doorbell = map_doorbell(fds[1])) == nullptr) {
        debug("ibv_create_qp: the doorbell of QP %#x is not a sealed one-page memfd",
              reply.qp_handle);
    } else {
        ring = map_ring(fds[0], reply);
        map_error = errno;
    }
    close(fds[0]);  // the mappings keep the ring and the doorbell
    close(fds[1]);
    if (ring == nullptr) {
        debug("ibv_create_qp: jakirod's ring for QP %#x is not usable", reply.qp_handle);
        if (doorbell != nullptr) {
            munmap(doorbell, proto::doorbell_bytes);
        }
        abandon_qp(c, reply.qp_handle);
        delete q;
        errno = map_error;
        return nullptr;
    }
    q->ring = ring;
    q->ring_bytes = reply.ring_bytes;
    q->sq = proto::sq_slots(ring);
    q->rq = proto::rq_slots(ring, reply.sq_capacity);
    q->doorbell = doorbell;
    q->sq_capacity = reply.sq_capacity;
    q->rq_capacity = reply.rq_capacity;
    q->max_send_sge = reply.max_send_sge;
    q->max_recv_sge = reply.max_recv_sge;
    q->max_inline_data = reply.max_inline_data;
    q->max_sge_rd = c->hello.lim.max_sge_rd;
    q->sq_sig_all = req.sq_sig_all != 0;
    q->state.store(IBV_QPS_RESET, std::memory_order_relaxed);
    q->sq_head = 0;
    q->rq_head = 0;
    q->context = c;
    // What libibverbs does for a provider's QP.
    q->qp.context = pd->context;
    q->qp.qp_context = attr->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = attr->send_cq;
    q->qp.recv_cq = attr->recv_cq;
    q->qp.srq = attr->srq;
    q->qp.handle = reply.qp_handle;
    q->qp.qp_num = reply.qp_num;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = attr->qp_type;
    q->qp.events_completed = 0;
    pthread_mutex_init(&q->qp.mutex, nullptr);
    pthread_cond_init(&q->qp.cond, nullptr);
    q->magic = qp_magic;
    {
        const std::lock_guard lock(c->targets->mutex);
        c->targets->qps[reply.qp_handle] = q;
    }
    // As providers do: the caller learns what it really got.
    attr->cap.max_send_wr = reply.sq_capacity;
    attr->cap.max_recv_wr = attr->srq != nullptr ? 0 : reply.rq_capacity;
    attr->cap.max_send_sge = reply.max_send_sge;
    attr->cap.max_recv_sge = attr->srq != nullptr ? 0 : reply.max_recv_sge;
    attr->cap.max_inline_data = reply.max_inline_data;
    return &q->qp;
}

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
    // The inline ibv_create_qp_ex sends comp_mask == PD to ibv_create_qp itself; anything we
    // see here asks for more (creation flags, send ops for ibv_qp_ex, XRC, RSS, TSO).
    if (attr == nullptr || to_context(context) == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    // The PD, creation flags (none of which is built, so only an empty set), and send ops for
    // ibv_qp_ex (qp_ex.hh). XRC, RSS and TSO are not built: ibv_query_device_ex advertises no
    // TSO, RSS or XRC, so asking for them is EOPNOTSUPP, as rxe answers.
    constexpr uint32_t supported_mask =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if ((attr->comp_mask & ~supported_mask) != 0) {
        debug(
            "ibv_create_qp_ex: only the PD, creation flags and send ops attributes are "
            "supported (comp_mask %#x)",
            attr->comp_mask);
        errno = EOPNOTSUPP;
        return nullptr;
    }
    // Every creation flag needs a device capability ibv_query_device_ex does not advertise
    // (multicast loopback blocking, scatter FCS, CVLAN stripping, end padding, a source QPN
    // for a UD QP standing in for another): any flag is EOPNOTSUPP, none is a plain QP. The
    // field means nothing without its comp_mask bit (as in libibverbs).
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && attr->create_flags != 0) {
        debug("ibv_create_qp_ex: no creation flag is supported (create_flags %#x)",
              attr->create_flags);
        errno = EOPNOTSUPP;
        return nullptr;
    }
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0 || attr->pd == nullptr ||
        attr->pd->context != context) {
        errno = EINVAL;
        return nullptr;
    }
    const bool with_ops = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
    if (with_ops && check_send_ops(attr->qp_type, attr->send_ops_flags) != 0) {
        debug("ibv_create_qp_ex: send ops %#llx are not all offered for QP type %d",
              static_cast<unsigned long long>(attr->send_ops_flags), attr->qp_type);
        errno = EOPNOTSUPP;
        return nullptr;
    }
    qp_ex_state* ex = with_ops ? new_qp_ex_state() : nullptr;
    if (with_ops && ex == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    // ibv_qp_init_attr is the prefix of ibv_qp_init_attr_ex (libibverbs relies on it too).
    static_assert(offsetof(ibv_qp_init_attr_ex, sq_sig_all) ==
                  offsetof(ibv_qp_init_attr, sq_sig_all));
    ibv_qp* qp = create_qp(attr->pd, reinterpret_cast<ibv_qp_init_attr*>(attr));
    if (qp == nullptr) {
        delete_qp_ex_state(ex);
        return nullptr;
    }
    if (with_ops) {
        attach_qp_ex(*to_qp(qp), ex);
    }
    return qp;
}

int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
    shim_qp* q = to_qp(qp);
    if (q == nullptr || attr == nullptr || (attr_mask & ~known_qp_attr_mask) != 0) {
        return EINVAL;
    }
    auto req = proto::make_message<proto::modify_qp_request>(
        static_cast<uint16_t>(proto::opcode::modify_qp), 0);
    req.qp_handle = qp->handle;
    req.attr_mask = attr_mask;
    req.attr = masked(to_wire(*attr), attr_mask);
    proto::reply_header reply;
    if (const int error = q->context->chan->call(&req, sizeof(req), &reply, sizeof(reply));
        error != 0) {
        return error;
    }
    // As libibverbs: the state the QP was moved to is what ibv_qp.state says from now on.
    if ((attr_mask & IBV_QP_STATE) != 0) {
        qp->state = attr->qp_state;
        q->state.store(attr->qp_state, std::memory_order_relaxed);
    }
    // RESET empties the QP's queues, completions not yet read included (as mlx4/mlx5 do):
    // jakirod answered once its engine had reset the QP, so nothing of the old life follows.
    // Without this, a program that recovers a QP from ERR (RESET, INIT, RTR, RTS) would poll
    // the flush completions of its earlier WRs as if they were its new WRs' results.
    if ((attr_mask & IBV_QP_STATE) != 0 && attr->qp_state == IBV_QPS_RESET) {
        drop_qp_completions(qp->send_cq, qp->qp_num);
        if (qp->recv_cq != qp->send_cq) {
            drop_qp_completions(qp->recv_cq, qp->qp_num);
        }
    }
    return 0;
}

int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
    shim_qp* q = to_qp(qp);
    if (q == nullptr || attr == nullptr) {
        return EINVAL;
    }
    auto req = proto::make_message<proto::query_qp_request>(
        static_cast<uint16_t>(proto::opcode::query_qp), 0);
    req.qp_handle = qp->handle;
    req.attr_mask = attr_mask;
    proto::query_qp_reply reply;
    if (const int error = q->context->chan->call(&req, sizeof(req), &reply, sizeof(reply));
        error != 0) {
        return error;
    }
    from_wire(reply.attr, *attr);
    if (qp->srq != nullptr) {
        attr->cap.max_recv_wr = 0;  // its receives are the SRQ's
        attr->cap.max_recv_sge = 0;
    }
    if (init_attr != nullptr) {
        init_attr->qp_context = qp->qp_context;
        init_attr->send_cq = qp->send_cq;
        init_attr->recv_cq = qp->recv_cq;
        init_attr->srq = qp->srq;
        init_attr->cap = attr->cap;
        init_attr->qp_type = qp->qp_type;
        init_attr->sq_sig_all = reply.sq_sig_all != 0 ? 1 : 0;
    }
    // As libibverbs: a queried state (jakirod may have moved the QP to ERR) becomes ibv_qp's.
    if ((attr_mask & IBV_QP_STATE) != 0) {
        qp->state = attr->qp_state;
        q->state.store(attr->qp_state, std::memory_order_relaxed);
    }
    return 0;
}

int destroy_qp(ibv_qp* qp) {
    shim_qp* q = to_qp(qp);
    if (q == nullptr) {
        return EINVAL;
    }
    shim_context* c = q->context;
    // Succeeds once jakirod is gone (destroy_object reads EIO as done).
    if (const int error = destroy_object(c, proto::opcode::destroy_qp, qp->handle); error != 0) {
        return error;
    }
    {
        const std::lock_guard lock(c->targets->mutex);
        c->targets->qps.erase(qp->handle);
    }
    // As libibverbs: every async event handed out for this QP must have been acknowledged.
    pthread_mutex_lock(&qp->mutex);
    while (qp->events_completed != q->async_events_reported) {
        pthread_cond_wait(&qp->cond, &qp->mutex);
    }
    pthread_mutex_unlock(&qp->mutex);
    munmap(q->ring, q->ring_bytes);
    munmap(q->doorbell, proto::doorbell_bytes);
    release_qp_ex(*q);
    pthread_cond_destroy(&qp->cond);
    pthread_mutex_destroy(&qp->mutex);
    q->magic = 0;
    delete q;
    return 0;
}

}  // namespace jakiro::verbs_shim
