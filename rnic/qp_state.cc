#include "rnic/qp_state.hh"

#include <cerrno>
#include <cstring>

#include "rnic/wire/psn.hh"

namespace jakiro::rnic {

namespace {

constexpr int num_states = IBV_QPS_ERR + 1;

// Mask bits rdma-core's legacy ibv_cmd_modify_qp passes to a kernel at all (everything up to
// IBV_QP_DEST_QPN) plus IBV_QP_RATE_LIMIT from the extended command. Anything else is
// EOPNOTSUPP before any state rule is looked at.
constexpr int known_mask_bits = ((IBV_QP_DEST_QPN << 1) - 1) | IBV_QP_RATE_LIMIT;

// IBTA 1.6 §3.5.3: Q_Keys with the top bit set are "controlled"; an unprivileged consumer may not
// set them (Linux: EPERM since "RDMA/uverbs: Restrict usage of privileged QKEYs"). Tenants are
// never privileged here.
constexpr uint32_t controlled_qkey_bit = 0x80000000;

constexpr uint8_t max_5bit = 31;  // timeout, min_rnr_timer: 5-bit wire/timer codes
constexpr uint8_t max_3bit = 7;   // retry_cnt, rnr_retry: 3-bit counters

// Per transport, in the order RC, UC, UD.
struct per_type {
    int rc = 0;
    int uc = 0;
    int ud = 0;
};

struct transition {
    bool valid = false;
    per_type required;
    per_type optional;
};

struct transition_table {
    transition at[num_states][num_states];
};

// The Modify QP attribute rules of IBTA vol. 1 ch. 11 for RC, UC and UD, as the Linux kernel's
// ib_modify_qp_is_ok table and the ibv_modify_qp(3) man page state them.
constexpr void fill_rules(transition_table& table) {
    auto& t = table.at;
    // Leaving for RESET or ERR is always allowed and takes no attributes.
    for (int from = 0; from < num_states; ++from) {
        t[from][IBV_QPS_RESET].valid = true;
        t[from][IBV_QPS_ERR].valid = true;
    }

    // RESET -> INIT: the port, partition and (connected) remote access or (UD) Q_Key.
    const int init_rc_uc = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    const int init_ud = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    t[IBV_QPS_RESET][IBV_QPS_INIT] = {true, {init_rc_uc, init_rc_uc, init_ud}, {}};
    // INIT -> INIT: the same attributes, each optional.
    t[IBV_QPS_INIT][IBV_QPS_INIT] = {true, {}, {init_rc_uc, init_rc_uc, init_ud}};

    // INIT -> RTR: the connection (address vector, remote QPN, receive PSN, MTU); RC adds its
    // responder resources and RNR NAK timer.
    const int rtr_uc = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    const int rtr_rc = rtr_uc | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    const int rtr_opt_rc_uc = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
    t[IBV_QPS_INIT][IBV_QPS_RTR] = {
        true, {rtr_rc, rtr_uc, 0}, {rtr_opt_rc_uc, rtr_opt_rc_uc, IBV_QP_PKEY_INDEX | IBV_QP_QKEY}};

    // RTR -> RTS: the send side (send PSN; RC adds ACK timeout, retries, initiator depth).
    const int rts_rc = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                       IBV_QP_MAX_QP_RD_ATOMIC;
    const int to_rts_opt_uc =
        IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
    const int to_rts_opt_rc = to_rts_opt_uc | IBV_QP_MIN_RNR_TIMER;
    const int to_rts_opt_ud = IBV_QP_CUR_STATE | IBV_QP_QKEY;
    t[IBV_QPS_RTR][IBV_QPS_RTS] = {true,
                                   {rts_rc, IBV_QP_SQ_PSN, IBV_QP_SQ_PSN},
                                   {to_rts_opt_rc, to_rts_opt_uc, to_rts_opt_ud}};

    // RTS -> RTS and SQD -> RTS: tune a live QP.
    t[IBV_QPS_RTS][IBV_QPS_RTS] = {true, {}, {to_rts_opt_rc, to_rts_opt_uc, to_rts_opt_ud}};
    t[IBV_QPS_SQD][IBV_QPS_RTS] = {true, {}, {to_rts_opt_rc, to_rts_opt_uc, to_rts_opt_ud}};

    // RTS -> SQD: drain the send queue, optionally with an event when done.
    const int sqd_notify = IBV_QP_EN_SQD_ASYNC_NOTIFY;
    t[IBV_QPS_RTS][IBV_QPS_SQD] = {true, {}, {sqd_notify, sqd_notify, sqd_notify}};

    // SQD -> SQD: the drained QP is where path and limits may be changed.
    const int sqd_uc = IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                       IBV_QP_PATH_MIG_STATE;
    const int sqd_rc = sqd_uc | IBV_QP_PORT | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    t[IBV_QPS_SQD][IBV_QPS_SQD] = {true, {}, {sqd_rc, sqd_uc, IBV_QP_PKEY_INDEX | IBV_QP_QKEY}};

    // SQE -> RTS: resume after a UC/UD send error. RC never enters SQE (its send errors are
    // fatal), so its row takes nothing but the state, as in the kernel's table.
    t[IBV_QPS_SQE][IBV_QPS_RTS] = {
        true, {}, {0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS, IBV_QP_CUR_STATE | IBV_QP_QKEY}};
}

constexpr transition_table rules = [] {
    transition_table t{};
    fill_rules(t);
    return t;
}();

int pick(const per_type& p, ibv_qp_type type) {
    switch (type) {
        case IBV_QPT_RC:
            return p.rc;
        case IBV_QPT_UC:
            return p.uc;
        default:
            return p.ud;
    }
}

// The integer a C caller stored in an enum field of ibv_qp_attr. Reading the enum itself would be
// undefined for garbage outside its value range, and the shim forwards whatever the tenant sent.
template <typename Enum>
int raw(const Enum& field) {
    static_assert(sizeof(Enum) == sizeof(int));
    int v;
    std::memcpy(&v, &field, sizeof(v));
    return v;
}

bool state_in_range(int s) {
    return s >= IBV_QPS_RESET && s <= IBV_QPS_ERR;
}

// RoCE address vectors must carry a GRH (the GID is the IP address), like the kernel's
// rdma_check_ah_attr on a RoCE port.
bool ah_ok(const ibv_ah_attr& ah, const qp_device_limits& limits) {
    return ah.port_num >= 1 && ah.port_num <= limits.port_count && ah.is_global &&
           ah.grh.sgid_index < limits.gid_table_len;
}

}  // namespace

bool qp_type_supported(ibv_qp_type type) {
    return type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_UD;
}

qp_transition_rule qp_transition(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type) {
    if (!state_in_range(cur) || !state_in_range(next) || !qp_type_supported(type)) {
        return {};
    }
    const transition& t = rules.at[cur][next];
    if (!t.valid) {
        return {};
    }
    return {true, pick(t.required, type), pick(t.optional, type)};
}

bool modify_qp_mask_ok(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type, int mask) {
    const qp_transition_rule r = qp_transition(cur, next, type);
    if (!r.valid) {
        return false;
    }
    if ((mask & r.required) != r.required) {
        return false;
    }
    return (mask & ~(r.required | r.optional | IBV_QP_STATE)) == 0;
}

qp_state_machine::qp_state_machine(ibv_qp_type type, const qp_device_limits& limits)
    : _type(type), _limits(limits) {
    _attr.qp_state = IBV_QPS_RESET;
    _attr.cur_qp_state = IBV_QPS_RESET;
}

int qp_state_machine::modify(const ibv_qp_attr& attr, int mask) {
    if (mask & ~known_mask_bits) {
        return EOPNOTSUPP;
    }
    if (!qp_type_supported(_type)) {
        return EINVAL;
    }
    if ((mask & IBV_QP_STATE) && !state_in_range(raw(attr.qp_state))) {
        return EINVAL;
    }
    // IBV_QP_CUR_STATE is the consumer's claim about the current state; acting on a wrong
    // claim would desynchronise the engine, so a mismatch fails instead of being believed.
    if ((mask & IBV_QP_CUR_STATE) && raw(attr.cur_qp_state) != state()) {
        return EINVAL;
    }
    const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr.qp_state : state();
    if (!modify_qp_mask_ok(state(), next, _type, mask)) {
        return EINVAL;
    }
    if (const int err = check_values(attr, mask); err != 0) {
        return err;
    }
    apply(attr, mask, next);
    return 0;
}

int qp_state_machine::check_values(const ibv_qp_attr& a, int mask) const {
    if ((mask & IBV_QP_PORT) && (a.port_num < 1 || a.port_num > _limits.port_count)) {
        return EINVAL;
    }
    if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index >= _limits.pkey_table_len) {
        return EINVAL;
    }
    if ((mask & IBV_QP_QKEY) && (a.qkey & controlled_qkey_bit)) {
        return EPERM;
    }
    if ((mask & IBV_QP_AV) && !ah_ok(a.ah_attr, _limits)) {
        return EINVAL;
    }
    if ((mask & IBV_QP_ALT_PATH) &&
        (!ah_ok(a.alt_ah_attr, _limits) || a.alt_port_num < 1 ||
         a.alt_port_num > _limits.port_count || a.alt_pkey_index >= _limits.pkey_table_len ||
         a.alt_timeout > max_5bit)) {
        return EINVAL;
    }
    if ((mask & IBV_QP_PATH_MTU) &&
        (raw(a.path_mtu) < IBV_MTU_256 || raw(a.path_mtu) > _limits.max_mtu)) {
        return EINVAL;
    }
    if ((mask & IBV_QP_TIMEOUT) && a.timeout > max_5bit) {
        return EINVAL;
    }
    if ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > max_5bit) {
        return EINVAL;
    }
    if ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > max_3bit) {
        return EINVAL;
    }
    if ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > max_3bit) {
        return EINVAL;
    }
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > _limits.max_qp_init_rd_atom) {
        return EINVAL;
    }
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > _limits.max_qp_rd_atom) {
        return EINVAL;
    }
    if ((mask & IBV_QP_PATH_MIG_STATE) &&
        (raw(a.path_mig_state) < IBV_MIG_MIGRATED || raw(a.path_mig_state) > IBV_MIG_ARMED)) {
        return EINVAL;
    }
    return 0;
}

bool qp_state_machine::resume(const ibv_qp_attr& attr) {
    // The enum fields as integers first: a corrupt image may hold anything in them.
    const int state = raw(attr.qp_state);
    if (!state_in_range(state) || raw(attr.cur_qp_state) != state || attr.sq_draining > 1 ||
        (attr.sq_draining != 0 && state != IBV_QPS_SQD) || raw(attr.path_mtu) < 0 ||
        raw(attr.path_mtu) > IBV_MTU_4096 || raw(attr.path_mig_state) < IBV_MIG_MIGRATED ||
        raw(attr.path_mig_state) > IBV_MIG_ARMED) {
        return false;
    }
    // Every value modify() checks, whether or not this type or state sets it: an attribute
    // never set is zero, which passes wherever zero is allowed.
    int mask = IBV_QP_TIMEOUT | IBV_QP_MIN_RNR_TIMER | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
               IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PKEY_INDEX |
               IBV_QP_QKEY;
    if (attr.port_num != 0) {
        mask |= IBV_QP_PORT;
    }
    if (raw(attr.path_mtu) != 0) {
        mask |= IBV_QP_PATH_MTU;
    }
    if (attr.ah_attr.port_num != 0) {
        mask |= IBV_QP_AV;
    }
    if (raw(attr.path_mig_state) != 0) {
        mask |= IBV_QP_PATH_MIG_STATE;
    }
    if (check_values(attr, mask) != 0) {
        return false;
    }
    _attr = attr;
    return true;
}

void qp_state_machine::apply(const ibv_qp_attr& a, int mask, ibv_qp_state next) {
    if (next == IBV_QPS_RESET) {
        // IBTA ch. 10: RESET forgets everything; the next INIT starts from scratch.
        _attr = ibv_qp_attr{};
        _attr.qp_state = IBV_QPS_RESET;
        _attr.cur_qp_state = IBV_QPS_RESET;
        return;
    }
    if (mask & IBV_QP_ACCESS_FLAGS) {
        _attr.qp_access_flags = a.qp_access_flags;
    }
    if (mask & IBV_QP_PKEY_INDEX) {
        _attr.pkey_index = a.pkey_index;
    }
    if (mask & IBV_QP_PORT) {
        _attr.port_num = a.port_num;
    }
    if (mask & IBV_QP_QKEY) {
        _attr.qkey = a.qkey;
    }
    if (mask & IBV_QP_AV) {
        _attr.ah_attr = a.ah_attr;
    }
    if (mask & IBV_QP_PATH_MTU) {
        _attr.path_mtu = a.path_mtu;
    }
    if (mask & IBV_QP_TIMEOUT) {
        _attr.timeout = a.timeout;
    }
    if (mask & IBV_QP_RETRY_CNT) {
        _attr.retry_cnt = a.retry_cnt;
    }
    if (mask & IBV_QP_RNR_RETRY) {
        _attr.rnr_retry = a.rnr_retry;
    }
    // PSNs and QPNs are 24-bit on the wire; RNICs keep the low 24 bits of what they are given
    // (ibv_rc_pingpong and perftest pass lrand48() & 0xffffff, others pass raw random numbers).
    if (mask & IBV_QP_RQ_PSN) {
        _attr.rq_psn = a.rq_psn & psn_mask;
    }
    if (mask & IBV_QP_SQ_PSN) {
        _attr.sq_psn = a.sq_psn & psn_mask;
    }
    if (mask & IBV_QP_DEST_QPN) {
        _attr.dest_qp_num = a.dest_qp_num & psn_mask;
    }
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) {
        _attr.max_rd_atomic = a.max_rd_atomic;
    }
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
        _attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if (mask & IBV_QP_ALT_PATH) {
        // Accepted and reported back, never used: the device does not advertise
        // IBV_DEVICE_AUTO_PATH_MIG, so no path ever migrates.
        _attr.alt_ah_attr = a.alt_ah_attr;
        _attr.alt_pkey_index = a.alt_pkey_index;
        _attr.alt_port_num = a.alt_port_num;
        _attr.alt_timeout = a.alt_timeout;
    }
    if (mask & IBV_QP_MIN_RNR_TIMER) {
        _attr.min_rnr_timer = a.min_rnr_timer;
    }
    if (mask & IBV_QP_PATH_MIG_STATE) {
        _attr.path_mig_state = a.path_mig_state;
    }
    if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) {
        _attr.en_sqd_async_notify = a.en_sqd_async_notify;
    }
    if (next == IBV_QPS_SQD && state() != IBV_QPS_SQD) {
        _attr.sq_draining = 1;  // until the engine has no send WR in flight
    } else if (next != IBV_QPS_SQD) {
        _attr.sq_draining = 0;
    }
    _attr.qp_state = next;
    _attr.cur_qp_state = next;
}

void qp_state_machine::enter_error() {
    _attr.qp_state = IBV_QPS_ERR;
    _attr.cur_qp_state = IBV_QPS_ERR;
    _attr.sq_draining = 0;
}

ibv_qp_state qp_state_machine::on_send_error() {
    // IBTA ch. 10: a send-side error is fatal for a connected reliable QP; unreliable QPs keep
    // their receive side running and park the send queue in SQE until resumed.
    if (_type == IBV_QPT_RC) {
        enter_error();
    } else if (state() == IBV_QPS_RTS || state() == IBV_QPS_SQD) {
        _attr.qp_state = IBV_QPS_SQE;
        _attr.cur_qp_state = IBV_QPS_SQE;
        _attr.sq_draining = 0;
    }
    return state();
}

bool qp_state_machine::finish_drain() {
    if (state() != IBV_QPS_SQD || !_attr.sq_draining) {
        return false;
    }
    _attr.sq_draining = 0;
    return _attr.en_sqd_async_notify != 0;
}

wr_disposition qp_state_machine::send_disposition() const {
    switch (state()) {
        case IBV_QPS_RTS:
            return wr_disposition::execute;
        case IBV_QPS_SQD:
            return wr_disposition::hold;
        case IBV_QPS_SQE:
        case IBV_QPS_ERR:
            return wr_disposition::flush;
        default:
            return wr_disposition::reject;  // RESET, INIT, RTR
    }
}

wr_disposition qp_state_machine::recv_disposition() const {
    switch (state()) {
        case IBV_QPS_RESET:
            return wr_disposition::reject;
        case IBV_QPS_ERR:
            return wr_disposition::flush;
        default:
            return wr_disposition::execute;  // INIT on: receives may be posted before connecting
    }
}

bool qp_state_machine::accepts_inbound() const {
    switch (state()) {
        case IBV_QPS_RTR:
        case IBV_QPS_RTS:
        case IBV_QPS_SQD:
        case IBV_QPS_SQE:
            return true;
        default:
            return false;
    }
}

}  // namespace jakiro::rnic
