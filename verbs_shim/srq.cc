#include "verbs_shim/srq.hh"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <type_traits>

#include "verbs_shim/context.hh"
#include "verbs_shim/debug.hh"
#include "verbs_shim/device_death.hh"
#include "verbs_shim/pd.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

static_assert(std::is_standard_layout_v<shim_srq> && offsetof(shim_srq, srq) == 0);
static_assert(int{proto::srq_attr_max_wr} == int{IBV_SRQ_MAX_WR} &&
              int{proto::srq_attr_limit} == int{IBV_SRQ_LIMIT});
static_assert(static_cast<int>(proto::event_type::srq_err) == IBV_EVENT_SRQ_ERR &&
              static_cast<int>(proto::event_type::srq_limit_reached) ==
                  IBV_EVENT_SRQ_LIMIT_REACHED &&
              static_cast<int>(proto::event_type::qp_last_wqe_reached) ==
                  IBV_EVENT_QP_LAST_WQE_REACHED);

namespace {

// What jakirod promised must be at least what was asked and fit the ring's slots.
bool reply_fits(const proto::create_srq_reply& r, const ibv_srq_attr& asked,
                const proto::limits& lim) {
    const uint32_t most_slots = std::bit_ceil(std::max(lim.max_srq_wr, 1u));
    return proto::is_power_of_two(r.capacity) && r.capacity >= asked.max_wr &&
           r.capacity <= most_slots && r.max_sge >= asked.max_sge &&
           r.max_sge <= proto::wqe_max_sge && r.ring_bytes == proto::srq_ring_bytes(r.capacity);
}

// Maps and checks the ring jakirod sent: size, identity, capacity. nullptr (errno set) if it
// is not the ring that was promised.
proto::srq_ring_header* map_ring(int fd, const proto::create_srq_reply& reply) {
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
    auto* h = static_cast<proto::srq_ring_header*>(base);
    if (h->magic != proto::srq_ring_magic || h->version != proto::srq_ring_version ||
        h->capacity != reply.capacity || h->slot_size != proto::wqe_size ||
        h->srq_handle != reply.srq_handle) {
        munmap(base, reply.ring_bytes);
        errno = EPROTO;
        return nullptr;
    }
    return h;
}

// Free slots: jakirod frees a slot when it takes its WQE (acquire: its copy is done). A
// consumer ahead of us or more than a ring behind makes no sense and reads as "full".
uint32_t free_slots(uint32_t head, const uint32_t& consumer, uint32_t capacity) {
    const uint32_t used = head - proto::load_retired_acquire(consumer);
    return used <= capacity ? capacity - used : 0;
}

}  // namespace

shim_srq* to_srq(ibv_srq* srq) {
    auto* s = reinterpret_cast<shim_srq*>(srq);
    return s != nullptr && s->magic == srq_magic ? s : nullptr;
}

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
    shim_pd* p = to_pd(pd);
    if (p == nullptr || attr == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    shim_context* c = p->context;
    const proto::limits& lim = c->hello.lim;
    const uint32_t max_sge = std::min(lim.max_srq_sge, proto::wqe_max_sge);
    if (attr->attr.max_wr == 0 || attr->attr.max_wr > lim.max_srq_wr ||
        attr->attr.max_sge > max_sge) {
        debug("ibv_create_srq: %u WRs, %u SGEs: the device takes 1..%u WRs and %u SGEs",
              attr->attr.max_wr, attr->attr.max_sge, lim.max_srq_wr, max_sge);
        errno = EINVAL;
        return nullptr;
    }
    auto* s = new (std::nothrow) shim_srq{};
    if (s == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    auto req = proto::make_message<proto::create_srq_request>(
        static_cast<uint16_t>(proto::opcode::create_srq), 0);
    req.pd_handle = pd->handle;
    req.max_wr = attr->attr.max_wr;
    req.max_sge = attr->attr.max_sge;
    // "srq_limit ... irrelevant for ibv_create_srq": not armed, and jakirod refuses a limit
    // above the queue, so only a meaningful one travels.
    req.srq_limit = attr->attr.srq_limit <= attr->attr.max_wr ? attr->attr.srq_limit : 0;
    proto::create_srq_reply reply;
    int fd = -1;
    if (const int error = c->chan->call(&req, sizeof(req), &reply, sizeof(reply), &fd);
        error != 0) {
        delete s;
        errno = error;
        return nullptr;
    }
    proto::srq_ring_header* ring = nullptr;
    int map_error = EPROTO;
    if (!reply_fits(reply, attr->attr, lim)) {
        debug("ibv_create_srq: jakirod's SRQ %#x (%u slots, %u SGEs, %llu bytes) does not fit",
              reply.srq_handle, reply.capacity, reply.max_sge,
              static_cast<unsigned long long>(reply.ring_bytes));
    } else {
        ring = map_ring(fd, reply);
        map_error = errno;
    }
    close(fd);  // the mapping keeps the ring
    if (ring == nullptr) {
        debug("ibv_create_srq: jakirod's ring for SRQ %#x is not usable", reply.srq_handle);
        destroy_object(c, proto::opcode::destroy_srq, reply.srq_handle);
        delete s;
        errno = map_error;
        return nullptr;
    }
    s->ring = ring;
    s->ring_bytes = reply.ring_bytes;
    s->slots = proto::srq_slots(ring);
    s->capacity = reply.capacity;
    s->max_sge = reply.max_sge;
    s->head = 0;
    s->context = c;
    s->srq.context = pd->context;
    s->srq.srq_context = attr->srq_context;
    s->srq.pd = pd;
    s->srq.handle = reply.srq_handle;
    s->srq.events_completed = 0;
    pthread_mutex_init(&s->srq.mutex, nullptr);
    pthread_cond_init(&s->srq.cond, nullptr);
    s->magic = srq_magic;
    {
        const std::lock_guard lock(c->targets->mutex);
        c->targets->srqs[reply.srq_handle] = s;
    }
    // As providers do: the caller learns what it really got.
    attr->attr.max_wr = reply.capacity;
    attr->attr.max_sge = reply.max_sge;
    return &s->srq;
}

ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
    if (attr == nullptr || to_context(context) == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    constexpr uint32_t basic_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
    const bool basic =
        (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) == 0 || attr->srq_type == IBV_SRQT_BASIC;
    if ((attr->comp_mask & ~basic_mask) != 0 || !basic) {
        debug(
            "ibv_create_srq_ex: only basic SRQs are supported (comp_mask %#x, type %d): "
            "no XRC, no tag matching",
            attr->comp_mask, static_cast<int>(attr->srq_type));
        errno = EOPNOTSUPP;
        return nullptr;
    }
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) == 0 || attr->pd == nullptr ||
        attr->pd->context != context) {
        errno = EINVAL;
        return nullptr;
    }
    // ibv_srq_init_attr is the prefix of ibv_srq_init_attr_ex (libibverbs relies on it too).
    static_assert(offsetof(ibv_srq_init_attr_ex, attr) == offsetof(ibv_srq_init_attr, attr));
    return create_srq(attr->pd, reinterpret_cast<ibv_srq_init_attr*>(attr));
}

int modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask) {
    shim_srq* s = to_srq(srq);
    if (s == nullptr || attr == nullptr || (attr_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) != 0) {
        return EINVAL;
    }
    if ((attr_mask & IBV_SRQ_MAX_WR) != 0) {
        debug("ibv_modify_srq: resizing an SRQ (IBV_SRQ_MAX_WR) is not supported");
        return EOPNOTSUPP;
    }
    if ((attr_mask & IBV_SRQ_LIMIT) != 0 && attr->srq_limit > s->capacity) {
        return EINVAL;
    }
    auto req = proto::make_message<proto::modify_srq_request>(
        static_cast<uint16_t>(proto::opcode::modify_srq), 0);
    req.srq_handle = srq->handle;
    req.attr_mask = static_cast<uint32_t>(attr_mask);
    req.srq_limit = (attr_mask & IBV_SRQ_LIMIT) != 0 ? attr->srq_limit : 0;
    proto::reply_header reply;
    return s->context->chan->call(&req, sizeof(req), &reply, sizeof(reply));
}

int query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
    shim_srq* s = to_srq(srq);
    if (s == nullptr || attr == nullptr) {
        return EINVAL;
    }
    auto req = proto::make_message<proto::query_srq_request>(
        static_cast<uint16_t>(proto::opcode::query_srq), 0);
    req.srq_handle = srq->handle;
    proto::query_srq_reply reply;
    if (const int error = s->context->chan->call(&req, sizeof(req), &reply, sizeof(reply));
        error != 0) {
        return error;
    }
    attr->max_wr = reply.max_wr;
    attr->max_sge = reply.max_sge;
    attr->srq_limit = reply.srq_limit;
    return 0;
}

int destroy_srq(ibv_srq* srq) {
    shim_srq* s = to_srq(srq);
    if (s == nullptr) {
        return EINVAL;
    }
    shim_context* c = s->context;
    // EBUSY while QPs use it; succeeds once jakirod is gone (destroy_object reads EIO as done).
    if (const int error = destroy_object(c, proto::opcode::destroy_srq, srq->handle); error != 0) {
        return error;
    }
    {
        const std::lock_guard lock(c->targets->mutex);
        c->targets->srqs.erase(srq->handle);
    }
    // As libibverbs: every async event handed out for this SRQ must have been acknowledged.
    pthread_mutex_lock(&srq->mutex);
    while (srq->events_completed != s->async_events_reported) {
        pthread_cond_wait(&srq->cond, &srq->mutex);
    }
    pthread_mutex_unlock(&srq->mutex);
    munmap(s->ring, s->ring_bytes);
    pthread_cond_destroy(&srq->cond);
    pthread_mutex_destroy(&srq->mutex);
    s->magic = 0;
    delete s;
    return 0;
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    shim_srq* s = to_srq(srq);
    int error = 0;
    ibv_recv_wr* failed = nullptr;
    if (s == nullptr) {
        error = EINVAL;
        failed = wr;
    } else if (wr != nullptr && s->context->death->check()) {
        error = EIO;  // jakirod is gone (device_death.hh)
        failed = wr;
    } else if (wr != nullptr) {
        const std::lock_guard lock(s->lock);
        uint32_t head = s->head;
        uint32_t room = 0;  // looked up when needed: jakirod takes WQEs meanwhile
        for (; wr != nullptr; wr = wr->next) {
            if (room == 0) {
                room = free_slots(head, s->ring->consumer, s->capacity);
            }
            if (room == 0) {
                error = ENOMEM;
            } else if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > s->max_sge ||
                       (wr->num_sge > 0 && wr->sg_list == nullptr)) {
                error = EINVAL;
            }
            if (error != 0) {
                failed = wr;
                break;
            }
            proto::recv_wqe& slot = s->slots[head & (s->capacity - 1)];
            std::memset(&slot, 0, offsetof(proto::recv_wqe, sg));
            slot.wr_id = wr->wr_id;
            slot.num_sge = static_cast<uint32_t>(wr->num_sge);
            for (int i = 0; i < wr->num_sge; ++i) {
                slot.sg[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
            }
            ++head;
            --room;
        }
        if (head != s->head) {
            s->head = head;
            proto::publish_wqes(s->ring->producer, head);
        }
    }
    if (error != 0 && bad_wr != nullptr) {
        *bad_wr = failed;
    }
    return error;
}

}  // namespace jakiro::verbs_shim
