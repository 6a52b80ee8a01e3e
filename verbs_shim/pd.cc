#include "verbs_shim/pd.hh"

#include <cerrno>
#include <cstdlib>
#include <new>
#include <type_traits>

#include "verbs_abi/protocol.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/debug.hh"
#include "verbs_shim/parent_domain.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

static_assert(std::is_standard_layout_v<shim_pd> && offsetof(shim_pd, pd) == 0);
static_assert(std::is_standard_layout_v<shim_mr> && offsetof(shim_mr, mr) == 0);
// The wire's access bits are libibverbs' own.
static_assert(uint32_t{proto::access_local_write} == uint32_t{IBV_ACCESS_LOCAL_WRITE});
static_assert(uint32_t{proto::access_remote_write} == uint32_t{IBV_ACCESS_REMOTE_WRITE});
static_assert(uint32_t{proto::access_remote_read} == uint32_t{IBV_ACCESS_REMOTE_READ});
static_assert(uint32_t{proto::access_remote_atomic} == uint32_t{IBV_ACCESS_REMOTE_ATOMIC});

namespace {

// A hint that changes nothing for this device: "this is hugetlb memory" (registration checks
// what it is).
constexpr unsigned ignored_access = IBV_ACCESS_HUGETLB;
// What jakirod keeps of an MR's rights: the access bits and whether windows may bind to it.
constexpr uint32_t kept_access = proto::mr_access_all | proto::access_mw_bind;

// ibv_access_flags -> mr_access, or an errno. Optional bits (IBV_ACCESS_OPTIONAL_RANGE, e.g.
// relaxed ordering) are dropped as libibverbs drops those a device does not support.
int translate_access(unsigned access, uint32_t& out) {
    access &= ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
    if ((access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_ZERO_BASED)) != 0) {
        debug("ibv_reg_mr: on-demand paging and zero-based MRs are not supported");
        return EOPNOTSUPP;
    }
    if ((access & ~(kept_access | ignored_access)) != 0) {
        return EINVAL;
    }
    out = access & kept_access;
    if ((out & (proto::access_remote_write | proto::access_remote_atomic)) != 0 &&
        (out & proto::access_local_write) == 0) {
        return EINVAL;  // as the kernel: remote write and atomics need local write
    }
    return 0;
}

}  // namespace

shim_pd* to_pd(ibv_pd* pd) {
    auto* p = reinterpret_cast<shim_pd*>(pd);
    return p != nullptr && p->magic == pd_magic ? p : nullptr;
}

shim_mr* to_mr(ibv_mr* mr) {
    auto* m = reinterpret_cast<shim_mr*>(mr);
    return m != nullptr && m->magic == mr_magic ? m : nullptr;
}

ibv_pd* alloc_pd(ibv_context* context) {
    shim_context* c = to_context(context);
    if (c == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    auto* p = static_cast<shim_pd*>(std::calloc(1, sizeof(shim_pd)));
    if (p == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    auto req = proto::make_message<proto::alloc_pd_request>(
        static_cast<uint16_t>(proto::opcode::alloc_pd), 0);
    proto::alloc_pd_reply reply;
    if (const int error = c->chan->call(&req, sizeof(req), &reply, sizeof(reply)); error != 0) {
        std::free(p);
        errno = error;
        return nullptr;
    }
    p->pd.context = context;
    p->pd.handle = reply.pd_handle;
    p->magic = pd_magic;
    p->context = c;
    return &p->pd;
}

int dealloc_pd(ibv_pd* pd) {
    shim_pd* p = to_pd(pd);
    if (p == nullptr) {
        return EINVAL;
    }
    if (p->protection != nullptr) {
        return dealloc_parent_domain(*p);  // nothing of it lives in jakirod
    }
    pthread_mutex_lock(&pd->context->mutex);
    const bool has_parents = p->parents != 0;
    pthread_mutex_unlock(&pd->context->mutex);
    if (has_parents) {
        return EBUSY;  // parent domains still stand on it
    }
    // EBUSY while MRs use it: jakirod keeps the count.
    if (const int error = destroy_object(p->context, proto::opcode::dealloc_pd, pd->handle);
        error != 0) {
        return error;
    }
    p->magic = 0;
    std::free(p);
    return 0;
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, std::size_t length, uint64_t iova, unsigned access) {
    shim_pd* p = to_pd(pd);
    if (p == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    uint32_t rights = 0;
    if (const int error = translate_access(access, rights); error != 0) {
        errno = error;
        return nullptr;
    }
    if (length == 0 || length > p->context->hello.lim.max_mr_size) {
        debug("ibv_reg_mr(%p, %zu): the length must be 1 to %llu bytes", addr, length,
              static_cast<unsigned long long>(p->context->hello.lim.max_mr_size));
        errno = EINVAL;
        return nullptr;
    }
    auto* m = static_cast<shim_mr*>(std::calloc(1, sizeof(shim_mr)));
    if (m == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    memory_backing& backing = memory_backing::process();
    backing_span span;
    if (const int error =
            backing.acquire(addr, length, (rights & proto::mr_access_writes) != 0, span);
        error != 0) {
        std::free(m);
        errno = error;
        return nullptr;
    }
    auto req =
        proto::make_message<proto::reg_mr_request>(static_cast<uint16_t>(proto::opcode::reg_mr), 0);
    req.pd_handle = pd->handle;
    req.access = rights;
    req.addr = reinterpret_cast<uintptr_t>(addr);
    req.length = length;
    req.iova = iova;
    req.fd_offset = span.fd_offset;
    req.page_offset = span.page_offset;
    proto::reg_mr_reply reply;
    if (const int error =
            p->context->chan->call(&req, sizeof(req), &reply, sizeof(reply), nullptr, span.fd);
        error != 0) {
        backing.release(addr, length);
        std::free(m);
        errno = error;
        return nullptr;
    }
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.handle = reply.mr_handle;
    m->mr.lkey = reply.lkey;
    m->mr.rkey = reply.rkey;
    m->magic = mr_magic;
    m->access = rights;
    m->iova = iova;
    return &m->mr;
}

int dereg_mr(ibv_mr* mr) {
    shim_mr* m = to_mr(mr);
    if (m == nullptr) {
        return EINVAL;
    }
    shim_pd* p = to_pd(mr->pd);
    if (p == nullptr) {
        return EINVAL;
    }
    if (const int error = destroy_object(p->context, proto::opcode::dereg_mr, mr->handle);
        error != 0) {
        return error;
    }
    // jakirod has unmapped it: the pages may leave the memfd once nothing else uses them.
    memory_backing::process().release(mr->addr, mr->length);
    m->magic = 0;
    std::free(m);
    return 0;
}

int rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, std::size_t length, int access) {
    constexpr int known_flags =
        IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
    shim_mr* m = to_mr(mr);
    shim_pd* old_pd = m != nullptr ? to_pd(mr->pd) : nullptr;
    // What libibverbs refuses before it asks the device (IBV_REREG_MR_ERR_INPUT, EINVAL, the
    // MR untouched): no MR of ours, an unknown flag (IBV_REREG_MR_KEEP_VALID too), a new
    // translation without a range, access bits without IBV_REREG_MR_CHANGE_ACCESS.
    if (old_pd == nullptr || (flags & ~known_flags) != 0 ||
        ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0 && (addr == nullptr || length == 0)) ||
        (access != 0 && (flags & IBV_REREG_MR_CHANGE_ACCESS) == 0)) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    // What the device refuses (the kernel's rereg command: no flag at all, a PD that is not
    // this context's, rights it cannot grant, a length past max_mr_size) is a command error,
    // IBV_REREG_MR_ERR_CMD with its errno. The API then says the MR should not be used; here
    // the old registration is in fact untouched and usable.
    if (flags == 0 || ((flags & IBV_REREG_MR_CHANGE_PD) != 0 &&
                       (to_pd(pd) == nullptr || pd->context != mr->context))) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_CMD;
    }
    ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) != 0 ? pd : mr->pd;
    const bool translate = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
    void* new_addr = translate ? addr : mr->addr;
    const std::size_t new_length = translate ? length : mr->length;
    const uint64_t new_iova = translate ? reinterpret_cast<uintptr_t>(addr) : m->iova;
    uint32_t rights = m->access;  // mr_access bits are libibverbs' own
    if ((flags & IBV_REREG_MR_CHANGE_ACCESS) != 0) {
        if (const int error = translate_access(static_cast<unsigned>(access), rights); error != 0) {
            errno = error;
            return IBV_REREG_MR_ERR_CMD;
        }
    }
    if (new_length > old_pd->context->hello.lim.max_mr_size) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_CMD;
    }
    // The new range's pages on a memfd first (pages shared by both ranges are counted twice
    // for a moment); jakirod then swaps the registration under the same keys, so a peer that
    // holds the rkey keeps using it (as an RNIC that modifies its memory key in place).
    memory_backing& backing = memory_backing::process();
    backing_span span;
    if (const int error =
            backing.acquire(new_addr, new_length, (rights & proto::mr_access_writes) != 0, span);
        error != 0) {
        errno = error;
        return IBV_REREG_MR_ERR_CMD;
    }
    auto req = proto::make_message<proto::rereg_mr_request>(
        static_cast<uint16_t>(proto::opcode::rereg_mr), 0);
    req.mr_handle = mr->handle;
    req.pd_handle = new_pd->handle;
    req.access = rights;
    req.addr = reinterpret_cast<uintptr_t>(new_addr);
    req.length = new_length;
    req.iova = new_iova;
    req.fd_offset = span.fd_offset;
    req.page_offset = span.page_offset;
    proto::reg_mr_reply reply;
    if (const int error =
            old_pd->context->chan->call(&req, sizeof(req), &reply, sizeof(reply), nullptr, span.fd);
        error != 0) {
        // Still a command error for the caller; the old registration is untouched and usable.
        backing.release(new_addr, new_length);
        errno = error;
        return IBV_REREG_MR_ERR_CMD;
    }
    backing.release(mr->addr, mr->length);
    mr->pd = new_pd;
    mr->addr = new_addr;
    mr->length = new_length;
    mr->lkey = reply.lkey;
    mr->rkey = reply.rkey;
    m->access = rights;
    m->iova = new_iova;
    return 0;
}

void enable_fork_protection() {
    memory_backing::process().set_fork_protection(true);
}

}  // namespace jakiro::verbs_shim
