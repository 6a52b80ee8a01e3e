#pragma once
// The work request API of ibv_qp_ex (ibv_wr_start, the ibv_wr_* builders and setters,
// ibv_wr_complete / ibv_wr_abort; man ibv_wr_post(3)) for QPs made by ibv_create_qp_ex with
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.
//
// Each builder opens a work request as an ibv_send_wr (wr_id and wr_flags from ibv_qp_ex, the
// opcode and its fields from the call); the setters fill its SGEs, inline data (copied at
// once into a staging buffer: the caller may reuse its buffer when the setter returns) or UD
// destination. The next builder, or ibv_wr_complete, checks and writes it into the next free
// slot of the send queue with exactly the code ibv_post_send uses (post.hh: check_send,
// write_send), so a WQE is byte for byte what ibv_post_send writes for the same request.
// Nothing is visible to jakirod before ibv_wr_complete publishes the producer index once (and
// rings the doorbell if the engine sleeps); ibv_wr_abort, or any error, discards the batch.
// The first error (invalid request, no room, the QP's state) is ibv_wr_complete's return.
//
// Send ops a QP can be created with: RC: SEND(_WITH_IMM, _WITH_INV), RDMA_WRITE(_WITH_IMM),
// RDMA_READ, both atomics, ATOMIC_WRITE, BIND_MW, LOCAL_INV; UC: SEND(_WITH_IMM),
// RDMA_WRITE(_WITH_IMM), BIND_MW, LOCAL_INV; UD: SEND(_WITH_IMM). Anything else (TSO, what a
// transport does not carry) is EOPNOTSUPP at creation; its builder, called anyway, makes
// ibv_wr_complete fail with EINVAL as ibv_post_send would.
//
// Thread-safety: ibv_wr_start takes the send queue's lock and ibv_wr_complete / ibv_wr_abort
// release it, so the region is a per-QP critical section (the man page's CONCURRENCY); an
// ibv_post_send from the same thread inside the region would deadlock, as the man page forbids
// interleaving them.

#include <infiniband/verbs.h>

#include <cstdint>

namespace jakiro::verbs_shim {

struct shim_qp;
struct qp_ex_state;

// 0 if a QP of `type` can do every op in `send_ops` (ibv_qp_create_send_ops_flags), else
// EOPNOTSUPP.
int check_send_ops(ibv_qp_type type, uint64_t send_ops);
// The ibv_wr_* state for a QP about to be created; nullptr if out of memory.
qp_ex_state* new_qp_ex_state();
void delete_qp_ex_state(qp_ex_state* state);
// Makes `q` an ibv_qp_ex: fills the wr_* ops and takes `state`.
void attach_qp_ex(shim_qp& q, qp_ex_state* state);
// destroy_qp: frees what attach_qp_ex gave (nothing for a QP without send ops).
void release_qp_ex(shim_qp& q);

// ibv_qp_to_qp_ex: the QP's ibv_qp_ex, or NULL if it was not created with send ops (as
// libibverbs).
ibv_qp_ex* qp_to_qp_ex(ibv_qp* qp);

}  // namespace jakiro::verbs_shim
