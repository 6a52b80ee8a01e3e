#pragma once
// ibv_qp_attr <-> verbs_proto::qp_attr_wire, for both ends: the shim converts what a program
// passes to ibv_modify_qp / gets from ibv_query_qp, jakirod what it hands the QP state machine.
// Every field converts both ways, so a modify/query round trip loses nothing. Unlike
// protocol.hh this needs libibverbs' headers (never the library).

#include <infiniband/verbs.h>

#include "verbs_abi/protocol.hh"

namespace jakiro::verbs_proto {

// Every ibv_qp_attr_mask bit libibverbs exposes; anything else is EINVAL.
constexpr int known_qp_attr_mask =
    IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ACCESS_FLAGS |
    IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
    IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
    IBV_QP_PATH_MIG_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN | IBV_QP_RATE_LIMIT;

qp_attr_wire to_wire(const ibv_qp_attr& attr);
void from_wire(const qp_attr_wire& wire, ibv_qp_attr& attr);

// Only the fields `attr_mask` names, the rest zeroed: what modify_qp sends, so that whatever
// the program left in the fields it did not mean (often uninitialised stack) never travels.
qp_attr_wire masked(const qp_attr_wire& wire, int attr_mask);

}  // namespace jakiro::verbs_proto
