#include "verbs_shim/memory_window.hh"

#include <cerrno>
#include <cstdlib>
#include <type_traits>

#include "verbs_abi/protocol.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/pd.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

static_assert(std::is_standard_layout_v<shim_mw> && offsetof(shim_mw, mw) == 0);
static_assert(uint32_t{proto::access_mw_bind} == uint32_t{IBV_ACCESS_MW_BIND});
static_assert(uint32_t{proto::access_zero_based} == uint32_t{IBV_ACCESS_ZERO_BASED});

shim_mw* to_mw(ibv_mw* mw) {
    auto* w = reinterpret_cast<shim_mw*>(mw);
    return w != nullptr && w->magic == mw_magic ? w : nullptr;
}

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
    shim_pd* p = to_pd(pd);
    if (p == nullptr || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) {
        errno = EINVAL;
        return nullptr;
    }
    auto* w = static_cast<shim_mw*>(std::calloc(1, sizeof(shim_mw)));
    if (w == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    auto req = proto::make_message<proto::alloc_mw_request>(
        static_cast<uint16_t>(proto::opcode::alloc_mw), 0);
    req.pd_handle = pd->handle;
    req.type = static_cast<uint32_t>(type);
    proto::alloc_mw_reply reply;
    if (const int error = p->context->chan->call(&req, sizeof(req), &reply, sizeof(reply));
        error != 0) {
        std::free(w);
        errno = error;
        return nullptr;
    }
    w->mw.context = pd->context;
    w->mw.pd = pd;
    w->mw.rkey = reply.mw_handle;
    w->mw.handle = reply.mw_handle;
    w->mw.type = type;
    w->magic = mw_magic;
    w->context = p->context;
    return &w->mw;
}

int dealloc_mw(ibv_mw* mw) {
    shim_mw* w = to_mw(mw);
    if (w == nullptr) {
        return EINVAL;
    }
    if (const int error = destroy_object(w->context, proto::opcode::dealloc_mw, mw->handle);
        error != 0) {
        return error;
    }
    w->magic = 0;
    std::free(w);
    return 0;
}

int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
    if (to_mw(mw) == nullptr || qp == nullptr || mw_bind == nullptr || mw->type != IBV_MW_TYPE_1) {
        return EINVAL;
    }
    ibv_send_wr wr{};
    wr.wr_id = mw_bind->wr_id;
    wr.send_flags = mw_bind->send_flags;
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = mw_bind->bind_info;
    ibv_send_wr* bad = nullptr;
    if (const int error = qp->context->ops.post_send(qp, &wr, &bad); error != 0) {
        return error;
    }
    mw->rkey = wr.bind_mw.rkey;
    return 0;
}

}  // namespace jakiro::verbs_shim
