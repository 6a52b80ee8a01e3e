#pragma once
// Protection domains and memory regions of a shim context. A PD or MR embeds the public
// object the application holds and is reached back through a typed accessor (rdma-core's
// to_mpd()/to_mmr() pattern); a magic number tells our objects from anything else.
//
// jakirod owns the truth: it allocates the handles and keys, refuses to free a PD that MRs
// still use (EBUSY), and releases everything when the context's connection closes.

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "verbs_shim/memory_backing.hh"

namespace jakiro::verbs_shim {

struct shim_context;

constexpr uint32_t pd_magic = 0x4a4b'5044;  // "DPKJ"
constexpr uint32_t mr_magic = 0x4a4b'4d52;  // "RMKJ"

struct shim_pd {
    ibv_pd pd;  // first member
    uint32_t magic;
    shim_context* context;
    // A parent domain (parent_domain.hh) is a shim_pd too, with pd.handle its protection
    // domain's, so every verb that names a PD takes it unchanged: `protection` is that PD
    // (nullptr for a PD), `td` its thread domain or nullptr.
    shim_pd* protection;
    struct shim_td* td;
    // Parent domains built on this PD, guarded by the context's mutex: dealloc is EBUSY
    // meanwhile, as libibverbs providers count them.
    uint32_t parents;
};

struct shim_mr {
    ibv_mr mr;  // first member
    uint32_t magic;
    uint32_t access;  // verbs_proto::mr_access granted
    uint64_t iova;
};

shim_pd* to_pd(ibv_pd* pd);
shim_mr* to_mr(ibv_mr* mr);

ibv_pd* alloc_pd(ibv_context* context);
int dealloc_pd(ibv_pd* pd);

// Every ibv_reg_mr variant lands here (iova = addr for plain ibv_reg_mr).
ibv_mr* reg_mr(ibv_pd* pd, void* addr, std::size_t length, uint64_t iova, unsigned access);
int dereg_mr(ibv_mr* mr);
// ibv_rereg_mr: translation, PD and access change as `flags` say (any combination), the rest
// stays; jakirod swaps the registration under the same lkey/rkey, so peers keep their rkey.
// 0 or an IBV_REREG_MR_ERR_* code with errno set, as libibverbs sorts them (ERR_INPUT: what
// libibverbs checks; ERR_CMD: what the device refuses); on any error the old registration is
// left as it was.
int rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, std::size_t length, int access);

// ibv_fork_init(): from now on registered pages are MADV_DONTFORK.
void enable_fork_protection();

}  // namespace jakiro::verbs_shim
