#pragma once
// Memory windows (IB spec 10.6.7, as rxe has them: type 1 and type 2B). A window is an rkey
// of its own, from the MR table's key space, that grants remote rights to a range of one MR.
// It is allocated in a PD by the control thread (ibv_alloc_mw) and bound, rebound, unbound and
// invalidated by work requests that the engine executes in order with the QP's other WRs:
//   - type 1 belongs to its PD: any QP of the PD binds it (ibv_bind_mw), a bind of length 0
//     unbinds it, and it cannot be invalidated (only rebound);
//   - type 2 belongs, once bound, to the QP that bound it (IBV_WR_BIND_MW): only that QP may
//     use it as a target, it must be free to be bound, and LOCAL_INV or a peer's
//     SEND_WITH_INV frees it again.
// Every bind may change the rkey's low 8 bits (the consumer key), so an rkey handed out
// before a rebind or an invalidation no longer names the window.
//
// Thread-safety: an mw_entry is published in the MR table by the control thread; its binding
// is an immutable mw_binding swapped atomically by the engine (bind, invalidate) and read by
// any thread (remote access checks), so a lookup sees one binding whole or not at all.

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "rnic/queues/mr_table.hh"
#include "verbs_abi/protocol.hh"
#include "verbs_abi/rings.hh"

namespace jakiro::verbs {

// One binding of a window, immutable once published.
struct mw_binding {
    uint32_t rkey = 0;     // the window's rkey while this binding holds
    uint32_t qpn = 0;      // type 2: the only QP that may use it; 0 for type 1
    uint32_t access = 0;   // verbs_proto::mr_access remote rights granted through it
    uint64_t va = 0;       // what the window's first byte is called (0 when zero-based)
    uint64_t length = 0;   // > 0
    uint64_t mr_iova = 0;  // the MR's name for the window's first byte
    std::shared_ptr<const mr_entry> mr;  // pinned: its mapping outlives the binding's readers
};

struct mw_entry {
    uint32_t handle = 0;  // the key it was allocated under (its slot and first rkey)
    uint32_t pd = 0;
    uint64_t owner = 0;  // client id
    uint8_t type = 1;    // IBV_MW_TYPE_1 or IBV_MW_TYPE_2
    // The rkey of the last bind (the handle before any): what a type-1 bind increments.
    std::atomic<uint32_t> rkey{0};
    // Null: not bound (type 1 unbound, type 2 free or invalidated).
    std::atomic<std::shared_ptr<const mw_binding>> binding;
};

// Engine thread. Executes an IBV_WR_BIND_MW work request of QP `qpn` (in PD `qp_pd`) with
// the rules of IB spec 10.6.7.2 as rxe checks them (see memory_window.cc). False: the bind
// is refused and nothing changed (the WR completes with IBV_WC_MW_BIND_ERR).
bool bind_window(const mr_table& table, const verbs_proto::send_wqe& wqe, uint32_t qp_pd,
                 uint32_t qpn);

// Engine thread. Frees the type-2 window that `rkey` names, if it is bound and in PD `pd`:
// LOCAL_INV (false: IBV_WC_LOC_QP_OP_ERR) or a peer's SEND_WITH_INV (false: an invalid
// request). An MR's rkey is never invalidated (every MR here is a user MR, as rxe refuses).
bool invalidate_window(const mr_table& table, uint32_t rkey, uint32_t pd);

// Engine thread. An IBV_WR_BIND_MW or IBV_WR_LOCAL_INV of a QP of `type`: IBV_WC_SUCCESS, or
// the status its completion fails with (IBV_WC_MW_BIND_ERR for a bind, IBV_WC_LOC_QP_OP_ERR
// for an invalidation, as rxe reports them; either moves the QP to ERR). UD has neither.
ibv_wc_status execute_window_wr(const mr_table& table, const verbs_proto::send_wqe& wqe,
                                ibv_qp_type type, uint32_t qp_pd, uint32_t qpn);

// Any thread. The access check through a window (mr_table::find_remote): bound, the rkey
// current, the PD and (type 2) the QP, the window's rights and range, and its MR still
// registered.
mr_lookup find_through_window(const mr_table& table, const mw_entry& window, uint32_t pd,
                              uint32_t qpn, uint32_t rkey, uint64_t iova, uint64_t length,
                              uint32_t access);

}  // namespace jakiro::verbs
