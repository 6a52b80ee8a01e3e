#pragma once
// Shared-memory rings between libjakiro_verbs.so and jakirod: the layout of a completion
// queue in its memfd, and the index updates both sides make, each wrapped in a function named
// for why it orders what it orders (after rdma-core's util/udma_barrier.h). Never `volatile`:
// the indices are plain integers touched only through std::atomic_ref.
//
//  offset   0  line 0: producer index (u32, free-running)   written by jakirod only
//  offset  64  line 1: consumer index (u32, free-running)   written by the shim only
//  offset 128  line 2: arm bits (shim sets, jakirod clears), overflow flag (jakirod sets),
//               poller_napping (a napping poller sets it, jakirod takes it and wakes the poller)
//  offset 192  line 3: magic, version, capacity, slot size  written by jakirod before sharing
//  offset 256  slots[capacity], 64 bytes each (`cqe`)
//
// Indices run freely and wrap at 2^32; slot = index & (capacity - 1), capacity a power of
// two; the ring is full when producer - consumer == capacity. jakirod never trusts what it
// reads here: it keeps its own producer index and reads only the consumer index (a value it
// cannot make sense of reads as "full") and the arm bits.
//
// Plain C++, shared by jakirod and the shim: no verbs.h (the shim asserts that the values
// below are libibverbs').

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace jakiro::verbs_proto {

constexpr uint32_t cq_ring_magic = 0x5143'4b4a;  // "JKCQ"
constexpr uint32_t cq_ring_version = 1;
constexpr std::size_t cache_line = 64;

// One completion, as jakirod writes it and ibv_poll_cq copies it into an ibv_wc.
struct cqe {
    uint64_t wr_id;
    uint32_t status;      // ibv_wc_status
    uint32_t opcode;      // ibv_wc_opcode
    uint32_t vendor_err;  // 0, or the engine's reason code for an error status
    uint32_t byte_len;
    uint32_t imm_data;  // network byte order, as ibv_wc.imm_data (or the invalidated rkey)
    uint32_t qp_num;
    uint32_t src_qp;
    uint32_t wc_flags;  // ibv_wc_flags
    uint16_t pkey_index;
    uint16_t slid;
    uint8_t sl;
    uint8_t dlid_path_bits;
    uint8_t solicited;  // the request asked for a solicited event (matters to an armed CQ)
    uint8_t reserved0;
    // Only in CQs created with cq_with_timestamps (0 otherwise), stamped by jakirod as it
    // publishes the completion: the device clock (CLOCK_MONOTONIC ns) and the wall clock
    // (CLOCK_REALTIME ns). Version 1 rings had 16 reserved zero bytes here.
    uint64_t completion_ts;
    uint64_t wallclock_ns;
};
static_assert(sizeof(cqe) == 64);
static_assert(offsetof(cqe, completion_ts) == 48);
static_assert(offsetof(cqe, status) == 8);
static_assert(offsetof(cqe, imm_data) == 24);
static_assert(offsetof(cqe, pkey_index) == 40);
static_assert(offsetof(cqe, solicited) == 46);
static_assert(std::is_trivially_copyable_v<cqe>);

// ibv_req_notify_cq: "tell me about the next completion" or "... the next solicited one".
enum cq_arm : uint32_t {
    arm_next = 1u << 0,
    arm_solicited = 1u << 1,
};

struct cq_ring_header {
    alignas(cache_line) uint32_t producer;
    alignas(cache_line) uint32_t consumer;
    alignas(cache_line) uint32_t arm;  // cq_arm bits
    uint32_t overflow;                 // 1 once jakirod refused a completion: the CQ is in error
    uint32_t poller_napping;           // a poller naps until the next completion (futex word)
    alignas(cache_line) uint32_t magic;
    uint32_t version;
    uint32_t capacity;
    uint32_t slot_size;
};
static_assert(sizeof(cq_ring_header) == 256);
static_assert(offsetof(cq_ring_header, consumer) == 64);
static_assert(offsetof(cq_ring_header, arm) == 128);
static_assert(offsetof(cq_ring_header, overflow) == 132);
static_assert(offsetof(cq_ring_header, poller_napping) == 136);
static_assert(offsetof(cq_ring_header, magic) == 192);
static_assert(offsetof(cq_ring_header, capacity) == 200);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free,
              "indices are shared between processes: they must not need a lock");

constexpr std::size_t cq_slots_offset = sizeof(cq_ring_header);
constexpr std::size_t ring_page = 4096;

// Bytes of the memfd for a ring of `capacity` slots: header + slots, rounded to pages.
constexpr std::size_t cq_ring_bytes(uint32_t capacity) {
    const std::size_t raw = cq_slots_offset + std::size_t{capacity} * sizeof(cqe);
    return (raw + ring_page - 1) / ring_page * ring_page;
}

constexpr bool is_power_of_two(uint32_t v) {
    return v != 0 && (v & (v - 1)) == 0;
}

// A shared index viewed atomically. Loads of a const header go through here too: atomic_ref
// of a const type is not C++20, and a 4-byte atomic load never writes.
inline std::atomic_ref<uint32_t> shared_index(const uint32_t& index) {
    return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(index));
}

inline cqe* cq_slots(cq_ring_header* h) {
    return reinterpret_cast<cqe*>(reinterpret_cast<std::byte*>(h) + cq_slots_offset);
}

// ---------------------------------------------------------------- producer side (jakirod)

// The consumer has finished reading every slot below the index it returns: those slots may
// be overwritten (acquire: its reads of them happened before).
inline uint32_t load_consumer_acquire(const cq_ring_header& h) {
    return shared_index(h.consumer).load(std::memory_order_acquire);
}

// Makes the slots written below `producer` visible to a consumer that acquire-loads it.
inline void publish_producer(cq_ring_header& h, uint32_t producer) {
    shared_index(h.producer).store(producer, std::memory_order_release);
}

// Between publishing a completion and looking at the arm bits: a full fence, so that either
// jakirod sees an arm request made before the completion, or the shim's poll after arming
// (fence_after_arming) sees the completion. Without it both could miss each other and the
// application would sleep on a completion that is already there.
inline void fence_before_checking_arm() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

// Consumes the arm request if this completion satisfies it; true means "notify the channel".
inline bool take_arm(cq_ring_header& h, bool solicited) {
    auto arm = shared_index(h.arm);
    const uint32_t bits = arm.load(std::memory_order_relaxed);
    if ((bits & arm_next) == 0 && !((bits & arm_solicited) != 0 && solicited)) {
        return false;
    }
    return arm.exchange(0, std::memory_order_acq_rel) != 0;
}

// After publishing a completion: ends the nap of a poller that found the ring empty
// (nap_until_completion). The fence pairs with the poller's: either jakirod sees the flag or the
// poller sees the new producer. A system call only while a poller naps, and at most one per nap
// (the flag is taken); a program that keeps the flag set costs jakirod one wake per completion of
// its own, which jakirod charges to its vNIC as work. True if it made the call.
inline bool wake_napping_poller(cq_ring_header& h) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    auto napping = shared_index(h.poller_napping);
    if (napping.load(std::memory_order_relaxed) != 0 &&
        napping.exchange(0, std::memory_order_relaxed) != 0) {
        syscall(SYS_futex, &h.poller_napping, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
        return true;
    }
    return false;
}

inline void mark_overflow(cq_ring_header& h) {
    shared_index(h.overflow).store(1, std::memory_order_release);
}

// ---------------------------------------------------------------- consumer side (the shim)

// Completions below the returned index are fully written (acquire pairs with
// publish_producer).
inline uint32_t load_producer_acquire(const cq_ring_header& h) {
    return shared_index(h.producer).load(std::memory_order_acquire);
}

// The shim is the consumer index's only writer: reading back its own value needs no order.
inline uint32_t load_own_consumer(const cq_ring_header& h) {
    return shared_index(h.consumer).load(std::memory_order_relaxed);
}

// Hands the slots below `consumer` back to jakirod; release: our reads of them come first.
inline void release_slots(cq_ring_header& h, uint32_t consumer) {
    shared_index(h.consumer).store(consumer, std::memory_order_release);
}

// ibv_req_notify_cq. The fence pairs with fence_before_checking_arm (see there).
inline void arm_and_fence(cq_ring_header& h, uint32_t bits) {
    shared_index(h.arm).fetch_or(bits, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

// An empty poll's nap: sleeps until jakirod publishes a producer other than `seen` (the one
// the empty poll read) or `timeout` (relative) passes, whichever comes first; returns at once
// if one already has. A napping poller gives its core to jakirod as a timed sleep does, and
// sees the completion it waits for as soon as jakirod writes it rather than at the sleep's end.
inline void nap_until_completion(cq_ring_header& h, uint32_t seen, const timespec& timeout) {
    auto napping = shared_index(h.poller_napping);
    napping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (load_producer_acquire(h) == seen) {
        syscall(SYS_futex, &h.poller_napping, FUTEX_WAIT, 1, &timeout, nullptr, 0);
    }
    napping.store(0, std::memory_order_relaxed);  // no wake for a nap that is over
}

// The same nap on several CQs at once (a thread that polls them in turn): one futex_waitv
// (Linux 5.16) on their napping words, over when any producer moves from its `seen` or at
// `deadline` (CLOCK_MONOTONIC, absolute, as futex_waitv takes it); returns at once if one
// already has. False, having waited for nothing, if the kernel has no futex_waitv.
inline bool nap_until_any_completion(cq_ring_header* const* rings, const uint32_t* seen, unsigned n,
                                     const timespec& deadline) {
    futex_waitv waits[FUTEX_WAITV_MAX];
    n = n < FUTEX_WAITV_MAX ? n : FUTEX_WAITV_MAX;
    for (unsigned i = 0; i < n; ++i) {
        shared_index(rings[i]->poller_napping).store(1, std::memory_order_relaxed);
        waits[i] = {1, reinterpret_cast<uintptr_t>(&rings[i]->poller_napping), FUTEX_32, 0};
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with wake_napping_poller's
    bool moved = false;
    for (unsigned i = 0; i < n && !moved; ++i) {
        moved = load_producer_acquire(*rings[i]) != seen[i];
    }
    const bool supported = moved ||
                           syscall(SYS_futex_waitv, waits, n, 0, &deadline, CLOCK_MONOTONIC) == 0 ||
                           errno != ENOSYS;
    for (unsigned i = 0; i < n; ++i) {  // no wake for a nap that is over
        shared_index(rings[i]->poller_napping).store(0, std::memory_order_relaxed);
    }
    return supported;
}

inline bool overflowed(const cq_ring_header& h) {
    return shared_index(h.overflow).load(std::memory_order_acquire) != 0;
}

// A QP moved to RESET takes its unread completions with it (as mlx4/mlx5 clean their CQs in
// ibv_modify_qp): drops every published, unconsumed completion of `qp_num`, keeps the others
// in order, and returns how many went. The slots between the consumer and the producer are
// the consumer's alone (jakirod writes only at and past its producer), so the survivors move
// towards the producer end and the consumer index skips the freed slots: one release store,
// whatever jakirod publishes meanwhile. The caller holds the CQ's poll lock.
inline uint32_t drop_completions_of(cq_ring_header& h, uint32_t capacity, uint32_t qp_num) {
    const uint32_t consumer = load_own_consumer(h);
    const uint32_t producer = load_producer_acquire(h);
    // jakirod never runs more than `capacity` ahead; if it seemed to, look at a ring's worth.
    const uint32_t ready = producer - consumer < capacity ? producer - consumer : capacity;
    const uint32_t mask = capacity - 1;
    cqe* slots = cq_slots(&h);
    uint32_t dropped = 0;
    for (uint32_t i = ready; i-- > 0;) {
        const uint32_t at = consumer + i;
        if (slots[at & mask].qp_num == qp_num) {
            ++dropped;
        } else if (dropped != 0) {
            slots[(at + dropped) & mask] = slots[at & mask];
        }
    }
    if (dropped != 0) {
        release_slots(h, consumer + dropped);
    }
    return dropped;
}

// ================================================================ QP rings
//
// One memfd per QP, created, sized and sealed by jakirod, mapped shared by both:
//
//  offset    0  line 0: SQ producer (u32, free-running)   written by the shim only
//  offset   64  line 1: SQ consumer                      written by jakirod only: slots retired
//  offset  128  line 2: RQ producer                      written by the shim only
//  offset  192  line 3: RQ consumer                      written by jakirod only: slots consumed
//  offset  256  line 4: doorbell_wanted (jakirod sets it while it does not look at this QP's
//               producers unless rung, saying whether receives need the ring too; the shim
//               reads it)
//  offset  320  line 5: magic "JKQP", version, capacities, slot size, offsets
//  offset  512  SQ slots[sq_capacity] (send_wqe, 512 bytes), then RQ slots (recv_wqe, 512)
//
// The shim writes a WQE into slot producer & (capacity - 1) and publishes producer + 1
// (release). jakirod copies each WQE out once (it never reads a slot twice, so a program
// rewriting a posted slot changes nothing) and advances the consumer when it is done with it:
// for the SQ when the WR has completed (signaled or not), for the RQ when a message landed in
// it. Full when producer - consumer == capacity. jakirod never trusts the ring: a producer
// more than `capacity` ahead of its own consumer reads as "nothing new" and moves the QP to ERR.
//
// Doorbell. jakirod's worker looks at the producers only of the QPs it has queued for visits (a
// QP with work, or with something pending: WRs in flight, an ACK owed); the others are parked,
// and a parked QP costs the worker nothing until it is rung, as a hardware NIC's queues do. The
// QP ring's `doorbell_wanted` says which: jakirod sets it when it parks the QP, fences and looks
// at the producers once more (un-parking it if work came meanwhile); it sets it on every queued
// QP too before its worker sleeps. After publishing, the shim fences and, if `doorbell_wanted`
// is set, rings the vNIC's doorbell page for that QP (ring_doorbell): it sets the QP's bit in
// the page (qp_num >> 8 is the QP's slot) and the page's `posted` word, fences, and only if the
// page says the worker sleeps (`worker_sleeping`, set before the worker's last look at the
// pages) bumps the count and wakes the futex. So a post costs no system call while the worker
// is awake, and either jakirod sees the new producer (or the bit) or the shim sees the flag.
// Not an eventfd: its O_NONBLOCK flag is shared by every holder, so one tenant could make
// jakirod's read of it block; a futex wait always ends at its timeout. All a tenant can do to
// its own page is set bits (queueing its own QPs for a visit each, charged to its vNIC), clear
// them (its posts wait, up to the worker's next nap's end) or wake jakirod early.
//
// Receives. A QP in any state but ERR (the shim posts none in RESET) does nothing with a posted
// receive until a message comes: the responder takes the next RQ WQE when one arrives (a sender
// that finds none gets an RNR NAK and tries again after its timer, a sender on the same host
// again at its next visit; an unreliable message is lost), as from an SRQ. So jakirod asks such
// a QP with `doorbell_for_sends`, and a receive posted to it while it is parked or the worker
// sleeps costs neither side anything: no bit, no wake-up. Only a QP in ERR must be visited for
// a receive (its flush, IBV_WC_WR_FLUSH_ERR): jakirod asks it with `doorbell_for_every_post`.
// The state changes only on the engine's thread, and each change queues the QP (which clears
// the word) before jakirod asks again from the new state: a QP in ERR is never asked for sends
// only.

// A vNIC's doorbell: one page (a sealed memfd) that jakirod and the clients with a QP on that
// vNIC map; no two vNICs share one (rnic/doorbell_set.hh).
//
//  offset    0  line 0: rings (u32): bumped by every ring while the worker sleeps; the futex word
//  offset   64  line 1: worker_sleeping (u32): jakirod sets it before its worker sleeps
//  offset  128  line 2: posted (u32): the shim sets it after setting a QP's bit below
//  offset  192  posted_qps: one bit per QP slot (qp_num >> 8), set by the shim, taken by jakirod
constexpr std::size_t doorbell_qp_words = (ring_page - 3 * cache_line) / sizeof(uint64_t);
constexpr uint32_t doorbell_qp_slots = doorbell_qp_words * 64;

struct doorbell_page {
    alignas(cache_line) uint32_t rings;
    alignas(cache_line) uint32_t worker_sleeping;
    alignas(cache_line) uint32_t posted;
    alignas(cache_line) uint64_t posted_qps[doorbell_qp_words];
};
static_assert(sizeof(doorbell_page) == ring_page);
static_assert(offsetof(doorbell_page, worker_sleeping) == 64);
static_assert(offsetof(doorbell_page, posted) == 128);
static_assert(offsetof(doorbell_page, posted_qps) == 192);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);
constexpr std::size_t doorbell_bytes = sizeof(doorbell_page);

inline std::atomic_ref<uint64_t> shared_word(const uint64_t& word) {
    return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(word));
}

// Wakes a sleeping engine (FUTEX_WAKE on a shared mapping: not FUTEX_PRIVATE_FLAG); jakirod's
// own page is rung this way (engine::wake).
inline void wake_doorbell(doorbell_page& p) {
    shared_index(p.rings).fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, &p.rings, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}
// Shim: QP `qp_num` has new work (see "Doorbell" above). The seq_cst store of `posted` pairs
// with the fence after jakirod sets `worker_sleeping`: either jakirod sees `posted` before it
// sleeps, or the shim sees `worker_sleeping` and wakes it.
inline void ring_doorbell(doorbell_page& p, uint32_t qp_num) {
    const uint32_t slot = qp_num >> 8;
    if (slot < doorbell_qp_slots) {
        shared_word(p.posted_qps[slot / 64])
            .fetch_or(uint64_t{1} << (slot % 64), std::memory_order_relaxed);
    }
    shared_index(p.posted).store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (shared_index(p.worker_sleeping).load(std::memory_order_relaxed) != 0) {
        wake_doorbell(p);
    }
}
// jakirod: the count to wait on, read before the last look at the rings.
inline uint32_t doorbell_count(const doorbell_page& p) {
    return shared_index(p.rings).load(std::memory_order_acquire);
}
// jakirod: before (true) and after (false) its worker sleeps.
inline void set_worker_sleeping(doorbell_page& p, bool sleeping) {
    shared_index(p.worker_sleeping).store(sleeping ? 1 : 0, std::memory_order_relaxed);
}
// jakirod: has a QP been rung since take_posted last ran? (A cheap look, no write.)
inline bool anything_posted(const doorbell_page& p) {
    return shared_index(p.posted).load(std::memory_order_relaxed) != 0;
}
// jakirod: takes the bits of the slots below `slots` that were rung, calling `fn(slot)` for each;
// bits set meanwhile stay for the next call (`posted` is taken first, then the words).
template <typename Fn>
inline void take_posted(doorbell_page& p, uint32_t slots, Fn&& fn) {
    if (shared_index(p.posted).exchange(0, std::memory_order_acquire) == 0) {
        return;
    }
    const uint32_t limit = slots < doorbell_qp_slots ? slots : doorbell_qp_slots;
    for (uint32_t w = 0; w * 64 < limit; ++w) {
        auto word = shared_word(p.posted_qps[w]);
        if (word.load(std::memory_order_relaxed) == 0) {
            continue;
        }
        for (uint64_t bits = word.exchange(0, std::memory_order_acquire); bits != 0;
             bits &= bits - 1) {
            const uint32_t slot = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
            if (slot < limit) {
                fn(slot);
            }
        }
    }
}
// jakirod: sleeps until the count moves away from `seen`, a wake, or `timeout`.
inline void wait_doorbell(doorbell_page& p, uint32_t seen, const timespec& timeout) {
    syscall(SYS_futex, &p.rings, FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

constexpr uint32_t qp_ring_magic = 0x5051'4b4a;  // "JKQP"
// 2: doorbell_wanted per QP, doorbell bits. 3: UD destinations over IPv6 (ud_remote_ip6).
// `doorbell_for_sends` came without a bump: the layout is the same, and either end reads the
// other's values right, which matters when a jakirod of another build takes over rings its
// predecessor's shims have mapped (docs/restart.md). A shim that rings on any nonzero value
// rings for receives too, which is never wrong, only slower; a jakirod that writes only 0 and 1
// asks for every post; and a successor queues every QP it takes over (which clears the word).
constexpr uint32_t qp_ring_version = 3;

// What `doorbell_wanted` holds (see "Doorbell" and "Receives" above).
enum doorbell_want : uint32_t {
    doorbell_not_wanted = 0,      // queued: jakirod looks at the producers anyway
    doorbell_for_every_post = 1,  // ring after publishing sends or receives (a QP in ERR)
    doorbell_for_sends = 2,       // ring after publishing sends; a receive waits for its message
};
constexpr std::size_t wqe_size = 512;
constexpr uint32_t wqe_max_sge = 16;
constexpr std::size_t send_wqe_header_bytes = 96;
constexpr uint32_t wqe_max_inline = wqe_size - send_wqe_header_bytes;  // 416

struct wqe_sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};
static_assert(sizeof(wqe_sge) == 16);

struct send_wqe {
    uint64_t wr_id;
    uint32_t opcode;      // ibv_wr_opcode
    uint32_t send_flags;  // ibv_send_flags (IBV_SEND_INLINE: data in `inline_data`)
    uint32_t num_sge;     // SGEs in `sg` (0..wqe_max_sge); unused when inline
    uint32_t inline_len;  // bytes in `inline_data` when IBV_SEND_INLINE
    uint32_t imm_data;    // network order, as ibv_send_wr.imm_data (or invalidate_rkey)
    uint32_t rkey;        // RDMA and atomics
    uint64_t remote_addr;
    uint64_t compare_add;  // atomics
    uint64_t swap;
    uint32_t ud_remote_ip;  // UD: the destination (network order), from the address handle
    uint32_t ud_remote_qpn;
    uint32_t ud_remote_qkey;
    // IBV_WR_BIND_MW: the window (its handle), the MR it goes onto (lkey) and the rights
    // (mr_access bits); `rkey` is the window's new rkey, `remote_addr` and `compare_add` the
    // bound range's address and length. IBV_WR_LOCAL_INV and SEND_WITH_INV carry the rkey to
    // invalidate in `imm_data` (host order, as ibv_send_wr.invalidate_rkey).
    uint32_t mw_handle;
    uint32_t mw_mr_lkey;
    uint32_t mw_access;
    // UD to an IPv6 peer (an address handle with an IPv6 GID): its address, and ud_remote_ip
    // is 0. All zero for an IPv4 peer.
    uint8_t ud_remote_ip6[16];
    union {
        wqe_sge sg[wqe_max_sge];
        uint8_t inline_data[wqe_max_inline];
    };
};
static_assert(sizeof(send_wqe) == wqe_size);
static_assert(offsetof(send_wqe, sg) == send_wqe_header_bytes);
static_assert(offsetof(send_wqe, remote_addr) == 32);
static_assert(offsetof(send_wqe, mw_handle) == 68);
static_assert(offsetof(send_wqe, ud_remote_ip6) == 80);
static_assert(std::is_trivially_copyable_v<send_wqe>);

struct recv_wqe {
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t reserved[5];
    wqe_sge sg[wqe_max_sge];
    uint8_t unused[wqe_size - 32 - wqe_max_sge * sizeof(wqe_sge)];
};
static_assert(sizeof(recv_wqe) == wqe_size);
static_assert(offsetof(recv_wqe, sg) == 32);

struct qp_ring_header {
    alignas(cache_line) uint32_t sq_producer;
    alignas(cache_line) uint32_t sq_consumer;
    alignas(cache_line) uint32_t rq_producer;
    alignas(cache_line) uint32_t rq_consumer;
    alignas(cache_line) uint32_t doorbell_wanted;
    alignas(cache_line) uint32_t magic;
    uint32_t version;
    uint32_t sq_capacity;
    uint32_t rq_capacity;
    uint32_t slot_size;
    uint32_t sq_offset;  // bytes from the start of the ring
    uint32_t rq_offset;
    uint32_t qp_num;
    uint8_t reserved[cache_line * 3 - 36];
};
static_assert(sizeof(qp_ring_header) == 512);
static_assert(offsetof(qp_ring_header, doorbell_wanted) == 256);
static_assert(offsetof(qp_ring_header, magic) == 320);

constexpr std::size_t qp_ring_bytes(uint32_t sq_capacity, uint32_t rq_capacity) {
    const std::size_t raw =
        sizeof(qp_ring_header) + (std::size_t{sq_capacity} + rq_capacity) * wqe_size;
    return (raw + ring_page - 1) / ring_page * ring_page;
}

inline send_wqe* sq_slots(qp_ring_header* h) {
    return reinterpret_cast<send_wqe*>(reinterpret_cast<std::byte*>(h) + sizeof(qp_ring_header));
}
inline recv_wqe* rq_slots(qp_ring_header* h, uint32_t sq_capacity) {
    return reinterpret_cast<recv_wqe*>(reinterpret_cast<std::byte*>(h) + sizeof(qp_ring_header) +
                                       std::size_t{sq_capacity} * wqe_size);
}

// ---- shim side (producer of WQEs)

// Makes the WQEs written below `producer` visible to jakirod (release).
inline void publish_wqes(uint32_t& producer_index, uint32_t producer) {
    shared_index(producer_index).store(producer, std::memory_order_release);
}
// Slots below the returned index are free again (acquire: jakirod's reads of them are done).
inline uint32_t load_retired_acquire(const uint32_t& consumer_index) {
    return shared_index(consumer_index).load(std::memory_order_acquire);
}
// `doorbell_wanted` as the shim reads it after publishing. The fence pairs with
// fence_after_wanting_doorbell, so either jakirod sees the new producer or the shim sees
// `doorbell_wanted` and rings the doorbell.
inline uint32_t doorbell_wanted_word_after_publish(const qp_ring_header& h) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return shared_index(h.doorbell_wanted).load(std::memory_order_relaxed);
}
// After publishing sends: must the shim ring (the QP is parked, or the worker sleeps)?
inline bool doorbell_wanted_after_publish(const qp_ring_header& h) {
    return doorbell_wanted_word_after_publish(h) != doorbell_not_wanted;
}
// The same after publishing receives, which need the ring only when jakirod says so ("Receives"
// above); any value but the two that say otherwise rings, as a shim of ring version 2 rings.
inline bool doorbell_wanted_after_publishing_receives(const qp_ring_header& h) {
    const uint32_t wanted = doorbell_wanted_word_after_publish(h);
    return wanted != doorbell_not_wanted && wanted != doorbell_for_sends;
}

// ---- jakirod side (consumer of WQEs)

inline uint32_t load_posted_acquire(const uint32_t& producer_index) {
    return shared_index(producer_index).load(std::memory_order_acquire);
}
inline void retire_slots(uint32_t& consumer_index, uint32_t consumer) {
    shared_index(consumer_index).store(consumer, std::memory_order_release);
}
inline void set_doorbell_wanted(qp_ring_header& h, doorbell_want wanted) {
    shared_index(h.doorbell_wanted).store(wanted, std::memory_order_relaxed);
}
// Between setting `doorbell_wanted` (or a page's `worker_sleeping`) and the last look at the
// producers (and the pages' `posted`) before parking a QP or sleeping.
inline void fence_after_wanting_doorbell() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

// ================================================================ SRQ rings
//
// One memfd per shared receive queue, created, sized and sealed by jakirod, mapped by both:
//
//  offset    0  line 0: producer (u32, free-running)   written by the shim only
//  offset   64  line 1: consumer                      written by jakirod only: WQEs taken
//  offset  128  line 2: magic "JKSR", version, capacity, slot size, SRQ handle
//  offset  256  slots[capacity] (recv_wqe, 512 bytes)
//
// Unlike a QP's RQ, a slot is free again as soon as jakirod has taken (copied) its WQE: the
// WQEs of an SRQ complete out of order on many QPs, and jakirod never reads a slot twice. No
// doorbell: receive WQEs are only ever taken when a message arrives, so posting one never
// needs to wake the engine (a sender that met an empty SRQ retries after its RNR timer).
// jakirod never trusts the producer: one more than `capacity` ahead of what it took makes the
// SRQ read as empty from then on (IBV_EVENT_SRQ_ERR).

constexpr uint32_t srq_ring_magic = 0x5253'4b4a;  // "JKSR"
constexpr uint32_t srq_ring_version = 1;

struct srq_ring_header {
    alignas(cache_line) uint32_t producer;
    alignas(cache_line) uint32_t consumer;
    alignas(cache_line) uint32_t magic;
    uint32_t version;
    uint32_t capacity;
    uint32_t slot_size;
    uint32_t srq_handle;
    uint8_t reserved[cache_line * 2 - 20];
};
static_assert(sizeof(srq_ring_header) == 256);
static_assert(offsetof(srq_ring_header, consumer) == 64);
static_assert(offsetof(srq_ring_header, magic) == 128);

constexpr std::size_t srq_ring_bytes(uint32_t capacity) {
    const std::size_t raw = sizeof(srq_ring_header) + std::size_t{capacity} * wqe_size;
    return (raw + ring_page - 1) / ring_page * ring_page;
}

inline recv_wqe* srq_slots(srq_ring_header* h) {
    return reinterpret_cast<recv_wqe*>(reinterpret_cast<std::byte*>(h) + sizeof(srq_ring_header));
}

// Both ends use publish_wqes / load_retired_acquire (shim) and load_posted_acquire /
// retire_slots (jakirod) on `producer` and `consumer`, as for a QP's queues.

}  // namespace jakiro::verbs_proto
