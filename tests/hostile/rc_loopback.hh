// The set-up the libibverbs neighbours (doorbell_storm, silent_wqe_flood) share: their own
// vNIC's device, a PD, one registered region, and RC QPs connected in pairs to each other over
// the intra-host path, so that no packet leaves the host.
#pragma once

#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

namespace jakiro::hostile {

// Prints "<program>: <step>: <strerror(error)>" and exits 1. Each program defines it, so that
// its set-up failures carry its own name.
[[noreturn]] void fail(const char* step, int error);

// What every QP of the neighbour is made from.
struct rc_loopback {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    void* memory = nullptr;
    std::size_t memory_bytes = 0;
    ibv_mr* mr = nullptr;
    ibv_gid gid{};
    ibv_port_attr port{};
};

// The device named `name`, or the first one that opens when `name` is empty.
inline ibv_context* open_device(const std::string& name) {
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (list == nullptr || count == 0) {
        fail("ibv_get_device_list", errno != 0 ? errno : ENODEV);
    }
    ibv_context* ctx = nullptr;
    for (int i = 0; i < count && ctx == nullptr; ++i) {
        if (name.empty() || name == ibv_get_device_name(list[i])) {
            ctx = ibv_open_device(list[i]);
        }
    }
    ibv_free_device_list(list);
    if (ctx == nullptr) {
        fail("ibv_open_device", ENODEV);
    }
    return ctx;
}

// The device, a PD and a `bytes`-long anonymous region registered with `mr_access`, and the
// GID and port attributes every QP is connected with.
inline rc_loopback open_loopback(const std::string& device, std::size_t bytes, int mr_access) {
    rc_loopback l;
    l.ctx = open_device(device);
    l.pd = ibv_alloc_pd(l.ctx);
    if (l.pd == nullptr) {
        fail("ibv_alloc_pd", errno);
    }
    l.memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (l.memory == MAP_FAILED) {
        fail("mmap", errno);
    }
    l.memory_bytes = bytes;
    l.mr = ibv_reg_mr(l.pd, l.memory, bytes, mr_access);
    if (l.mr == nullptr) {
        fail("ibv_reg_mr", errno);
    }
    if (int e = ibv_query_gid(l.ctx, 1, 0, &l.gid); e != 0) {
        fail("ibv_query_gid", e);
    }
    if (int e = ibv_query_port(l.ctx, 1, &l.port); e != 0) {
        fail("ibv_query_port", e);
    }
    return l;
}

// An RC QP with `cq` for both queues, `send_depth` send slots and one receive slot.
inline ibv_qp* create_rc_qp(const rc_loopback& l, ibv_cq* cq, uint32_t send_depth) {
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = send_depth;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(l.pd, &init);
    if (qp == nullptr) {
        fail("ibv_create_qp", errno);
    }
    return qp;
}

// INIT, RTR and RTS towards `peer_qpn` on this host, granting the peer `access`.
inline void to_rts(const rc_loopback& l, ibv_qp* qp, uint32_t peer_qpn, int access) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = static_cast<unsigned>(access);
    if (int e = ibv_modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        e != 0) {
        fail("ibv_modify_qp INIT", e);
    }
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = l.port.active_mtu;
    a.dest_qp_num = peer_qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.dgid = l.gid;
    a.ah_attr.grh.hop_limit = 64;
    if (int e = ibv_modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        e != 0) {
        fail("ibv_modify_qp RTR", e);
    }
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (int e = ibv_modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
        e != 0) {
        fail("ibv_modify_qp RTS", e);
    }
}

// `a` and `b` connected to each other, each granting the other `access`.
inline void connect_pair(const rc_loopback& l, ibv_qp* a, ibv_qp* b, int access) {
    to_rts(l, a, b->qp_num, access);
    to_rts(l, b, a->qp_num, access);
}

}  // namespace jakiro::hostile
