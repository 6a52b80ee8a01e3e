// Every verbs_context op that is not built yet, failing cleanly with EOPNOTSUPP (after
// rdma-core's dummy_ops.c): an inline verb of verbs.h that reaches one of these returns an
// error instead of jumping through a NULL pointer. The engine replaces them as it grows.

#include <cerrno>

#include "verbs_shim/context.hh"

namespace jakiro::verbs_shim {

namespace {

// For the ibv_context_ops slots libibverbs 1.0 used internally; applications never call them,
// but a stray call must not jump to NULL.
void* compat_unsupported() {
    errno = ENOSYS;
    return nullptr;
}

template <typename T>
T* unsupported_ptr() {
    errno = EOPNOTSUPP;
    return nullptr;
}

}  // namespace

void fill_unsupported_ops(verbs_context& v) {
    ibv_context_ops& ops = v.context.ops;
    ops._compat_query_device = [](ibv_context*, ibv_device_attr*) { return EOPNOTSUPP; };
    ops._compat_query_port = [](ibv_context*, uint8_t, _compat_ibv_port_attr*) {
        return EOPNOTSUPP;
    };
    ops._compat_alloc_pd = compat_unsupported;
    ops._compat_dealloc_pd = compat_unsupported;
    ops._compat_reg_mr = compat_unsupported;
    ops._compat_rereg_mr = compat_unsupported;
    ops._compat_dereg_mr = compat_unsupported;
    // alloc_mw, bind_mw and dealloc_mw are built (memory_window.cc): open_device sets them.
    ops._compat_create_cq = compat_unsupported;
    // ibv_poll_cq returns a count of completions: an error must be negative, or the caller
    // would read that many work completions that were never written.
    ops.poll_cq = [](ibv_cq*, int, ibv_wc*) { return -EOPNOTSUPP; };
    ops.req_notify_cq = [](ibv_cq*, int) { return EOPNOTSUPP; };
    ops._compat_cq_event = compat_unsupported;
    ops._compat_resize_cq = compat_unsupported;
    ops._compat_destroy_cq = compat_unsupported;
    ops._compat_create_srq = compat_unsupported;
    ops._compat_modify_srq = compat_unsupported;
    ops._compat_query_srq = compat_unsupported;
    ops._compat_destroy_srq = compat_unsupported;
    // post_srq_recv is built (srq.cc): open_device sets it.
    ops._compat_create_qp = compat_unsupported;
    ops._compat_query_qp = compat_unsupported;
    ops._compat_modify_qp = compat_unsupported;
    ops._compat_destroy_qp = compat_unsupported;
    // post_send and post_recv are built (post.cc): open_device sets them.
    ops._compat_create_ah = compat_unsupported;
    ops._compat_destroy_ah = compat_unsupported;
    ops._compat_attach_mcast = compat_unsupported;
    ops._compat_detach_mcast = compat_unsupported;
    ops._compat_async_event = compat_unsupported;

    v.query_port = [](ibv_context*, uint8_t, ibv_port_attr*, size_t) { return EOPNOTSUPP; };
    v.advise_mr = [](ibv_pd*, ibv_advise_mr_advice, uint32_t, ibv_sge*, uint32_t) {
        return EOPNOTSUPP;
    };
    v.alloc_null_mr = [](ibv_pd*) { return unsupported_ptr<ibv_mr>(); };
    v.read_counters = [](ibv_counters*, uint64_t*, uint32_t, uint32_t) { return EOPNOTSUPP; };
    v.attach_counters_point_flow = [](ibv_counters*, ibv_counter_attach_attr*, ibv_flow*) {
        return EOPNOTSUPP;
    };
    v.create_counters = [](ibv_context*, ibv_counters_init_attr*) {
        return unsupported_ptr<ibv_counters>();
    };
    v.destroy_counters = [](ibv_counters*) { return EOPNOTSUPP; };
    v.reg_dm_mr = [](ibv_pd*, ibv_dm*, uint64_t, size_t, unsigned int) {
        return unsupported_ptr<ibv_mr>();
    };
    v.alloc_dm = [](ibv_context*, ibv_alloc_dm_attr*) { return unsupported_ptr<ibv_dm>(); };
    v.free_dm = [](ibv_dm*) { return EOPNOTSUPP; };
    v.modify_flow_action_esp = [](ibv_flow_action*, ibv_flow_action_esp_attr*) {
        return EOPNOTSUPP;
    };
    v.destroy_flow_action = [](ibv_flow_action*) { return EOPNOTSUPP; };
    v.create_flow_action_esp = [](ibv_context*, ibv_flow_action_esp_attr*) {
        return unsupported_ptr<ibv_flow_action>();
    };
    v.modify_qp_rate_limit = [](ibv_qp*, ibv_qp_rate_limit_attr*) { return EOPNOTSUPP; };
    // alloc_parent_domain, alloc_td and dealloc_td are built (parent_domain.cc).
    v.modify_cq = [](ibv_cq*, ibv_modify_cq_attr*) { return EOPNOTSUPP; };
    v.post_srq_ops = [](ibv_srq*, ibv_ops_wr* op, ibv_ops_wr** bad) {
        if (bad != nullptr) {
            *bad = op;
        }
        return EOPNOTSUPP;
    };
    v.destroy_rwq_ind_table = [](ibv_rwq_ind_table*) { return EOPNOTSUPP; };
    v.create_rwq_ind_table = [](ibv_context*, ibv_rwq_ind_table_init_attr*) {
        return unsupported_ptr<ibv_rwq_ind_table>();
    };
    v.destroy_wq = [](ibv_wq*) { return EOPNOTSUPP; };
    v.modify_wq = [](ibv_wq*, ibv_wq_attr*) { return EOPNOTSUPP; };
    v.create_wq = [](ibv_context*, ibv_wq_init_attr*) { return unsupported_ptr<ibv_wq>(); };
    // query_rt_values is built (context.cc): open_device sets it.
    v.create_cq_ex = [](ibv_context*, ibv_cq_init_attr_ex*) {
        return unsupported_ptr<ibv_cq_ex>();
    };
    v.priv = nullptr;  // libibverbs' private state: we are not libibverbs
    v.query_device_ex = [](ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*,
                           size_t) { return EOPNOTSUPP; };
    v.ibv_destroy_flow = [](ibv_flow*) { return EOPNOTSUPP; };
    v.ABI_placeholder2 = nullptr;
    v.ibv_create_flow = [](ibv_qp*, ibv_flow_attr*) { return unsupported_ptr<ibv_flow>(); };
    v.ABI_placeholder1 = nullptr;
    v.open_qp = [](ibv_context*, ibv_qp_open_attr*) { return unsupported_ptr<ibv_qp>(); };
    // create_qp_ex is built (qp.cc): open_device sets it.
    v.get_srq_num = [](ibv_srq*, uint32_t*) { return EOPNOTSUPP; };  // XRC SRQs only
    // create_srq_ex is built (srq.cc; XRC and tag matching fail there): open_device sets it.
    v.open_xrcd = [](ibv_context*, ibv_xrcd_init_attr*) { return unsupported_ptr<ibv_xrcd>(); };
    v.close_xrcd = [](ibv_xrcd*) { return EOPNOTSUPP; };
    v._ABI_placeholder3 = 0;
}

}  // namespace jakiro::verbs_shim
