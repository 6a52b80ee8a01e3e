#pragma once
// Posting work requests: the verbs_context ops behind the inline ibv_post_send and
// ibv_post_recv. Each call checks its work requests as a provider does (opcode, SGE count,
// inline size, room, QP state), writes a WQE per request into the QP's ring and publishes
// them with one release store; then, only if jakirod asks for it (the QP is parked or its worker
// sleeps, and for receives only while the QP is in ERR), it rings the doorbell.
// The first request that fails stops the call: those before it are posted, *bad_wr names it.
//
// Thread-safety: one lock per queue (qp.hh).

#include <infiniband/verbs.h>

#include <cstdint>

#include "verbs_abi/rings.hh"

namespace jakiro::verbs_shim {

struct shim_qp;

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

// The steps of ibv_post_send, shared with the ibv_wr_* API (qp_ex.hh) so that both write the
// same WQE for the same request. Callers hold the queue's lock.
//
// Free slots from `head` on, given jakirod's consumer index (read with acquire).
uint32_t free_slots(uint32_t head, const uint32_t& consumer, uint32_t capacity);
// One send work request against the QP: 0 or an errno; `inline_bytes` gets the inline length.
int check_send(const shim_qp& q, const ibv_send_wr& wr, uint64_t& inline_bytes);
// Writes a checked request into its slot (inline data copied now).
void write_send(verbs_proto::send_wqe& slot, const ibv_send_wr& wr, uint64_t inline_bytes,
                ibv_qp_type type);
// After publishing: tells jakirod which QP has work if it asks (verbs_abi/rings.hh "Doorbell").
void ring_doorbell_if_wanted(const shim_qp& q);
// Whether each queue takes work in `state` (ibv_qp_state).
bool send_queue_open(int state);
bool recv_queue_open(int state);

}  // namespace jakiro::verbs_shim
