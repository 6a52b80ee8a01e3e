#include "verbs_shim/cq.hh"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <new>
#include <type_traits>

#include "verbs_abi/protocol.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/debug.hh"
#include "verbs_shim/device_death.hh"
#include "verbs_shim/idle_backoff.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

static_assert(std::is_standard_layout_v<shim_cq> && offsetof(shim_cq, cq) == 0);
static_assert(std::is_standard_layout_v<shim_comp_channel> &&
              offsetof(shim_comp_channel, channel) == 0);
static_assert(proto::arm_next != 0 && proto::arm_solicited != 0);

namespace {

// Asks jakirod to drop a CQ the shim could not take into use (a malformed ring).
void abandon_cq(shim_context* c, uint32_t handle) {
    destroy_object(c, proto::opcode::destroy_cq, handle);
}

// Maps and checks the ring jakirod sent: size, identity, capacity. nullptr (errno set) if it
// is not the ring that was promised.
proto::cq_ring_header* map_ring(int fd, uint32_t capacity, uint64_t ring_bytes, uint32_t cqe) {
    struct stat st {};
    if (!proto::is_power_of_two(capacity) || capacity < cqe ||
        ring_bytes != proto::cq_ring_bytes(capacity) || fstat(fd, &st) != 0 ||
        static_cast<uint64_t>(st.st_size) != ring_bytes) {
        errno = EPROTO;
        return nullptr;
    }
    void* base = mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        return nullptr;
    }
    auto* h = static_cast<proto::cq_ring_header*>(base);
    if (h->magic != proto::cq_ring_magic || h->version != proto::cq_ring_version ||
        h->capacity != capacity || h->slot_size != sizeof(proto::cqe)) {
        munmap(base, ring_bytes);
        errno = EPROTO;
        return nullptr;
    }
    return h;
}

// The ring pointer is read without the poll lock only by req_notify_cq (see resize_cq).
std::atomic_ref<proto::cq_ring_header*> ring_of(shim_cq& q) {
    return std::atomic_ref<proto::cq_ring_header*>(q.ring);
}

void fill_wc(const proto::cqe& e, ibv_wc& wc) {
    wc.wr_id = e.wr_id;
    wc.status = static_cast<ibv_wc_status>(e.status);
    wc.opcode = static_cast<ibv_wc_opcode>(e.opcode);
    wc.vendor_err = e.vendor_err;
    wc.byte_len = e.byte_len;
    wc.imm_data = e.imm_data;  // already in network byte order
    wc.qp_num = e.qp_num;
    wc.src_qp = e.src_qp;
    wc.wc_flags = e.wc_flags;
    wc.pkey_index = e.pkey_index;
    wc.slid = e.slid;
    wc.sl = e.sl;
    wc.dlid_path_bits = e.dlid_path_bits;
}

}  // namespace

shim_cq* to_cq(ibv_cq* cq) {
    auto* c = reinterpret_cast<shim_cq*>(cq);
    return c != nullptr && c->magic == cq_magic ? c : nullptr;
}

shim_comp_channel* to_channel(ibv_comp_channel* channel) {
    auto* c = reinterpret_cast<shim_comp_channel*>(channel);
    return c != nullptr && c->magic == channel_magic ? c : nullptr;
}

ibv_comp_channel* create_comp_channel(ibv_context* context) {
    if (to_context(context) == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    auto* ch = new (std::nothrow) shim_comp_channel{};
    if (ch == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    // SEQPACKET: one message per event, and jakirod can send without ever blocking
    // (MSG_DONTWAIT), which an eventfd a program filled up would not allow it.
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        const int error = errno;
        delete ch;
        errno = error;
        return nullptr;
    }
    ch->channel.context = context;
    ch->channel.fd = pair[0];
    ch->channel.refcnt = 0;
    ch->magic = channel_magic;
    ch->peer_fd = pair[1];
    // We hold jakirod's end too, so its death cannot end the channel: device_death does.
    to_context(context)->death->add_channel(pair[0]);
    return &ch->channel;
}

int destroy_comp_channel(ibv_comp_channel* channel) {
    shim_comp_channel* ch = to_channel(channel);
    if (ch == nullptr) {
        return EINVAL;
    }
    ibv_context* context = channel->context;
    pthread_mutex_lock(&context->mutex);
    if (channel->refcnt != 0) {
        pthread_mutex_unlock(&context->mutex);
        return EBUSY;  // CQs still use it, as libibverbs says
    }
    if (shim_context* c = to_context(context)) {
        c->death->remove_channel(channel->fd);  // before the number can be reused
    }
    close(channel->fd);
    close(ch->peer_fd);  // jakirod's copies went with the CQs
    ch->magic = 0;
    delete ch;
    pthread_mutex_unlock(&context->mutex);
    return 0;
}

ibv_cq* create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                  int comp_vector) {
    return create_cq_flagged(context, cqe, cq_context, channel, comp_vector, 0);
}

ibv_cq* create_cq_flagged(ibv_context* context, int cqe, void* cq_context,
                          ibv_comp_channel* channel, int comp_vector, uint32_t extra_flags) {
    shim_context* c = to_context(context);
    shim_comp_channel* ch = channel != nullptr ? to_channel(channel) : nullptr;
    if (c == nullptr || (channel != nullptr && (ch == nullptr || channel->context != context)) ||
        cqe <= 0 || static_cast<uint32_t>(cqe) > c->hello.lim.max_cqe || comp_vector < 0 ||
        comp_vector >= context->num_comp_vectors) {
        errno = EINVAL;
        return nullptr;
    }
    auto* q = new (std::nothrow) shim_cq{};
    if (q == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    auto req = proto::make_message<proto::create_cq_request>(
        static_cast<uint16_t>(proto::opcode::create_cq), 0);
    req.cqe = static_cast<uint32_t>(cqe);
    req.comp_vector = static_cast<uint32_t>(comp_vector);
    req.flags = (ch != nullptr ? uint32_t{proto::cq_with_channel} : 0u) | extra_flags;
    proto::create_cq_reply reply;
    int ring_fd = -1;
    if (const int error = c->chan->call(&req, sizeof(req), &reply, sizeof(reply), &ring_fd,
                                        ch != nullptr ? ch->peer_fd : -1);
        error != 0) {
        delete q;
        errno = error;
        return nullptr;
    }
    proto::cq_ring_header* ring =
        map_ring(ring_fd, reply.capacity, reply.ring_bytes, static_cast<uint32_t>(cqe));
    const int map_error = errno;
    close(ring_fd);  // the mapping keeps the ring
    if (ring == nullptr) {
        debug("ibv_create_cq: jakirod's ring for CQ %#x is not usable", reply.cq_handle);
        abandon_cq(c, reply.cq_handle);
        delete q;
        errno = map_error;
        return nullptr;
    }
    q->ring = ring;
    q->ring_bytes = reply.ring_bytes;
    q->capacity = reply.capacity;
    q->context = c;
    // What libibverbs' verbs_init_cq does for a provider's CQ.
    q->cq.context = context;
    q->cq.channel = channel;
    q->cq.cq_context = cq_context;
    q->cq.handle = reply.cq_handle;
    q->cq.cqe = static_cast<int>(reply.capacity);
    q->cq.comp_events_completed = 0;
    q->cq.async_events_completed = 0;
    pthread_mutex_init(&q->cq.mutex, nullptr);
    pthread_cond_init(&q->cq.cond, nullptr);
    q->magic = cq_magic;
    {
        const std::lock_guard lock(c->targets->mutex);
        c->targets->cqs[reply.cq_handle] = q;
    }
    if (channel != nullptr) {
        pthread_mutex_lock(&context->mutex);
        ++channel->refcnt;
        pthread_mutex_unlock(&context->mutex);
    }
    return &q->cq;
}

int destroy_cq(ibv_cq* cq) {
    shim_cq* q = to_cq(cq);
    if (q == nullptr) {
        return EINVAL;
    }
    shim_context* c = q->context;
    // EBUSY while QPs use it (jakirod keeps the count).
    if (const int error = destroy_object(c, proto::opcode::destroy_cq, cq->handle); error != 0) {
        return error;
    }
    {
        const std::lock_guard lock(c->targets->mutex);
        c->targets->cqs.erase(cq->handle);
    }
    // As libibverbs: every event handed out must have been acknowledged first.
    pthread_mutex_lock(&cq->mutex);
    while (cq->comp_events_completed != q->comp_events_reported ||
           cq->async_events_completed != q->async_events_reported) {
        pthread_cond_wait(&cq->cond, &cq->mutex);
    }
    pthread_mutex_unlock(&cq->mutex);
    if (ibv_comp_channel* channel = cq->channel) {
        pthread_mutex_lock(&cq->context->mutex);
        --channel->refcnt;
        pthread_mutex_unlock(&cq->context->mutex);
    }
    idle_backoff::retire_cq_rings();  // no thread naps on the rings any more
    munmap(q->ring, q->ring_bytes);
    if (q->retired_ring != nullptr) {
        munmap(q->retired_ring, q->retired_ring_bytes);
    }
    pthread_cond_destroy(&cq->cond);
    pthread_mutex_destroy(&cq->mutex);
    q->magic = 0;
    delete q;
    return 0;
}

int resize_cq(ibv_cq* cq, int cqe) {
    shim_cq* q = to_cq(cq);
    if (q == nullptr) {
        return EINVAL;
    }
    shim_context* c = q->context;
    if (cqe <= 0 || static_cast<uint32_t>(cqe) > c->hello.lim.max_cqe) {
        return EINVAL;
    }
    // No poll of this process reads the old ring while jakirod moves its unconsumed
    // completions to the new one: the consumer index it reads must stay where it is.
    const std::lock_guard lock(q->poll_lock);
    auto req = proto::make_message<proto::resize_cq_request>(
        static_cast<uint16_t>(proto::opcode::resize_cq), 0);
    req.cq_handle = cq->handle;
    req.cqe = static_cast<uint32_t>(cqe);
    proto::resize_cq_reply reply;
    int ring_fd = -1;
    if (const int error = c->chan->call(&req, sizeof(req), &reply, sizeof(reply), &ring_fd);
        error != 0) {
        return error;  // EINVAL: more completions wait than `cqe` holds; the CQ is unchanged
    }
    proto::cq_ring_header* ring =
        map_ring(ring_fd, reply.capacity, reply.ring_bytes, static_cast<uint32_t>(cqe));
    const int map_error = errno;
    close(ring_fd);
    // jakirod published `outstanding` completions in the new ring before it answered, and its
    // engine may have added more since (never more than a ring's worth beyond our consumer, 0).
    if (ring == nullptr || reply.outstanding > reply.capacity ||
        proto::load_producer_acquire(*ring) - reply.outstanding > reply.capacity) {
        // jakirod completes into a ring we cannot read: this CQ is lost to the program.
        debug("ibv_resize_cq: jakirod's new ring for CQ %#x is not usable", cq->handle);
        if (ring != nullptr) {
            munmap(ring, reply.ring_bytes);
        }
        return ring == nullptr ? map_error : EPROTO;
    }
    proto::cq_ring_header* old = q->ring;
    // An ibv_req_notify_cq of another thread may have armed the old ring after jakirod looked:
    // the new ring gets that arm too, so no completion event is lost to the race.
    if (const uint32_t arm = proto::shared_index(old->arm).load(std::memory_order_acquire);
        arm != 0) {
        proto::arm_and_fence(*ring, arm & (proto::arm_next | proto::arm_solicited));
    }
    ring_of(*q).store(ring, std::memory_order_release);
    // req_notify_cq takes no lock, so a thread may still hold the old pointer: the old ring
    // stays mapped until the next resize (or destroy), one retired ring at most.
    if (q->retired_ring != nullptr) {
        idle_backoff::retire_cq_rings();  // no thread naps on it any more
        munmap(q->retired_ring, q->retired_ring_bytes);
    }
    q->retired_ring = old;
    q->retired_ring_bytes = q->ring_bytes;
    q->ring_bytes = reply.ring_bytes;
    q->capacity = reply.capacity;
    cq->cqe = static_cast<int>(reply.capacity);
    return 0;
}

void drop_qp_completions(ibv_cq* cq, uint32_t qp_num) {
    shim_cq* q = to_cq(cq);
    if (q == nullptr) {
        return;
    }
    // Under the poll lock: no poll (or ibv_start_poll session) reads the slots being moved.
    const std::lock_guard lock(q->poll_lock);
    proto::drop_completions_of(*q->ring, q->capacity, qp_num);
}

int get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
    shim_comp_channel* ch = to_channel(channel);
    if (ch == nullptr || cq == nullptr || cq_context == nullptr) {
        errno = EINVAL;
        return -1;
    }
    shim_context* c = to_context(channel->context);
    if (c == nullptr) {
        errno = EINVAL;
        return -1;
    }
    for (;;) {
        proto::comp_event_message m;
        // Blocks unless the program made channel->fd non-blocking (then EAGAIN), as a
        // read() of a kernel completion channel does; never past jakirod's end: then EIO,
        // as a kernel channel of a disassociated device (device_death.hh).
        const ssize_t n = receive_event(*c->death, channel->fd, &m, sizeof(m));
        if (n <= 0) {
            if (n == 0) {
                errno = EIO;
            }
            return -1;
        }
        if (static_cast<size_t>(n) != sizeof(m) || m.hdr.magic != proto::magic ||
            m.hdr.version != proto::version ||
            m.hdr.opcode != static_cast<uint16_t>(proto::opcode::comp_event)) {
            errno = EPROTO;
            return -1;
        }
        const std::lock_guard lock(c->targets->mutex);
        const auto it = c->targets->cqs.find(m.cq_handle);
        if (it == c->targets->cqs.end() || it->second->cq.channel != channel) {
            continue;  // an event of a CQ destroyed since: the kernel drops those too
        }
        shim_cq* q = it->second;
        pthread_mutex_lock(&q->cq.mutex);
        ++q->comp_events_reported;
        pthread_mutex_unlock(&q->cq.mutex);
        *cq = &q->cq;
        *cq_context = q->cq.cq_context;
        return 0;
    }
}

void ack_cq_events(ibv_cq* cq, unsigned int nevents) {
    if (to_cq(cq) == nullptr) {
        return;
    }
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

namespace {

// poll_cq under the CQ's poll lock; `nap` says whether the caller should nap once it is out.
int poll_under_lock(shim_cq* q, int num_entries, ibv_wc* wc, bool& nap) {
    const std::lock_guard lock(q->poll_lock);
    const uint32_t consumer = proto::load_own_consumer(*q->ring);
    const uint32_t producer = proto::load_producer_acquire(*q->ring);
    // jakirod never runs more than `capacity` ahead; if it seemed to, read only a ring's worth.
    const uint32_t ready = std::min(producer - consumer, q->capacity);
    const uint32_t n = std::min(ready, static_cast<uint32_t>(num_entries));
    const proto::cqe* slots = proto::cq_slots(q->ring);
    for (uint32_t i = 0; i < n; ++i) {
        fill_wc(slots[(consumer + i) & (q->capacity - 1)], wc[i]);
    }
    if (n != 0) {
        proto::release_slots(*q->ring, consumer + n);
        idle_backoff::on_progress();
    } else if (q->context->death->check()) {
        // jakirod is gone and what it published is read: flush what it never completed.
        return q->context->death->flush_completions(*q, num_entries, wc);
    } else {
        nap = idle_backoff::after_empty_poll(*q->ring, producer);
    }
    return static_cast<int>(n);
}

}  // namespace

int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
    shim_cq* q = to_cq(cq);
    if (q == nullptr || (num_entries > 0 && wc == nullptr)) {
        return -EINVAL;  // negative: never a count of completions
    }
    if (num_entries <= 0) {
        return 0;
    }
    bool nap = false;
    const int n = poll_under_lock(q, num_entries, wc, nap);
    if (nap) {
        // After the lock: another thread may poll the CQ meanwhile. A resize or destroy
        // meanwhile waits for the nap (idle_backoff::retire_cq_rings).
        idle_backoff::nap();
    }
    return n;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
    shim_cq* q = to_cq(cq);
    if (q == nullptr) {
        return EINVAL;
    }
    proto::arm_and_fence(*ring_of(*q).load(std::memory_order_acquire),
                         solicited_only ? proto::arm_solicited : proto::arm_next);
    return 0;
}

}  // namespace jakiro::verbs_shim
