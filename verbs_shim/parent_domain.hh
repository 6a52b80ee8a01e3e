#pragma once
// Thread domains and parent domains (ibv_alloc_td, ibv_alloc_parent_domain), as far as a
// software RNIC can honour them.
//
// A thread domain is a promise by the program that one thread uses the objects made with it;
// providers use it to skip locks. The shim keeps its locks (they cost little uncontended), so
// a TD is only an object to hand back.
//
// A parent domain is a PD in every verb that takes one (ibv_reg_mr, ibv_create_qp(_ex),
// ibv_create_srq(_ex), ibv_create_ah, and ibv_create_cq_ex with IBV_CQ_INIT_ATTR_MASK_PD): it
// carries its protection domain's jakirod handle, so jakirod sees the PD itself and its
// checks are the PD's. Custom allocators (IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) are accepted
// and never called: a provider calls them for the queue and CQ buffers it places in the
// program's memory, and this one has none: the rings are memfds jakirod creates and seals
// (README "Rings"), and letting the program choose their memory would let it hand jakirod a
// mapping it can shrink.
//
// Lifetimes as in rdma-core's providers: a PD with parent domains, or a TD with parent
// domains, is EBUSY to deallocate.

#include <infiniband/verbs.h>

#include <cstdint>

namespace jakiro::verbs_shim {

struct shim_pd;

constexpr uint32_t td_magic = 0x4a4b'5444;  // "DTKJ"

struct shim_td {
    ibv_td td;  // first member
    uint32_t magic;
    uint32_t parents;  // parent domains using it, guarded by the context's mutex
};

shim_td* to_td(ibv_td* td);

// verbs_context ops.
ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* attr);
int dealloc_td(ibv_td* td);
ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr);

// dealloc_pd of a parent domain (pd.cc): releases its PD and TD; nothing lives in jakirod.
int dealloc_parent_domain(shim_pd& parent);

// For ibv_create_cq_ex's IBV_CQ_INIT_ATTR_MASK_PD: a parent domain of `context`, or nullptr.
shim_pd* to_parent_domain(ibv_pd* pd, ibv_context* context);

}  // namespace jakiro::verbs_shim
