#include "verbs_shim/parent_domain.hh"

#include <cerrno>
#include <cstdlib>

#include "verbs_shim/context.hh"
#include "verbs_shim/debug.hh"
#include "verbs_shim/pd.hh"

namespace jakiro::verbs_shim {

namespace {

constexpr uint32_t known_parent_domain_mask =
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;

}  // namespace

shim_td* to_td(ibv_td* td) {
    auto* t = reinterpret_cast<shim_td*>(td);
    return t != nullptr && t->magic == td_magic ? t : nullptr;
}

ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* attr) {
    if (to_context(context) == nullptr || attr == nullptr || attr->comp_mask != 0) {
        errno = EINVAL;
        return nullptr;
    }
    auto* t = static_cast<shim_td*>(std::calloc(1, sizeof(shim_td)));
    if (t == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    t->td.context = context;
    t->magic = td_magic;
    return &t->td;
}

int dealloc_td(ibv_td* td) {
    shim_td* t = to_td(td);
    if (t == nullptr) {
        return EINVAL;
    }
    pthread_mutex_lock(&td->context->mutex);
    const bool busy = t->parents != 0;
    pthread_mutex_unlock(&td->context->mutex);
    if (busy) {
        return EBUSY;
    }
    t->magic = 0;
    std::free(t);
    return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
    shim_context* c = to_context(context);
    shim_pd* protection = attr != nullptr ? to_pd(attr->pd) : nullptr;
    shim_td* td = attr != nullptr && attr->td != nullptr ? to_td(attr->td) : nullptr;
    if (c == nullptr || protection == nullptr || protection->protection != nullptr ||
        attr->pd->context != context || (attr->td != nullptr && td == nullptr) ||
        (td != nullptr && attr->td->context != context)) {
        debug(
            "ibv_alloc_parent_domain: needs a PD (not a parent domain) and a TD, if any, of "
            "this context");
        errno = EINVAL;
        return nullptr;
    }
    if ((attr->comp_mask & ~known_parent_domain_mask) != 0) {
        errno = EINVAL;
        return nullptr;
    }
    if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) != 0 &&
        (attr->alloc == nullptr || attr->free == nullptr)) {
        errno = EINVAL;  // rdma-core: both or neither
        return nullptr;
    }
    auto* p = static_cast<shim_pd*>(std::calloc(1, sizeof(shim_pd)));
    if (p == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    p->pd.context = context;
    p->pd.handle = protection->pd.handle;  // jakirod knows the PD; the domain is shim-side
    p->magic = pd_magic;
    p->context = c;
    p->protection = protection;
    p->td = td;
    pthread_mutex_lock(&context->mutex);
    ++protection->parents;
    if (td != nullptr) {
        ++td->parents;
    }
    pthread_mutex_unlock(&context->mutex);
    return &p->pd;
}

int dealloc_parent_domain(shim_pd& parent) {
    ibv_context* context = parent.pd.context;
    pthread_mutex_lock(&context->mutex);
    --parent.protection->parents;
    if (parent.td != nullptr) {
        --parent.td->parents;
    }
    pthread_mutex_unlock(&context->mutex);
    parent.magic = 0;
    std::free(&parent);
    return 0;
}

shim_pd* to_parent_domain(ibv_pd* pd, ibv_context* context) {
    shim_pd* p = to_pd(pd);
    return p != nullptr && p->protection != nullptr && pd->context == context ? p : nullptr;
}

}  // namespace jakiro::verbs_shim
