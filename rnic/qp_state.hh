#pragma once
// The QP state machine (IBTA vol. 1 ch. 10-11; kernel ib_modify_qp_is_ok) for RC, UC and UD QPs,
// in libibverbs' own types so the verbs shim can pass ibv_modify_qp arguments straight through.
//
//   RESET -> INIT -> RTR -> RTS <-> SQD        any state -> RESET, any state -> ERR
//                            \-> SQE -> RTS     (UC/UD after a send error; RC goes to ERR)
//
// modify() checks, in order: unsupported mask bits (EOPNOTSUPP, as rdma-core's
// ibv_cmd_modify_qp), state values and IBV_QP_CUR_STATE, the transition and its required and
// optional attribute masks per QP type, then each supplied attribute's value against the
// device limits (EINVAL; a privileged Q_Key is EPERM). Nothing changes unless all pass.
//
// Thread-safety: one QP's machine belongs to the jakirod thread that owns the QP; not locked.

#include <infiniband/verbs.h>

#include <cstdint>

namespace jakiro::rnic {

// What the device advertises in ibv_query_device/ibv_query_port; modify() holds attribute values
// to it the way a real RNIC does.
struct qp_device_limits {
    uint8_t port_count = 1;
    uint16_t pkey_table_len = 1;
    uint32_t gid_table_len = 1;
    ibv_mtu max_mtu = IBV_MTU_4096;    // the port's active MTU: path_mtu may not exceed it
    uint8_t max_qp_rd_atom = 16;       // responder resources: bound for max_dest_rd_atomic
    uint8_t max_qp_init_rd_atom = 16;  // initiator depth: bound for max_rd_atomic
};

// Required and optional attribute masks of one transition for one QP type. IBV_QP_STATE is
// implied and not listed.
struct qp_transition_rule {
    bool valid = false;
    int required = 0;
    int optional = 0;
};

bool qp_type_supported(ibv_qp_type type);  // RC, UC, UD

qp_transition_rule qp_transition(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type);

// The pure mask rule: is `mask` acceptable for cur -> next on a QP of `type`?
bool modify_qp_mask_ok(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type, int mask);

// What happens to a work request posted in the current state (IBTA ch. 10, QP states).
enum class wr_disposition : uint8_t {
    reject,   // the post call fails (EINVAL): RESET, or sends before RTS
    execute,  // queued and processed
    hold,     // queued but not started until the QP is back in RTS (sends in SQD)
    flush,    // queued and completed with IBV_WC_WR_FLUSH_ERR (SQE sends, ERR)
};

class qp_state_machine {
  public:
    // A new QP starts in RESET with every attribute zero.
    qp_state_machine(ibv_qp_type type, const qp_device_limits& limits);

    // ibv_modify_qp: 0, EINVAL, EPERM or EOPNOTSUPP. All or nothing.
    int modify(const ibv_qp_attr& attr, int mask);

    // A restarted jakirod: the machine exactly as its predecessor left it (state and every
    // attribute). False, changing nothing, for attributes no sequence of modify() calls could
    // have produced on this QP type and device (a corrupt image).
    bool resume(const ibv_qp_attr& attr);

    // Transitions the engine makes by itself.
    void enter_error();            // fatal QP error, retries exhausted, destroy with WRs
    ibv_qp_state on_send_error();  // RC -> ERR; UC/UD RTS or SQD -> SQE. Returns the state
    bool finish_drain();           // SQD drained; true when IBV_EVENT_SQ_DRAINED was asked for

    ibv_qp_type type() const { return _type; }
    ibv_qp_state state() const { return _attr.qp_state; }
    bool sq_draining() const { return _attr.sq_draining != 0; }
    // What ibv_query_qp reports. PSNs and dest_qp_num are already cut to 24 bits.
    const ibv_qp_attr& attr() const { return _attr; }

    wr_disposition send_disposition() const;
    wr_disposition recv_disposition() const;
    // Inbound packets are processed from RTR on (a responder needs RTR, not RTS).
    bool accepts_inbound() const;

  private:
    int check_values(const ibv_qp_attr& attr, int mask) const;
    void apply(const ibv_qp_attr& attr, int mask, ibv_qp_state next);

    ibv_qp_type _type;
    qp_device_limits _limits;
    ibv_qp_attr _attr{};
};

}  // namespace jakiro::rnic
