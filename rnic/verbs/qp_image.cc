// One QP in a state image (resources.hh, save_qp and restore_qp): what the verbs layer holds of
// it. The QP's transport state is read as ibv_query_qp reads it (attributes, state) plus its
// PSNs; the successor builds the QP on the same ring memfd and moves it RESET -> INIT -> RTR ->
// RTS (-> SQD) with those attributes, sending from the oldest unacknowledged PSN. Work requests
// the engine had taken and not yet completed are taken again from the ring (their slots are
// not the shim's until retired): an RC peer answers the repeated PSNs as duplicates, as after
// any retransmission. What lives only inside rc_qp (in-flight READ responses, the atomic
// replay cache, DCQCN's rate) starts afresh; a QP that can write itself into the image
// replaces save_qp's transport half and restore_qp's replay.

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "resources.hh"
#include "rnic/queues/mapped_files.hh"
#include "rnic/queues/qp_ring.hh"

namespace jakiro::verbs {

namespace proto = verbs_proto;

namespace {

// Moves a QP just built (RESET) to where `a` says its predecessor was. 0 or the errno of the
// modify that refused.
int replay_states(roce::rc_qp& qp, ibv_qp_type type, ibv_qp_attr a, uint32_t next_psn,
                  uint32_t una_psn, uint32_t expected_psn) {
    const ibv_qp_state target = a.qp_state;
    if (target == IBV_QPS_RESET) {
        return 0;
    }
    if (target == IBV_QPS_ERR) {
        a.qp_state = IBV_QPS_ERR;
        return qp.modify(a, IBV_QP_STATE);
    }
    a.qp_state = IBV_QPS_INIT;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
               (type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
    if (const int error = qp.modify(a, mask); error != 0 || target == IBV_QPS_INIT) {
        return error;
    }
    a.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if (type != IBV_QPT_UD) {
        a.rq_psn = expected_psn;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    }
    if (type == IBV_QPT_RC) {
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    if (const int error = qp.modify(a, mask); error != 0 || target == IBV_QPS_RTR) {
        return error;
    }
    a.qp_state = IBV_QPS_RTS;
    // RC sends again from the oldest unacknowledged PSN (the WRs behind it are taken again);
    // UC and UD never resend.
    a.sq_psn = type == IBV_QPT_RC ? una_psn : next_psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (type == IBV_QPT_RC) {
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if (const int error = qp.modify(a, mask); error != 0) {
        return error;
    }
    if (target == IBV_QPS_SQD) {
        a.qp_state = IBV_QPS_SQD;
        return qp.modify(a, IBV_QP_STATE);
    }
    // SQE (UC/UD after a send error) resumes in RTS: the error was reported already.
    return 0;
}

}  // namespace

bool vnic_resources::save_qp(handover::image_writer& w, const qp_object& q,
                             const mapped_files& maps, std::vector<int>& opened,
                             std::string& error) const {
    roce::rc_qp& qp = *q.qp;
    w.u32(qp.qpn());
    w.u64(q.owner);
    w.u32(q.pd);
    w.u32(q.send_cq->handle());
    w.u32(q.recv_cq->handle());
    w.u32(q.srq != nullptr ? q.srq->handle() : 0);
    w.u32(q.wqes);
    w.u8(static_cast<uint8_t>(qp.type()));
    ibv_qp_attr attr{};
    ibv_qp_cap cap{};
    bool sig_all = false;
    qp.query(attr, cap, sig_all);
    w.boolean(sig_all);
    const qp_ring& ring = qp.ring();
    for (const uint32_t v : {ring.sq_capacity(), ring.rq_capacity(), ring.send_taken(),
                             ring.send_retired(), ring.recv_taken(), ring.recv_retired()}) {
        w.u32(v);
    }
    uint64_t offset = 0;
    const int fd = maps.open(qp.ring().header(), offset, error);
    if (fd < 0) {
        return false;
    }
    opened.push_back(fd);
    w.fd(fd);
    w.pod(attr);
    w.u32(qp.stats().next_psn.load(std::memory_order_relaxed));
    w.u32(qp.stats().una_psn.load(std::memory_order_relaxed));
    w.u32(qp.stats().expected_psn.load(std::memory_order_relaxed));
    return true;
}

bool vnic_resources::restore_qp(handover::section_reader& r) {
    const uint32_t handle = r.u32();
    const uint64_t owner = r.u64();
    const uint32_t pd = r.u32();
    const uint32_t send_cq = r.u32();
    const uint32_t recv_cq = r.u32();
    const uint32_t srq_handle = r.u32();
    const uint32_t wqes = r.u32();
    const auto type = static_cast<ibv_qp_type>(r.u8());
    const bool sig_all = r.boolean();
    const uint32_t sq_capacity = r.u32();
    const uint32_t rq_capacity = r.u32();
    [[maybe_unused]] const uint32_t sq_taken = r.u32();
    const uint32_t sq_retired = r.u32();
    [[maybe_unused]] const uint32_t rq_taken = r.u32();
    const uint32_t rq_retired = r.u32();
    const int ring_fd = r.fd();
    const auto attr = r.pod<ibv_qp_attr>();
    const uint32_t next_psn = r.u32();
    const uint32_t una_psn = r.u32();
    const uint32_t expected_psn = r.u32();
    struct closer {
        int fd;
        ~closer() {
            if (fd >= 0) {
                close(fd);
            }
        }
    } ring_closer{ring_fd};
    if (!r.ok()) {
        return false;
    }
    const std::string what = "state section 'rdma_faces': QP " + std::to_string(handle);
    const auto scq = _cqs.find(send_cq);
    const auto rcq = _cqs.find(recv_cq);
    const auto srq = srq_handle != 0 ? _srqs.find(srq_handle) : _srqs.end();
    if (_qp_support.engine == nullptr || !_qp_keys.live(handle) || _qps.contains(handle) ||
        owned_pd(owner, pd) == nullptr || scq == _cqs.end() || scq->second->owner() != owner ||
        rcq == _cqs.end() || rcq->second->owner() != owner ||
        (srq_handle != 0 && (srq == _srqs.end() || srq->second->owner() != owner)) ||
        (type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD)) {
        r.fail(what + " names objects this vNIC does not have");
        return false;
    }
    std::unique_ptr<qp_ring> ring;
    if (qp_ring::attach(ring_fd, sq_capacity, rq_capacity, ring) != 0) {
        r.fail(what + " does not fit its ring");
        return false;
    }
    // Taken and not retired: taken again (see the top of this file).
    if (!ring->resume(sq_retired, sq_retired, rq_retired, rq_retired)) {
        ring->leave_pages_to_successor();  // the tenant's ring: a failure never punches it
        r.fail(what + ": its ring indices cannot be its ring's");
        return false;
    }
    account_charge mapping;
    if (!charge(_account, host_resource::mappings, 1, mapping)) {
        ring->leave_pages_to_successor();
        r.fail(what + ": the host reserve refuses its ring");
        return false;
    }
    ring->hold(std::move(mapping));

    roce::rc_qp_setup setup;
    setup.local = _qp_support.local;
    setup.qpn = handle;
    setup.pd = pd;
    setup.owner = owner;
    setup.send_cq = scq->second;
    setup.recv_cq = rcq->second;
    setup.ring = std::move(ring);
    setup.mrs = _mrs;
    setup.sq_sig_all = sig_all;
    // As create_qp: what a WQE slot holds, whatever was asked.
    setup.max_send_sge = proto::wqe_max_sge;
    setup.max_recv_sge = proto::wqe_max_sge;
    setup.max_inline = proto::wqe_max_inline;
    setup.limits = _qp_support.limits;
    setup.events = _qp_support.events;
    setup.srq = srq_handle != 0 ? srq->second : nullptr;
    setup.type = type;
    auto qp = std::make_shared<roce::rc_qp>(std::move(setup));
    if (const int error = replay_states(*qp, type, attr, next_psn, una_psn, expected_psn);
        error != 0) {
        qp->ring().leave_pages_to_successor();
        r.fail(what + ": its attributes are refused (" + std::strerror(error) + ")");
        return false;
    }
    roce::engine* engine = _qp_support.engine;
    if (engine->call([engine, qp] {
            engine->add_qp(qp);
            return 0;
        }) != 0) {
        qp->ring().leave_pages_to_successor();
        r.fail(what + ": the engine did not take it");
        return false;
    }
    _qps.emplace(handle, qp_object{owner, pd, qp, scq->second, rcq->second,
                                   srq_handle != 0 ? srq->second : nullptr, wqes});
    return true;
}

}  // namespace jakiro::verbs
