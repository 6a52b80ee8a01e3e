#pragma once
// Completion queues and completion channels of a shim context.
//
// A CQ's ring is a memfd jakirod creates (layout: rings.hh); the shim maps it and ibv_poll_cq
// reads completions straight out of it (no system call), ibv_req_notify_cq sets its arm bits.
// A completion channel is a SOCK_SEQPACKET socketpair made here: the application polls one
// end (ibv_comp_channel.fd); the other end goes to jakirod with every CQ created on the
// channel, and jakirod sends {cq handle} on it when an armed CQ gets a completion.
//
// Lifetime as in libibverbs: destroying a channel that CQs use is EBUSY; ibv_destroy_cq waits
// until every completion event and async event it reported has been acknowledged.
//
// Thread-safety: poll_cq serialises on the CQ's poll lock (one consumer at a time, as
// rdma-core providers lock their CQs); the rest follows the libibverbs rules.

#include <infiniband/verbs.h>

#include <cstdint>
#include <mutex>

#include "verbs_abi/rings.hh"

namespace jakiro::verbs_shim {

struct shim_context;

constexpr uint32_t cq_magic = 0x4a4b'4351;       // "QCKJ"
constexpr uint32_t channel_magic = 0x4a4b'4343;  // "CCKJ"

struct shim_comp_channel {
    ibv_comp_channel channel;  // first member; channel.fd is the application's end
    uint32_t magic;
    int peer_fd;  // jakirod's end: a copy travels with every create_cq on this channel
};

struct shim_cq {
    union {
        ibv_cq cq;        // first member
        ibv_cq_ex cq_ex;  // its prefix is ibv_cq: a CQ made by ibv_create_cq_ex (cq_ex.hh)
    };
    uint32_t magic;
    shim_context* context;
    verbs_proto::cq_ring_header* ring;  // our mapping of jakirod's memfd
    std::size_t ring_bytes;
    uint32_t capacity;
    // The ring before the last ibv_resize_cq, kept mapped for a req_notify_cq that raced it
    // (cq.cc, resize_cq); nullptr if the CQ was never resized.
    verbs_proto::cq_ring_header* retired_ring;
    std::size_t retired_ring_bytes;
    std::mutex poll_lock;
    // ibv_start_poll .. ibv_end_poll (cq_ex.cc), under poll_lock: the completion being read
    // and the consumer index the session will hand back.
    const verbs_proto::cqe* ex_current;
    uint32_t ex_consumer;
    // jakirod is gone (device_death.hh): the session hands out flush completions made here
    // instead of ring slots, one at a time from `ex_flushed`.
    bool ex_flushing;
    verbs_proto::cqe ex_flushed;
    // Events handed to the application, guarded by cq.mutex (what ibv_destroy_cq waits for).
    uint32_t comp_events_reported;
    uint32_t async_events_reported;
};

shim_cq* to_cq(ibv_cq* cq);
shim_comp_channel* to_channel(ibv_comp_channel* channel);

ibv_comp_channel* create_comp_channel(ibv_context* context);
int destroy_comp_channel(ibv_comp_channel* channel);

ibv_cq* create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                  int comp_vector);
// The same, with create_cq_flags beyond the channel's (ibv_create_cq_ex: cq_with_timestamps).
ibv_cq* create_cq_flagged(ibv_context* context, int cqe, void* cq_context,
                          ibv_comp_channel* channel, int comp_vector, uint32_t extra_flags);
int destroy_cq(ibv_cq* cq);
// ibv_resize_cq: 0 or an errno (EINVAL when more completions wait than `cqe` holds, as rxe;
// EDQUOT beyond the vNIC's quota). Unconsumed completions survive, in order.
int resize_cq(ibv_cq* cq, int cqe);
// A QP went to RESET: its completions still unread in `cq` go with it (ibv_modify_qp, as
// mlx4/mlx5 clean their CQs), so a QP brought back to RTS starts from an empty slate and a
// program's next poll never finds the flush completions of the QP's earlier life.
void drop_qp_completions(ibv_cq* cq, uint32_t qp_num);
int get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);
void ack_cq_events(ibv_cq* cq, unsigned int nevents);

// verbs_context ops (the inline ibv_poll_cq and ibv_req_notify_cq land here).
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

}  // namespace jakiro::verbs_shim
