#pragma once
// Shared receive queues of a shim context.
//
// An SRQ is a ring of receive WQEs in a memfd jakirod creates (layout: rings.hh, "SRQ rings");
// the shim maps it and ibv_post_srq_recv writes work requests straight into its slots and
// publishes them with one release store per call, never a system call (receive WQEs are taken
// only when a message arrives, so there is no doorbell). QPs created with `srq` set take
// their receives from it, and refuse ibv_post_recv. Create, modify (the limit), query and
// destroy are requests to jakirod, which keeps the limit and raises
// IBV_EVENT_SRQ_LIMIT_REACHED. XRC SRQs (ibv_create_srq_ex with IBV_SRQT_XRC), tag matching
// and resizing are not supported.
//
// Lifetime as in libibverbs: ibv_destroy_srq answers EBUSY while QPs use it (jakirod counts
// them) and waits until every async event it reported for the SRQ has been acknowledged.
//
// Thread-safety: posting holds the SRQ's lock (several threads may post); the rest follows
// the libibverbs rules.

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "verbs_abi/rings.hh"

namespace jakiro::verbs_shim {

struct shim_context;

constexpr uint32_t srq_magic = 0x4a4b'5253;  // "SRKJ"

struct shim_srq {
    ibv_srq srq;  // first member
    uint32_t magic;
    shim_context* context;
    verbs_proto::srq_ring_header* ring;  // our mapping of jakirod's memfd
    std::size_t ring_bytes;
    verbs_proto::recv_wqe* slots;
    uint32_t capacity;  // what jakirod gave: max_wr
    uint32_t max_sge;
    // The producer index: ours, never read back from the shared ring.
    std::mutex lock;
    uint32_t head;  // guarded by lock
    // Async events handed to the application, guarded by srq.mutex (ibv_destroy_srq waits).
    uint32_t async_events_reported;
};

// The shim SRQ behind `srq`, or nullptr if it is not one of ours.
shim_srq* to_srq(ibv_srq* srq);

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr);
// verbs_context op (the inline ibv_create_srq_ex) for what the inline does not send to
// ibv_create_srq itself: BASIC SRQs go there, XRC and tag matching are EOPNOTSUPP.
ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask);
int query_srq(ibv_srq* srq, ibv_srq_attr* attr);
int destroy_srq(ibv_srq* srq);
// ops.post_srq_recv (the inline ibv_post_srq_recv).
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

}  // namespace jakiro::verbs_shim
