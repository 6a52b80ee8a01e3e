#pragma once
// Posting work requests: the verbs_context ops behind the inline ibv_post_send and
// ibv_post_recv. Each call checks its work requests as a provider does (opcode, SGE count,
// inline size, room, QP state), writes a WQE per request into the QP's ring and publishes
// them with one release store; then, only if jakirod's worker sleeps, it rings the doorbell.
// The first request that fails stops the call: those before it are posted, *bad_wr names it.
//
// Thread-safety: one lock per queue (qp.hh).

#include <infiniband/verbs.h>

namespace jakiro::shim {

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

}  // namespace jakiro::shim
