// vnic_resources: the queue-pair verbs. Validation and ownership happen here, on the vNIC's
// endpoint thread; the QP itself lives on the engine's thread, reached through engine::call.

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rnic/queues/qp_ring.hh"
#include "rnic/verbs/resources.hh"
#include "verbs_abi/qp_attr_wire.hh"

namespace jakiro::verbs {

namespace proto = verbs_proto;

void vnic_resources::enable_qps(qp_support support) {
    const std::lock_guard lock(_mutex);
    _qp_support = std::move(support);
    if (_qp_support.engine == nullptr || _doorbell != nullptr) {
        return;
    }
    _doorbell = rnic::doorbell_memory::create();
    if (_doorbell != nullptr) {
        rnic::engine* engine = _qp_support.engine;
        const uint16_t slot = _qp_support.local.vnic;
        verbs_proto::doorbell_page* page = &_doorbell->page();
        if (engine->call([engine, slot, page] {
                engine->set_vnic_doorbell(slot, page);
                return 0;
            }) != 0) {
            _doorbell.reset();  // the worker never saw it: QPs then fail to create (ENOMEM)
        }
    }
}

void vnic_resources::disable_doorbell() {
    if (_doorbell == nullptr || _qp_support.engine == nullptr) {
        return;
    }
    rnic::engine* engine = _qp_support.engine;
    const uint16_t slot = _qp_support.local.vnic;
    // A worker that does not answer may still wait on the page until it runs the call (queued,
    // never cancelled): the call holds the page, which goes when the call has run.
    std::shared_ptr<rnic::doorbell_memory> page(std::move(_doorbell));
    engine->call(
        [engine, slot, page] {
            engine->forget_vnic(slot);
            return 0;
        },
        rnic::engine::on_timeout::run_later);
}

int vnic_resources::create_qp(uint64_t client, const proto::create_qp_request& req,
                              qp_created& out) {
    const std::lock_guard lock(_mutex);
    if (_qp_support.engine == nullptr) {
        return EOPNOTSUPP;
    }
    if (req.flags != 0 || req.reserved0 != 0 || req.reserved1 != 0) {
        return EINVAL;
    }
    if (req.qp_type != proto::qpt_rc && req.qp_type != proto::qpt_uc &&
        req.qp_type != proto::qpt_ud) {
        return EOPNOTSUPP;  // XRC, raw packet: not built
    }
    // A QP on an SRQ takes its receives from there: the SRQ must be the client's too.
    std::shared_ptr<shared_receive_queue> srq;
    if (req.srq != 0) {
        const auto it = _srqs.find(req.srq);
        if (it == _srqs.end() || it->second->owner() != client) {
            return EINVAL;
        }
        srq = it->second;
    }
    pd_object* pd = owned_pd(client, req.pd_handle);
    const auto send_cq = _cqs.find(req.send_cq);
    const auto recv_cq = _cqs.find(req.recv_cq);
    if (pd == nullptr || send_cq == _cqs.end() || send_cq->second->owner() != client ||
        recv_cq == _cqs.end() || recv_cq->second->owner() != client) {
        return EINVAL;
    }
    if (req.max_send_wr > _limits.max_qp_wr || req.max_recv_wr > _limits.max_qp_wr ||
        req.max_send_sge > _limits.max_sge || req.max_recv_sge > _limits.max_sge ||
        req.max_inline_data > proto::wqe_max_inline) {
        return EINVAL;
    }
    const uint32_t sq = ring_capacity_for(req.max_send_wr == 0 ? 1 : req.max_send_wr);
    // On an SRQ, max_recv_wr is ignored (ibv_create_qp) and the own RQ is one unused slot.
    const uint32_t rq =
        srq != nullptr ? 1 : ring_capacity_for(req.max_recv_wr == 0 ? 1 : req.max_recv_wr);
    if (_qps.size() >= _quota.max_qps ||
        uint64_t{sq} + rq > _quota.max_wqes - std::min(_wqes, _quota.max_wqes)) {
        return over_quota();  // the vNIC's quota (rdma.max_qps, rdma.max_wqes)
    }
    account_charge mapping;
    if (!charge(_account, host_resource::mappings, 1, mapping)) {
        return ENOMEM;  // over its share of a full host (host_reserve.hh)
    }
    const uint32_t handle = _qp_keys.allocate();
    if (handle == 0) {
        return ENOMEM;
    }
    std::unique_ptr<qp_ring> ring;
    int ring_fd = -1;
    if (const int error = qp_ring::create(sq, rq, handle, ring, ring_fd); error != 0) {
        _qp_keys.release(handle);
        return error;
    }
    ring->hold(std::move(mapping));
    const int doorbell = _doorbell != nullptr ? dup(_doorbell->fd()) : -1;
    if (doorbell < 0) {
        const int error = _doorbell != nullptr ? errno : ENOMEM;
        close(ring_fd);
        _qp_keys.release(handle);
        return error;
    }
    out.handle = handle;
    out.sq_capacity = sq;
    out.rq_capacity = rq;
    // What the QP really holds: a WQE slot has room for wqe_max_sge SGEs and
    // wqe_max_inline bytes whatever was asked.
    out.max_send_sge = proto::wqe_max_sge;
    out.max_recv_sge = proto::wqe_max_sge;
    out.max_inline = proto::wqe_max_inline;
    out.ring_bytes = ring->bytes();
    out.ring_fd = ring_fd;
    out.doorbell_fd = doorbell;

    rnic::queue_pair_setup setup;
    setup.local = _qp_support.local;
    setup.qpn = handle;
    setup.pd = req.pd_handle;
    setup.owner = client;
    setup.send_cq = send_cq->second;
    setup.recv_cq = recv_cq->second;
    setup.ring = std::move(ring);
    setup.mrs = _mrs;
    setup.sq_sig_all = req.sq_sig_all != 0;
    setup.max_send_sge = out.max_send_sge;
    setup.max_recv_sge = out.max_recv_sge;
    setup.max_inline = out.max_inline;
    setup.limits = _qp_support.limits;
    setup.events = _qp_support.events;
    setup.srq = srq;
    setup.type = static_cast<ibv_qp_type>(req.qp_type);
    auto qp = std::make_shared<rnic::queue_pair>(std::move(setup));
    rnic::engine* engine = _qp_support.engine;
    if (const int error = engine->call([engine, qp] {
            engine->add_qp(qp);
            return 0;
        });
        error != 0) {
        close(out.ring_fd);
        close(out.doorbell_fd);
        _qp_keys.release(handle);
        return error;
    }
    ++pd->qps;
    ++send_cq->second->users;
    ++recv_cq->second->users;
    if (srq != nullptr) {
        ++srq->users;
    }
    _wqes += sq + rq;
    _qps.emplace(handle, qp_object{client, req.pd_handle, qp, send_cq->second, recv_cq->second, srq,
                                   sq + rq});
    return 0;
}

int vnic_resources::modify_qp(uint64_t client, uint32_t handle, const proto::qp_attr_wire& wire,
                              int mask) {
    std::shared_ptr<rnic::queue_pair> qp;
    std::function<int(uint32_t)> admit;
    std::function<int(const rnic::ipv6_address&)> admit_ipv6;
    rnic::engine* engine = nullptr;
    {
        const std::lock_guard lock(_mutex);
        const auto it = _qps.find(handle);
        if (it == _qps.end() || it->second.owner != client) {
            return EINVAL;
        }
        qp = it->second.qp;
        admit = _qp_support.admit;
        admit_ipv6 = _qp_support.admit_ipv6;
        engine = _qp_support.engine;
    }
    ibv_qp_attr attr{};
    verbs_proto::from_wire(wire, attr);
    // The security groups decide whether this vNIC may talk RDMA to the peer (docs/architecture.md
    // §7) on every modify that sets an address vector, in any state: RTR, but also SQD -> SQD with
    // a new path (else RTR towards an allowed peer, then SQD with a denied one, would connect it).
    // The alternate path is held to the same rule although no path ever migrates (qp_state.cc).
    // Denied: EACCES and the QP unchanged. Afterwards RCFT (the connected QP) is checked per
    // packet, and the engine checks the peer again after every policy change (engine.hh, "Policy
    // changes").
    if (admit) {
        // The GID is the peer's address: IPv4-mapped, or IPv6.
        const auto check = [&](const ibv_ah_attr& ah) {
            const uint8_t* gid = ah.grh.dgid.raw;
            if (!rnic::gid_is_ipv4_mapped(gid)) {
                rnic::ipv6_address remote;
                std::memcpy(remote.data(), gid, remote.size());
                return admit_ipv6 ? admit_ipv6(remote) : ENETUNREACH;
            }
            uint32_t remote_ip_be = 0;
            std::memcpy(&remote_ip_be, gid + 12, 4);
            return admit(remote_ip_be);
        };
        if ((mask & IBV_QP_AV) != 0) {
            if (const int error = check(attr.ah_attr); error != 0) {
                return error;
            }
        }
        if ((mask & IBV_QP_ALT_PATH) != 0) {
            if (const int error = check(attr.alt_ah_attr); error != 0) {
                return error;
            }
        }
    }
    return engine->call([qp, attr, mask] { return qp->modify(attr, mask); });
}

int vnic_resources::query_qp(uint64_t client, uint32_t handle, proto::query_qp_reply& out) {
    std::shared_ptr<rnic::queue_pair> qp;
    rnic::engine* engine = nullptr;
    {
        const std::lock_guard lock(_mutex);
        const auto it = _qps.find(handle);
        if (it == _qps.end() || it->second.owner != client) {
            return EINVAL;
        }
        qp = it->second.qp;
        engine = _qp_support.engine;
    }
    auto attr = std::make_shared<ibv_qp_attr>();
    auto sig_all = std::make_shared<bool>(false);
    const int error = engine->call([qp, attr, sig_all] {
        ibv_qp_cap cap{};
        qp->query(*attr, cap, *sig_all);
        return 0;
    });
    if (error != 0) {
        return error;
    }
    out.attr = verbs_proto::to_wire(*attr);
    out.sq_sig_all = *sig_all ? 1 : 0;
    return 0;
}

void vnic_resources::drop_qp(uint32_t handle, qp_object& q) {
    rnic::engine* engine = _qp_support.engine;
    const uint16_t vnic = q.qp->vnic();
    // The QP must leave the engine even if the worker is late: queued until it runs.
    engine->call(
        [engine, vnic, handle] {
            engine->remove_qp(vnic, handle);
            return 0;
        },
        rnic::engine::on_timeout::run_later);
    if (pd_object* pd = owned_pd(q.owner, q.pd)) {
        --pd->qps;
    }
    --q.send_cq->users;
    --q.recv_cq->users;
    if (q.srq != nullptr) {
        --q.srq->users;
    }
    _wqes -= q.wqes;
    _qp_keys.release(handle);
}

int vnic_resources::destroy_qp(uint64_t client, uint32_t handle) {
    const std::lock_guard lock(_mutex);
    const auto it = _qps.find(handle);
    if (it == _qps.end() || it->second.owner != client) {
        return EINVAL;
    }
    drop_qp(handle, it->second);
    _qps.erase(it);
    return 0;
}

}  // namespace jakiro::verbs
