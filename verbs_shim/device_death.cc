#include "verbs_shim/device_death.hh"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <new>

#include "verbs_abi/rings.hh"
#include "verbs_abi/wc_opcode.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/cq.hh"
#include "verbs_shim/qp.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

namespace {

void fill_flushed(ibv_wc& wc, uint64_t wr_id, ibv_wc_opcode opcode, uint32_t qp_num) {
    wc = ibv_wc{};
    wc.wr_id = wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = opcode;
    wc.vendor_err = vendor_err_jakirod_gone;
    wc.qp_num = qp_num;
}

// The outstanding part of a queue: from what jakirod retired (acquire) to the shim's own
// producer, read under the queue's lock so no post is half done (and none can follow: the
// device is dead). A retired index that makes no sense (ahead of ours, or more than a ring
// behind) reads as a full ring, as in post.cc: every slot we wrote then counts as outstanding,
// since reporting a work request twice is better than never.
template <typename Range>
void take_range(Range& r, std::mutex& lock, const uint32_t& head, const uint32_t& retired_index,
                uint32_t capacity) {
    const std::lock_guard guard(lock);
    const uint32_t end = head;
    uint32_t used = end - proto::load_retired_acquire(retired_index);
    if (used > capacity) {
        used = std::min(end, capacity);
    }
    r.taken = true;
    r.next = end - used;
    r.end = end;
}

}  // namespace

bool device_death::look(int64_t now) {
    int64_t due = _next_look_ns.load(std::memory_order_relaxed);
    // One thread looks per interval; the others go on with what the flag says.
    if (now < due || !_next_look_ns.compare_exchange_strong(due, now + check_interval_ns,
                                                            std::memory_order_relaxed)) {
        return dead();
    }
    return check_now();
}

bool device_death::check_now() {
    if (dead()) {
        return true;
    }
    // POLLRDHUP alone: a reply waiting on the channel (another thread's control verb) is not
    // our business; a hang-up (jakirod exited or dropped us) or an error is.
    pollfd p{_watch_fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) {
        mark_dead();
    }
    return dead();
}

void device_death::mark_dead() {
    if (_dead.exchange(true)) {
        return;
    }
    // Wake every waiter: a reader of these sockets gets what is queued, then end-of-file.
    if (_async_fd >= 0) {
        shutdown(_async_fd, SHUT_RD);
    }
    const std::lock_guard lock(_channels_mutex);
    for (int fd : _channels) {
        shutdown(fd, SHUT_RD);
    }
}

void device_death::add_channel(int fd) {
    const std::lock_guard lock(_channels_mutex);
    try {
        _channels.push_back(fd);
    } catch (const std::bad_alloc&) {
        // Not tracked: a program waiting on it in its own poll() is not woken by a death;
        // ibv_get_cq_event still is.
    }
    if (dead()) {
        shutdown(fd, SHUT_RD);  // a channel made after the death is dead from the start
    }
}

void device_death::remove_channel(int fd) {
    const std::lock_guard lock(_channels_mutex);
    std::erase(_channels, fd);
}

int device_death::flush_completions(shim_cq& cq, int num_entries, ibv_wc* wc) {
    shim_context* c = cq.context;
    const std::lock_guard flush_lock(_flush_mutex);
    const std::lock_guard targets_lock(c->targets->mutex);
    int n = 0;
    for (const auto& [handle, qp] : c->targets->qps) {
        if (n == num_entries) {
            break;
        }
        const bool sends = qp->qp.send_cq == &cq.cq;
        // Receives of a QP on an SRQ live in the SRQ's ring: as on an RNIC, a QP's error
        // does not flush them.
        const bool recvs = qp->qp.recv_cq == &cq.cq && qp->qp.srq == nullptr;
        if (!sends && !recvs) {
            continue;
        }
        qp_flush* f;
        try {
            f = &_flushes[qp];
        } catch (const std::bad_alloc&) {
            return n > 0 ? n : -ENOMEM;
        }
        if (sends) {
            if (!f->sq.taken) {
                take_range(f->sq, qp->sq_lock, qp->sq_head, qp->ring->sq_consumer, qp->sq_capacity);
            }
            for (; n < num_entries && f->sq.next != f->sq.end; ++f->sq.next, ++n) {
                const proto::send_wqe& slot = qp->sq[f->sq.next & (qp->sq_capacity - 1)];
                fill_flushed(wc[n], slot.wr_id, proto::wc_opcode_of(slot.opcode), qp->qp.qp_num);
            }
        }
        if (recvs) {
            if (!f->rq.taken) {
                take_range(f->rq, qp->rq_lock, qp->rq_head, qp->ring->rq_consumer, qp->rq_capacity);
            }
            for (; n < num_entries && f->rq.next != f->rq.end; ++f->rq.next, ++n) {
                const proto::recv_wqe& slot = qp->rq[f->rq.next & (qp->rq_capacity - 1)];
                fill_flushed(wc[n], slot.wr_id, IBV_WC_RECV, qp->qp.qp_num);
            }
        }
    }
    return n;
}

ssize_t receive_event(device_death& death, int fd, void* buffer, std::size_t size) {
    for (;;) {
        ssize_t n = recv(fd, buffer, size, MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            return n;
        }
        if (death.check_now()) {
            // One more look: a message jakirod sent just before it went is still its last word.
            n = recv(fd, buffer, size, MSG_DONTWAIT);
            return n > 0 ? n : 0;
        }
        const int flags = fcntl(fd, F_GETFL);
        if (flags < 0) {
            return -1;
        }
        if ((flags & O_NONBLOCK) != 0) {
            errno = EAGAIN;  // as a read() of a non-blocking kernel channel
            return -1;
        }
        pollfd p[2] = {{fd, POLLIN, 0}, {death.watch_fd(), POLLRDHUP, 0}};
        if (poll(p, 2, -1) < 0) {
            return -1;
        }
    }
}

}  // namespace jakiro::verbs_shim
