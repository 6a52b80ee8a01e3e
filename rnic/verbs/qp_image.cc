// One QP in a state image (resources.hh, save_qp and restore_qp): what the verbs layer holds
// of it (owner, PD, CQs, SRQ, its ring's memfd and capacities), then the QP's own record
// (queue_pair::save: attributes, PSNs, the WQEs it had taken, the responder's message in progress,
// the atomic replay cache, DCQCN; rnic/qp_handover.cc). The successor attaches the same ring
// and queue_pair::restore goes on where its predecessor stopped, as after a burst of loss.

#include <unistd.h>

#include <string>

#include "rnic/queues/mapped_files.hh"
#include "rnic/queues/qp_ring.hh"
#include "rnic/verbs/resources.hh"

namespace jakiro::verbs {

namespace proto = verbs_proto;

bool vnic_resources::save_qp(handover::image_writer& w, const qp_object& q,
                             const mapped_files& maps, std::vector<int>& opened,
                             std::string& error) const {
    rnic::queue_pair& qp = *q.qp;
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
    qp.query(attr, cap, sig_all);  // sq_sig_all: the setup's, not the record's
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
    qp.save(w);
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
    // The QP's record sets the indices it had taken; retired ones are checked here first.
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

    rnic::queue_pair_setup setup;
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
    // On failure restore leaves the ring's pages alone and says why through `r`.
    std::shared_ptr<rnic::queue_pair> qp = rnic::queue_pair::restore(std::move(setup), r);
    if (qp == nullptr) {
        return false;
    }
    rnic::engine* engine = _qp_support.engine;
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
