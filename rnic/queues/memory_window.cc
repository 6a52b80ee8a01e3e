#include "rnic/queues/memory_window.hh"

namespace jakiro::verbs {

namespace proto = verbs_proto;

namespace {

// The live window whose handle is `handle`, or nullptr.
std::shared_ptr<mw_entry> window_named(const mr_table& table, uint32_t handle) {
    auto window = table.window_at(handle);
    return window != nullptr && window->handle == handle ? window : nullptr;
}

}  // namespace

bool bind_window(const mr_table& table, const proto::send_wqe& wqe, uint32_t qp_pd, uint32_t qpn) {
    const auto window = window_named(table, wqe.mw_handle);
    // The window and the QP in one PD: IB spec C10-72 asks it of type 2; here of type 1 too,
    // so that no QP binds (or unbinds) another PD's window (rxe checks type 2 only).
    if (window == nullptr || window->pd != qp_pd) {
        return false;
    }
    // A bind may choose the consumer key (the low 8 bits) only: the rest names the window.
    if ((wqe.rkey >> 8) != (window->handle >> 8)) {
        return false;
    }
    // Local write and MW_BIND are taken and grant nothing (only remote rights are kept below).
    const uint32_t access = wqe.mw_access;
    if ((access & ~proto::mw_access_all) != 0) {
        return false;
    }
    const bool zero_based = (access & proto::access_zero_based) != 0;
    const uint64_t length = wqe.compare_add;
    const uint64_t addr = wqe.remote_addr;
    const auto current = window->binding.load(std::memory_order_acquire);
    if (window->type == IBV_MW_TYPE_1) {
        if (zero_based) {
            return false;  // o10-36.2.2: a type-1 window is never zero-based
        }
    } else {
        // o10-37.2.30: a type-2 window is bound only from the free state; o10-37.2.40: never
        // with length 0 (LOCAL_INV frees it instead).
        if (current != nullptr || length == 0) {
            return false;
        }
    }
    const uint32_t new_rkey = (window->handle & ~0xffu) | (wqe.rkey & 0xffu);
    if (length == 0) {
        // A type-1 bind of length 0 unbinds it: no range, no MR; the new rkey is its name.
        window->binding.store(nullptr, std::memory_order_release);
        window->rkey.store(new_rkey, std::memory_order_release);
        return true;
    }
    const auto mr = table.get_published(wqe.mw_mr_lkey);
    if (mr == nullptr || mr->pd != window->pd) {
        return false;  // no such MR, or another PD's (rxe checks neither PD; IB spec does)
    }
    // C10-73: the MR allows windows. C10-74: a window that lets peers write (or do atomics)
    // needs an MR the device may write to.
    if ((mr->access & proto::access_mw_bind) == 0 ||
        ((access & (proto::access_remote_write | proto::access_remote_atomic)) != 0 &&
         (mr->access & proto::access_local_write) == 0)) {
        return false;
    }
    // C10-75: the window inside the MR. Zero-based or not, `addr` is the MR's name for the
    // window's first byte (rxe checks only the length of a zero-based one).
    if (!range_inside(mr->iova, mr->length, addr, length)) {
        return false;
    }
    auto next = std::make_shared<mw_binding>();
    next->rkey = new_rkey;
    next->qpn = window->type == IBV_MW_TYPE_2 ? qpn : 0;
    next->access = access & (proto::access_remote_write | proto::access_remote_read |
                             proto::access_remote_atomic);
    next->va = zero_based ? 0 : addr;
    next->length = length;
    next->mr_iova = addr;
    next->mr = mr;
    if (window->type == IBV_MW_TYPE_2) {
        // Free → bound once, even if two QPs of the PD race for the window.
        std::shared_ptr<const mw_binding> expected;
        if (!window->binding.compare_exchange_strong(expected, std::move(next),
                                                     std::memory_order_acq_rel)) {
            return false;
        }
    } else {
        window->binding.store(std::move(next), std::memory_order_release);
    }
    window->rkey.store(new_rkey, std::memory_order_release);
    return true;
}

bool invalidate_window(const mr_table& table, uint32_t rkey, uint32_t pd) {
    const auto window = table.window_at(rkey);
    if (window == nullptr || window->pd != pd || window->type != IBV_MW_TYPE_2) {
        return false;  // an MR, a type-1 window (o10-37.2.26), another PD's window
    }
    auto current = window->binding.load(std::memory_order_acquire);
    if (current == nullptr || current->rkey != rkey) {
        return false;  // free already, or an rkey from before the last bind
    }
    return window->binding.compare_exchange_strong(current, nullptr, std::memory_order_acq_rel);
}

ibv_wc_status execute_window_wr(const mr_table& table, const proto::send_wqe& wqe, ibv_qp_type type,
                                uint32_t qp_pd, uint32_t qpn) {
    if (type == IBV_QPT_UD) {
        return IBV_WC_LOC_QP_OP_ERR;
    }
    if (wqe.opcode == IBV_WR_BIND_MW) {
        return bind_window(table, wqe, qp_pd, qpn) ? IBV_WC_SUCCESS : IBV_WC_MW_BIND_ERR;
    }
    return invalidate_window(table, wqe.imm_data, qp_pd) ? IBV_WC_SUCCESS : IBV_WC_LOC_QP_OP_ERR;
}

mr_lookup find_through_window(const mr_table& table, const mw_entry& window, uint32_t pd,
                              uint32_t qpn, uint32_t rkey, uint64_t iova, uint64_t length,
                              uint32_t access) {
    mr_lookup out;  // bad_key
    const auto binding = window.binding.load(std::memory_order_acquire);
    if (binding == nullptr || binding->rkey != rkey) {
        return out;  // unbound, invalidated, or a stale consumer key
    }
    if (window.pd != pd || (binding->qpn != 0 && binding->qpn != qpn)) {
        out.status = mr_status::pd_mismatch;  // another PD's, or another QP's type-2 window
        return out;
    }
    if ((access & ~binding->access) != 0) {
        out.status = mr_status::no_access;
        return out;
    }
    if (!range_inside(binding->va, binding->length, iova, length)) {
        out.status = mr_status::out_of_bounds;
        return out;
    }
    if (!table.published(*binding->mr)) {
        return out;  // the MR was deregistered or re-registered under the window
    }
    const uint64_t at = binding->mr_iova - binding->mr->iova + (iova - binding->va);
    out.status = mr_status::ok;
    out.bytes = std::span<std::byte>(binding->mr->data + at, length);
    out.mr = binding->mr;
    return out;
}

}  // namespace jakiro::verbs
