#include "verbs_shim/idle_backoff.hh"

#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace jakiro::verbs_shim::idle_backoff {

namespace {

bool naps_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("JAKIRO_POLL_YIELD");
        return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    return on;
}

std::atomic<bool> waitv_missing{false};

// destroy_cq and resize_cq take it alone before they unmap a ring; a nap holds it shared while
// it touches the rings it remembers. A waiting writer goes first (naps follow one another
// without a gap in a program with several polling threads: a lock that let readers through
// would keep destroy_cq waiting for good); it waits for the naps in progress, 50 µs at most.
// `generation` moves with each retirement: a thread whose remembered CQs are of an older one
// forgets them before it touches any.
pthread_rwlock_t rings_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
std::atomic<uint64_t> generation{0};

// A child forked while another thread napped inherits the lock held by a reader that does not
// exist in it: its first destroy_cq would wait for good. Only the forking thread lives on in
// the child, and it was not napping (fork is not called from a nap), so the child starts with
// the lock free.
void free_lock_in_child() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&rings_lock, &attr);
    pthread_rwlockattr_destroy(&attr);
}
std::once_flag fork_handler;

struct remembered {
    verbs_proto::cq_ring_header* ring;
    uint32_t seen;       // its producer at the thread's last empty poll of it
    uint32_t polled_at;  // the thread's empty-poll count then
};

// A CQ the thread found empty within this many of its last empty polls is one it still polls
// (a loop over its CQs comes back to each within max_cqs polls); one it stopped polling, whose
// producer another thread may have moved, must not keep it from napping.
constexpr uint32_t recent_polls = 2 * max_cqs;

struct thread_state {
    uint32_t empty = 0;  // empty polls since the last completion, up to `spins`
    uint32_t polls = 0;  // empty polls ever (wraps)
    unsigned count = 0;
    uint64_t generation = 0;
    remembered cqs[max_cqs];
};
thread_local thread_state self;

void forget_if_retired() {
    const uint64_t now = generation.load(std::memory_order_acquire);
    if (self.generation != now) {
        self.count = 0;
        self.generation = now;
    }
}

timespec monotonic_after(long ns) {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_nsec += ns;
    if (t.tv_nsec >= 1'000'000'000) {
        t.tv_nsec -= 1'000'000'000;
        ++t.tv_sec;
    }
    return t;
}

// The nap, under rings_lock (shared).
void nap_holding_lock() {
    forget_if_retired();
    verbs_proto::cq_ring_header* rings[max_cqs];
    uint32_t seen[max_cqs];
    unsigned n = 0;
    unsigned last = 0;  // the CQ polled last, among them
    for (unsigned i = 0; i < self.count; ++i) {
        if (self.polls - self.cqs[i].polled_at < recent_polls) {
            if (self.cqs[i].polled_at == self.polls) {
                last = n;
            }
            rings[n] = self.cqs[i].ring;
            seen[n++] = self.cqs[i].seen;
        }
    }
    if (n == 0) {
        return;  // what it remembered was retired meanwhile: it polls again
    }
    if (n > 1 && !waitv_missing.load(std::memory_order_relaxed)) {
        if (verbs_proto::nap_until_any_completion(rings, seen, n, monotonic_after(nap_ns))) {
            return;
        }
        waitv_missing.store(true, std::memory_order_relaxed);
    }
    verbs_proto::nap_until_completion(*rings[last], seen[last], timespec{0, nap_ns});
}

}  // namespace

void on_progress() {
    self.empty = 0;
    self.count = 0;
}

bool after_empty_poll(verbs_proto::cq_ring_header& ring, uint32_t seen) {
    forget_if_retired();
    const uint32_t at = ++self.polls;
    unsigned i = 0;
    while (i < self.count && self.cqs[i].ring != &ring) {
        ++i;
    }
    if (i == self.count) {
        if (self.count < max_cqs) {
            ++self.count;
        } else {  // forget the one found empty longest ago
            i = 0;
            for (unsigned j = 1; j < self.count; ++j) {
                if (at - self.cqs[j].polled_at > at - self.cqs[i].polled_at) {
                    i = j;
                }
            }
        }
    }
    self.cqs[i] = {&ring, seen, at};
    if (self.empty < spins) {
        ++self.empty;
        return false;
    }
    return true;
}

void nap() {
    if (!naps_enabled()) {
        return;
    }
    // Registered before the first nap: until then no thread can hold the lock at a fork.
    std::call_once(fork_handler, [] { pthread_atfork(nullptr, nullptr, free_lock_in_child); });
    pthread_rwlock_rdlock(&rings_lock);
    nap_holding_lock();
    pthread_rwlock_unlock(&rings_lock);
}

void retire_cq_rings() {
    pthread_rwlock_wrlock(&rings_lock);
    generation.fetch_add(1, std::memory_order_acq_rel);
    pthread_rwlock_unlock(&rings_lock);
}

unsigned remembered_cqs() {
    forget_if_retired();
    return self.count;
}

bool remembers(const verbs_proto::cq_ring_header& ring) {
    forget_if_retired();
    for (unsigned i = 0; i < self.count; ++i) {
        if (self.cqs[i].ring == &ring) {
            return true;
        }
    }
    return false;
}

}  // namespace jakiro::verbs_shim::idle_backoff
