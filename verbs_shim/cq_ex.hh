#pragma once
// Extended completion queues (ibv_create_cq_ex): the same CQ as ibv_create_cq (the same ring,
// channel, arming and ibv_poll_cq), with ibv_cq_ex's iterator on top: ibv_start_poll takes the
// CQ's poll lock and looks at the oldest completion, ibv_next_poll moves to the next one, the
// ibv_wc_read_* accessors read fields of the current one straight out of the ring, and
// ibv_end_poll hands every completion the session went through back to jakirod at once (one
// release store) and unlocks. No system call, no allocation.
//
// What can be asked for: the standard wc_flags (byte_len, imm, qp_num, src_qp, slid, sl,
// dlid_path_bits); completion timestamps (there is no device clock), CVLAN, flow tags and tag
// matching are EOPNOTSUPP, unknown wc_flags or create flags too; unknown comp_mask bits are
// EINVAL; IBV_CQ_INIT_ATTR_MASK_PD names a parent domain, which we do not have: EINVAL.
//
// Thread-safety: one session per CQ at a time (ibv_start_poll .. ibv_end_poll holds the poll
// lock, which ibv_poll_cq takes too); with IBV_CREATE_CQ_ATTR_SINGLE_THREADED the lock is
// still taken (uncontended: a few nanoseconds).

#include <infiniband/verbs.h>

namespace jakiro::verbs_shim {

// verbs_context op (the inline ibv_create_cq_ex lands here).
ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);

}  // namespace jakiro::verbs_shim
