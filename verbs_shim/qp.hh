#pragma once
// Queue pairs (RC) of a shim context.
//
// A QP's send and receive queues are one memfd jakirod creates (layout: rings.hh); the shim
// maps it, and ibv_post_send / ibv_post_recv (the inline verbs, through our ops) write work
// requests straight into its slots and publish them with one release store per call, without
// a system call; jakirod asks (in the ring) to be told of posts to a QP it parked or while its
// worker sleeps: then they ring its doorbell page, which came with the create_qp reply.
// Everything else (modify, query, destroy) is a request to jakirod, which runs the QP.
//
// Lifetime as in libibverbs: ibv_destroy_qp waits until every async event it reported for
// the QP has been acknowledged.
//
// Thread-safety: each queue has its own lock (post_send and post_recv may run in parallel, as
// with rdma-core providers); `state` is the cached ibv_qp.state, written by modify and query
// and read by the post verbs; the rest follows the libibverbs rules.

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "verbs_abi/rings.hh"

namespace jakiro::verbs_shim {

struct shim_context;
struct qp_ex_state;

constexpr uint32_t qp_magic = 0x4a4b'5150;  // "PQKJ"

struct shim_qp {
    union {
        ibv_qp qp;        // first member
        ibv_qp_ex qp_ex;  // its prefix is ibv_qp: a QP made with send ops (qp_ex.hh)
    };
    uint32_t magic;
    shim_context* context;
    verbs_proto::qp_ring_header* ring;  // our mapping of jakirod's memfd
    std::size_t ring_bytes;
    verbs_proto::send_wqe* sq;
    verbs_proto::recv_wqe* rq;
    verbs_proto::doorbell_page* doorbell;  // the vNIC's page: rung only when the ring asks for it
    // What the QP really has (jakirod's reply): what the post verbs check work requests against.
    uint32_t sq_capacity;
    uint32_t rq_capacity;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_inline_data;
    uint32_t max_sge_rd;  // the device's limit for RDMA READ scatter lists
    bool sq_sig_all;
    std::atomic<int> state;  // ibv_qp_state, as the last modify (or query) left it
    // Producer indices: ours, never read back from the shared ring (jakirod could scribble).
    std::mutex sq_lock;
    uint32_t sq_head;  // guarded by sq_lock
    std::mutex rq_lock;
    uint32_t rq_head;  // guarded by rq_lock
    // Async events handed to the application, guarded by qp.mutex (ibv_destroy_qp waits).
    uint32_t async_events_reported;
    // The ibv_wr_* API's state (qp_ex.hh): set by create_qp_ex when send ops were asked for,
    // freed by destroy_qp; nullptr otherwise (ibv_qp_to_qp_ex then returns NULL).
    qp_ex_state* ex;
};

shim_qp* to_qp(ibv_qp* qp);

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
// verbs_context op (the inline ibv_create_qp_ex): the legacy path, for comp_mask == PD only.
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);
int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask);
int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr);
int destroy_qp(ibv_qp* qp);

}  // namespace jakiro::verbs_shim
