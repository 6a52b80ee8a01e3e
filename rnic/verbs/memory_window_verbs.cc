// ibv_alloc_mw and ibv_dealloc_mw in jakirod (resources.hh): the control thread's half of
// memory windows. Binding and invalidation are work requests the engine executes
// (memory_window.hh).

#include <infiniband/verbs.h>

#include <cerrno>

#include "rnic/queues/memory_window.hh"
#include "rnic/verbs/resources.hh"

namespace jakiro::verbs {

int vnic_resources::alloc_mw(uint64_t client, uint32_t pd, uint32_t type, uint32_t& handle) {
    const std::lock_guard lock(_mutex);
    pd_object* p = owned_pd(client, pd);
    if (p == nullptr || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) {
        return EINVAL;
    }
    if (_mrs->window_count() >= _quota.max_mws) {
        return over_quota();  // the vNIC's quota (rdma.max_mws)
    }
    auto window = std::make_shared<mw_entry>();
    window->pd = pd;
    window->owner = client;
    window->type = static_cast<uint8_t>(type);
    if (!_mrs->insert_window(window)) {
        return ENOMEM;  // the key space MRs and windows share is full
    }
    ++p->mws;
    handle = window->handle;
    return 0;
}

int vnic_resources::dealloc_mw(uint64_t client, uint32_t handle) {
    const std::lock_guard lock(_mutex);
    const auto window = _mrs->window_at(handle);
    if (window == nullptr || window->handle != handle || window->owner != client) {
        return EINVAL;
    }
    if (pd_object* p = owned_pd(client, window->pd)) {
        --p->mws;
    }
    _mrs->erase_window(handle);
    return 0;
}

}  // namespace jakiro::verbs
