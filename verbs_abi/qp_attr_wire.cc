#include "verbs_abi/qp_attr_wire.hh"

#include <cstring>

#include "verbs_abi/stored_enum.hh"

namespace jakiro::verbs_proto {

namespace proto = verbs_proto;

// The wire carries libibverbs' enum values: converting is a cast.
static_assert(IBV_QPS_RESET == 0 && IBV_QPS_RTS == 3 && IBV_QPS_ERR == 6);
static_assert(IBV_MTU_256 == 1 && IBV_MTU_4096 == 5);
static_assert(IBV_MIG_MIGRATED == 0 && IBV_MIG_ARMED == 2);

namespace {

proto::ah_attr_wire ah_to_wire(const ibv_ah_attr& a) {
    proto::ah_attr_wire w{};
    std::memcpy(w.dgid, a.grh.dgid.raw, sizeof(w.dgid));
    w.flow_label = a.grh.flow_label;
    w.sgid_index = a.grh.sgid_index;
    w.hop_limit = a.grh.hop_limit;
    w.traffic_class = a.grh.traffic_class;
    w.is_global = a.is_global;
    w.dlid = a.dlid;
    w.sl = a.sl;
    w.src_path_bits = a.src_path_bits;
    w.static_rate = a.static_rate;
    w.port_num = a.port_num;
    return w;
}

void ah_from_wire(const proto::ah_attr_wire& w, ibv_ah_attr& a) {
    std::memcpy(a.grh.dgid.raw, w.dgid, sizeof(w.dgid));
    a.grh.flow_label = w.flow_label;
    a.grh.sgid_index = w.sgid_index;
    a.grh.hop_limit = w.hop_limit;
    a.grh.traffic_class = w.traffic_class;
    a.is_global = w.is_global;
    a.dlid = w.dlid;
    a.sl = w.sl;
    a.src_path_bits = w.src_path_bits;
    a.static_rate = w.static_rate;
    a.port_num = w.port_num;
}

}  // namespace

// Enum fields cross as the integers they hold: the fields a mask does not name are often
// garbage (stored_enum.hh); masked() keeps only the named ones and jakirod validates those.
proto::qp_attr_wire to_wire(const ibv_qp_attr& a) {
    proto::qp_attr_wire w;
    std::memset(&w, 0, sizeof(w));  // padding and reserved fields included
    w.qp_state = stored_value(a.qp_state);
    w.cur_qp_state = stored_value(a.cur_qp_state);
    w.path_mtu = stored_value(a.path_mtu);
    w.path_mig_state = stored_value(a.path_mig_state);
    w.qkey = a.qkey;
    w.rq_psn = a.rq_psn;
    w.sq_psn = a.sq_psn;
    w.dest_qp_num = a.dest_qp_num;
    w.qp_access_flags = a.qp_access_flags;
    w.max_send_wr = a.cap.max_send_wr;
    w.max_recv_wr = a.cap.max_recv_wr;
    w.max_send_sge = a.cap.max_send_sge;
    w.max_recv_sge = a.cap.max_recv_sge;
    w.max_inline_data = a.cap.max_inline_data;
    w.ah_attr = ah_to_wire(a.ah_attr);
    w.alt_ah_attr = ah_to_wire(a.alt_ah_attr);
    w.pkey_index = a.pkey_index;
    w.alt_pkey_index = a.alt_pkey_index;
    w.en_sqd_async_notify = a.en_sqd_async_notify;
    w.sq_draining = a.sq_draining;
    w.max_rd_atomic = a.max_rd_atomic;
    w.max_dest_rd_atomic = a.max_dest_rd_atomic;
    w.min_rnr_timer = a.min_rnr_timer;
    w.port_num = a.port_num;
    w.timeout = a.timeout;
    w.retry_cnt = a.retry_cnt;
    w.rnr_retry = a.rnr_retry;
    w.alt_port_num = a.alt_port_num;
    w.alt_timeout = a.alt_timeout;
    w.rate_limit = a.rate_limit;
    return w;
}

void from_wire(const proto::qp_attr_wire& w, ibv_qp_attr& a) {
    std::memset(&a, 0, sizeof(a));
    a.qp_state = static_cast<ibv_qp_state>(w.qp_state);
    a.cur_qp_state = static_cast<ibv_qp_state>(w.cur_qp_state);
    a.path_mtu = static_cast<ibv_mtu>(w.path_mtu);
    a.path_mig_state = static_cast<ibv_mig_state>(w.path_mig_state);
    a.qkey = w.qkey;
    a.rq_psn = w.rq_psn;
    a.sq_psn = w.sq_psn;
    a.dest_qp_num = w.dest_qp_num;
    a.qp_access_flags = w.qp_access_flags;
    a.cap.max_send_wr = w.max_send_wr;
    a.cap.max_recv_wr = w.max_recv_wr;
    a.cap.max_send_sge = w.max_send_sge;
    a.cap.max_recv_sge = w.max_recv_sge;
    a.cap.max_inline_data = w.max_inline_data;
    ah_from_wire(w.ah_attr, a.ah_attr);
    ah_from_wire(w.alt_ah_attr, a.alt_ah_attr);
    a.pkey_index = w.pkey_index;
    a.alt_pkey_index = w.alt_pkey_index;
    a.en_sqd_async_notify = w.en_sqd_async_notify;
    a.sq_draining = w.sq_draining;
    a.max_rd_atomic = w.max_rd_atomic;
    a.max_dest_rd_atomic = w.max_dest_rd_atomic;
    a.min_rnr_timer = w.min_rnr_timer;
    a.port_num = w.port_num;
    a.timeout = w.timeout;
    a.retry_cnt = w.retry_cnt;
    a.rnr_retry = w.rnr_retry;
    a.alt_port_num = w.alt_port_num;
    a.alt_timeout = w.alt_timeout;
    a.rate_limit = w.rate_limit;
}

proto::qp_attr_wire masked(const proto::qp_attr_wire& w, int mask) {
    proto::qp_attr_wire m;
    std::memset(&m, 0, sizeof(m));
    auto has = [mask](int bit) { return (mask & bit) != 0; };
    if (has(IBV_QP_STATE)) {
        m.qp_state = w.qp_state;
    }
    if (has(IBV_QP_CUR_STATE)) {
        m.cur_qp_state = w.cur_qp_state;
    }
    if (has(IBV_QP_EN_SQD_ASYNC_NOTIFY)) {
        m.en_sqd_async_notify = w.en_sqd_async_notify;
    }
    if (has(IBV_QP_ACCESS_FLAGS)) {
        m.qp_access_flags = w.qp_access_flags;
    }
    if (has(IBV_QP_PKEY_INDEX)) {
        m.pkey_index = w.pkey_index;
    }
    if (has(IBV_QP_PORT)) {
        m.port_num = w.port_num;
    }
    if (has(IBV_QP_QKEY)) {
        m.qkey = w.qkey;
    }
    if (has(IBV_QP_AV)) {
        m.ah_attr = w.ah_attr;
    }
    if (has(IBV_QP_PATH_MTU)) {
        m.path_mtu = w.path_mtu;
    }
    if (has(IBV_QP_TIMEOUT)) {
        m.timeout = w.timeout;
    }
    if (has(IBV_QP_RETRY_CNT)) {
        m.retry_cnt = w.retry_cnt;
    }
    if (has(IBV_QP_RNR_RETRY)) {
        m.rnr_retry = w.rnr_retry;
    }
    if (has(IBV_QP_RQ_PSN)) {
        m.rq_psn = w.rq_psn;
    }
    if (has(IBV_QP_MAX_QP_RD_ATOMIC)) {
        m.max_rd_atomic = w.max_rd_atomic;
    }
    if (has(IBV_QP_ALT_PATH)) {
        // The alternate path is one attribute in the spec: address, P_Key, port and timeout.
        m.alt_ah_attr = w.alt_ah_attr;
        m.alt_pkey_index = w.alt_pkey_index;
        m.alt_port_num = w.alt_port_num;
        m.alt_timeout = w.alt_timeout;
    }
    if (has(IBV_QP_MIN_RNR_TIMER)) {
        m.min_rnr_timer = w.min_rnr_timer;
    }
    if (has(IBV_QP_SQ_PSN)) {
        m.sq_psn = w.sq_psn;
    }
    if (has(IBV_QP_MAX_DEST_RD_ATOMIC)) {
        m.max_dest_rd_atomic = w.max_dest_rd_atomic;
    }
    if (has(IBV_QP_PATH_MIG_STATE)) {
        m.path_mig_state = w.path_mig_state;
    }
    if (has(IBV_QP_CAP)) {
        m.max_send_wr = w.max_send_wr;
        m.max_recv_wr = w.max_recv_wr;
        m.max_send_sge = w.max_send_sge;
        m.max_recv_sge = w.max_recv_sge;
        m.max_inline_data = w.max_inline_data;
    }
    if (has(IBV_QP_DEST_QPN)) {
        m.dest_qp_num = w.dest_qp_num;
    }
    if (has(IBV_QP_RATE_LIMIT)) {
        m.rate_limit = w.rate_limit;
    }
    return m;
}

}  // namespace jakiro::verbs_proto
