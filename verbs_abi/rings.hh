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
// its own, less than an armed completion channel costs it.
inline void wake_napping_poller(cq_ring_header& h) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    auto napping = shared_index(h.poller_napping);
    if (napping.load(std::memory_order_relaxed) != 0 &&
        napping.exchange(0, std::memory_order_relaxed) != 0) {
        syscall(SYS_futex, &h.poller_napping, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
    }
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
//  offset  256  line 4: sleeping (jakirod sets it while its worker sleeps; the shim reads it)
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
// Doorbell: before its worker sleeps, jakirod notes every doorbell page's count, sets
// `sleeping` in every QP ring, fences and looks at the producers once more, then waits on the
// counts (shared futexes, futex_waitv, with a timeout); after publishing, the shim fences and, if
// `sleeping` is set, bumps the count and wakes the futex (ring_doorbell). Not an eventfd: its
// O_NONBLOCK flag is shared by every holder, so one tenant could make jakirod's read of it block; a
// futex wait always ends at its timeout, and all a tenant can do to the page is wake jakirod early.

// A vNIC's doorbell: one page (a sealed memfd) that jakirod and the clients with a QP on that
// vNIC map; no two vNICs share one (rnic/doorbell_set.hh).
struct doorbell_page {
    alignas(cache_line) uint32_t rings;  // bumped by every ring; the futex word
    uint8_t reserved[ring_page - cache_line];
};
static_assert(sizeof(doorbell_page) == ring_page);
constexpr std::size_t doorbell_bytes = sizeof(doorbell_page);

// Shim: wakes the engine (FUTEX_WAKE on a shared mapping: not FUTEX_PRIVATE_FLAG).
inline void ring_doorbell(doorbell_page& p) {
    std::atomic_ref<uint32_t>(p.rings).fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, &p.rings, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}
// jakirod: the count to wait on, read before the last look at the rings.
inline uint32_t doorbell_count(const doorbell_page& p) {
    return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(p.rings))
        .load(std::memory_order_acquire);
}
// jakirod: sleeps until the count moves away from `seen`, a wake, or `timeout`.
inline void wait_doorbell(doorbell_page& p, uint32_t seen, const timespec& timeout) {
    syscall(SYS_futex, &p.rings, FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

constexpr uint32_t qp_ring_magic = 0x5051'4b4a;  // "JKQP"
constexpr uint32_t qp_ring_version = 1;
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
    uint32_t reserved[4];
    union {
        wqe_sge sg[wqe_max_sge];
        uint8_t inline_data[wqe_max_inline];
    };
};
static_assert(sizeof(send_wqe) == wqe_size);
static_assert(offsetof(send_wqe, sg) == send_wqe_header_bytes);
static_assert(offsetof(send_wqe, remote_addr) == 32);
static_assert(offsetof(send_wqe, mw_handle) == 68);
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
    alignas(cache_line) uint32_t sleeping;
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
static_assert(offsetof(qp_ring_header, sleeping) == 256);
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
// After publishing: does jakirod sleep? The fence pairs with fence_before_sleeping, so either
// jakirod sees the new producer or the shim sees `sleeping` and rings the doorbell.
inline bool engine_sleeping_after_publish(const qp_ring_header& h) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return shared_index(h.sleeping).load(std::memory_order_relaxed) != 0;
}

// ---- jakirod side (consumer of WQEs)

inline uint32_t load_posted_acquire(const uint32_t& producer_index) {
    return shared_index(producer_index).load(std::memory_order_acquire);
}
inline void retire_slots(uint32_t& consumer_index, uint32_t consumer) {
    shared_index(consumer_index).store(consumer, std::memory_order_release);
}
inline void set_sleeping(qp_ring_header& h, bool sleeping) {
    shared_index(h.sleeping).store(sleeping ? 1 : 0, std::memory_order_relaxed);
}
// Between setting `sleeping` and the last look at the producers before sleeping.
inline void fence_before_sleeping() {
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
