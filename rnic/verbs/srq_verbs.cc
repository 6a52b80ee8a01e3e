// vnic_resources: the shared-receive-queue verbs. Validation and ownership happen here, on the
// vNIC's endpoint thread. The SRQ's ring is consumed on the engine's thread by the QPs that
// take from it; the only state both threads touch is the armed limit, an atomic, so modify
// and query need no engine::call.

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "rnic/verbs/resources.hh"

namespace jakiro::verbs {

namespace proto = verbs_proto;

int vnic_resources::create_srq(uint64_t client, const proto::create_srq_request& req,
                               srq_created& out) {
    const std::lock_guard lock(_mutex);
    if (_qp_support.engine == nullptr) {
        return EOPNOTSUPP;  // no engine, no QPs to share it
    }
    if (req.flags != 0 || req.reserved != 0) {
        return EINVAL;
    }
    pd_object* pd = owned_pd(client, req.pd_handle);
    if (pd == nullptr) {
        return EINVAL;
    }
    // ibv_create_srq ignores srq_limit, but a limit above the queue never makes sense.
    if (req.max_wr == 0 || req.max_wr > _limits.max_srq_wr || req.max_sge > _limits.max_srq_sge ||
        req.srq_limit > req.max_wr) {
        return EINVAL;
    }
    const uint32_t capacity = ring_capacity_for(req.max_wr);
    if (_srqs.size() >= _quota.max_srqs ||
        capacity > _quota.max_wqes - std::min(_wqes, _quota.max_wqes)) {
        return over_quota();  // the vNIC's quota (rdma.max_srqs, rdma.max_wqes)
    }
    account_charge mapping;
    if (!charge(_account, host_resource::mappings, 1, mapping)) {
        return ENOMEM;  // over its share of a full host (host_reserve.hh)
    }
    const uint32_t handle = _srq_keys.allocate();
    if (handle == 0) {
        return ENOMEM;  // max_srq reached
    }
    srq_event_sink events{_qp_support.events.raise, _qp_support.events.context};
    std::shared_ptr<shared_receive_queue> srq;
    int ring_fd = -1;
    // A slot holds wqe_max_sge SGEs whatever was asked: that is what the SRQ really has.
    if (const int error = shared_receive_queue::create(capacity, handle, client, req.pd_handle,
                                                       proto::wqe_max_sge, events, srq, ring_fd);
        error != 0) {
        _srq_keys.release(handle);
        return error;
    }
    srq->hold(std::move(mapping));
    out.handle = handle;
    out.capacity = srq->capacity();
    out.max_sge = srq->max_sge();
    out.ring_bytes = srq->bytes();
    out.ring_fd = ring_fd;
    ++pd->srqs;
    _wqes += srq->capacity();
    _srqs.emplace(handle, std::move(srq));
    return 0;
}

int vnic_resources::modify_srq(uint64_t client, const proto::modify_srq_request& req) {
    const std::lock_guard lock(_mutex);
    const auto it = _srqs.find(req.srq_handle);
    if (it == _srqs.end() || it->second->owner() != client) {
        return EINVAL;
    }
    if ((req.attr_mask & ~(proto::srq_attr_max_wr | proto::srq_attr_limit)) != 0) {
        return EINVAL;
    }
    if ((req.attr_mask & proto::srq_attr_max_wr) != 0) {
        return EOPNOTSUPP;  // resizing: the ring is sealed at its size (as on many RNICs)
    }
    if ((req.attr_mask & proto::srq_attr_limit) != 0) {
        if (req.srq_limit > it->second->capacity()) {
            return EINVAL;
        }
        it->second->arm_limit(req.srq_limit);
    }
    return 0;
}

int vnic_resources::query_srq(uint64_t client, uint32_t handle, proto::query_srq_reply& out) {
    const std::lock_guard lock(_mutex);
    const auto it = _srqs.find(handle);
    if (it == _srqs.end() || it->second->owner() != client) {
        return EINVAL;
    }
    out.max_wr = it->second->capacity();
    out.max_sge = it->second->max_sge();
    out.srq_limit = it->second->armed_limit();
    return 0;
}

int vnic_resources::destroy_srq(uint64_t client, uint32_t handle) {
    const std::lock_guard lock(_mutex);
    const auto it = _srqs.find(handle);
    if (it == _srqs.end() || it->second->owner() != client) {
        return EINVAL;
    }
    if (it->second->users != 0) {
        return EBUSY;
    }
    if (pd_object* pd = owned_pd(client, it->second->pd())) {
        --pd->srqs;
    }
    _wqes -= it->second->capacity();
    _srqs.erase(it);  // no QP takes from it any more: the ring goes now
    _srq_keys.release(handle);
    return 0;
}

std::shared_ptr<shared_receive_queue> vnic_resources::find_srq(uint32_t handle) const {
    const std::lock_guard lock(_mutex);
    const auto it = _srqs.find(handle);
    return it == _srqs.end() ? nullptr : it->second;
}

}  // namespace jakiro::verbs
