#pragma once
// Memory windows of a shim context (ibv_alloc_mw, ibv_dealloc_mw, ibv_bind_mw). jakirod
// allocates the window (its handle is its first rkey) and executes every bind and
// invalidation as a work request of the QP that posts it (rnic/queues/memory_window.hh);
// the shim only builds those requests.

#include <infiniband/verbs.h>

#include <cstdint>

namespace jakiro::verbs_shim {

struct shim_context;

constexpr uint32_t mw_magic = 0x4a4b'574d;  // "MWKJ"

struct shim_mw {
    ibv_mw mw;  // first member
    uint32_t magic;
    shim_context* context;
};

shim_mw* to_mw(ibv_mw* mw);

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
// ibv_bind_mw (type 1): posts an IBV_WR_BIND_MW with the window's next consumer key and, once
// posted, gives mw->rkey that key (rxe's provider does the same; a failed bind completes
// with IBV_WC_MW_BIND_ERR and the program puts the old rkey back).
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);

}  // namespace jakiro::verbs_shim
