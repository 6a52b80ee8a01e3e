// The IB CM messages (IBTA vol. 1 ch. 12) off the wire, as the kernel's cm.c + cma.c handle
// them: REQ/REP/RTU/REJ/MRA/DREQ/DREP for connections, SIDR_REQ/SIDR_REP for UD. Every one is
// hostile until matched by communication ID and the address it came from.
#include "rnic/rdmacm/cm_agent.hh"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>

#include "rnic/rdmacm/agent_support.hh"
#include "verbs_abi/cm_protocol.hh"

namespace jakiro::rdmacm {

using namespace detail;

// ---- MADs ----------------------------------------------------------------------------------

void cm_agent::on_mad(const gid& src, std::span<const uint8_t> mad) {
    ++_stats.mads_received;
    const auto m = decode(mad);
    if (!m) {
        ++_stats.mads_dropped;
        return;
    }
    std::visit(
        [&](const auto& body) {
            using T = std::decay_t<decltype(body)>;
            if constexpr (std::is_same_v<T, cm_req>) {
                on_req(src, m->transaction_id, body);
            } else if constexpr (std::is_same_v<T, cm_rep>) {
                on_rep(src, body);
            } else if constexpr (std::is_same_v<T, cm_rtu>) {
                on_rtu(src, body);
            } else if constexpr (std::is_same_v<T, cm_rej>) {
                on_rej(src, body);
            } else if constexpr (std::is_same_v<T, cm_mra>) {
                on_mra(src, body);
            } else if constexpr (std::is_same_v<T, cm_dreq>) {
                on_dreq(src, m->transaction_id, body);
            } else if constexpr (std::is_same_v<T, cm_drep>) {
                on_drep(src, body);
            } else if constexpr (std::is_same_v<T, cm_sidr_req>) {
                on_sidr_req(src, m->transaction_id, body);
            } else if constexpr (std::is_same_v<T, cm_sidr_rep>) {
                on_sidr_rep(src, body);
            }
        },
        m->body);
}

void cm_agent::on_req(const gid& src, uint64_t tid, const cm_req& m, bool may_hold) {
    // A retransmission of a REQ we already hold: answer as we did (MRA while the application
    // decides, the REP again once it accepted).
    for (auto& [h, id] : _ids) {
        if (id.remote_comm_id == m.local_comm_id && id.dst_ip == src && id.listener != 0) {
            if (id.st == state::req_rcvd) {
                cm_mra mra{id.local_comm_id, id.remote_comm_id, message_kind::req, 20};
                send(src, cm_message{tid, mra});
            } else if (id.st == state::rep_sent && id.outstanding) {
                ++_stats.mads_sent;
                _send(src, *id.outstanding);
            }
            return;
        }
    }
    const auto ip = read_cma_header(m.private_data);
    if (m.transport == cm_transport::rd) {
        ++_stats.mads_dropped;
        return;
    }
    if (!addressed_to_us(m.service_id, ip, src)) {
        return;
    }
    // The security groups first: a refused peer neither waits for a listener (taking a held
    // slot) nor learns whether one is there.
    if (_admit && _admit(src) != 0) {
        ++_stats.rejected_by_policy;
        send_rej(src, tid, 0, m.local_comm_id, message_kind::req, rej_reason::consumer_defined);
        return;
    }
    cm_id* listener = find_listener(port_space_of(m.service_id), port_of(m.service_id), ip->dst_ip);
    if (listener == nullptr && may_hold && hold(src, tid, m)) {
        return;  // answered when a listener comes, or with the REJ below once the hold ends
    }
    if (listener == nullptr || listener->qp_type == IBV_QPT_UD) {
        ++_stats.rejected_no_listener;
        send_rej(src, tid, 0, m.local_comm_id, message_kind::req, rej_reason::invalid_service_id);
        return;
    }
    if (!backlog_has_room(*listener)) {
        return;  // the peer retries, as a full TCP backlog makes it do
    }
    const uint32_t listener_handle = listener->handle;
    cm_id* child = new_id(listener->client, listener->ps, listener->qp_type);
    if (child == nullptr) {
        ++_stats.ids_refused;
        send_rej(src, tid, 0, m.local_comm_id, message_kind::req, rej_reason::no_qp);
        return;
    }
    listener = &_ids.at(listener_handle);  // new_id may have rehashed
    child->listener = listener_handle;
    child->bound = true;
    child->src_ip = ip->dst_ip;
    child->inet6 = !is_ipv4_gid(src);
    child->src_port = listener->src_port;
    child->dst_ip = src;
    child->dst_port = ip->src_port;
    child->have_route = true;
    child->local_comm_id = new_comm_id();
    _by_comm_id[child->local_comm_id] = child->handle;
    child->remote_comm_id = m.local_comm_id;
    child->transaction_id = tid;
    child->remote_qpn = m.local_qpn;
    child->rq_psn = m.starting_psn;
    child->sq_psn = m.starting_psn;  // as the kernel's rdma_cm: one PSN both ways
    child->responder_resources = m.initiator_depth;
    child->initiator_depth = m.responder_resources;
    child->retry_count = m.retry_count;
    child->rnr_retry_count = m.rnr_retry_count;
    child->srq = m.srq;
    child->path_mtu =
        std::min<uint8_t>(m.path_mtu != 0 ? m.path_mtu : _self.path_mtu, _self.path_mtu);
    child->tos = m.primary_traffic_class;
    child->ack_timeout =
        m.primary_local_ack_timeout != 0 ? m.primary_local_ack_timeout : default_ack_timeout;
    child->st = state::req_rcvd;
    event_params p;
    p.private_data = m.private_data.data() + cma_header_bytes;
    p.private_len = req_user_private;
    p.qp_num = m.local_qpn;
    p.responder_resources = m.initiator_depth;
    p.initiator_depth = m.responder_resources;
    p.retry_count = m.retry_count;
    p.rnr_retry_count = m.rnr_retry_count;
    p.srq = m.srq;
    raise(*child, ev_connect_request, 0, &p, listener_handle, listener->uid, child->handle);
}

void cm_agent::on_rep(const gid& src, const cm_rep& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src);
    if (id == nullptr) {
        ++_stats.mads_dropped;
        return;
    }
    if (id->st == state::established && id->remote_comm_id == m.local_comm_id) {
        // Our RTU was lost: say it again.
        send(src, cm_message{id->transaction_id, cm_rtu{id->local_comm_id, id->remote_comm_id}});
        return;
    }
    if (id->st != state::req_sent) {
        ++_stats.mads_dropped;
        return;
    }
    settle(*id);
    id->remote_comm_id = m.local_comm_id;
    id->remote_qpn = m.local_qpn;
    id->rq_psn = m.starting_psn;
    id->st = state::rep_rcvd;
    event_params p;
    p.private_data = m.private_data.data();
    p.private_len = rep_private_bytes;
    p.qp_num = m.local_qpn;
    p.responder_resources = m.responder_resources;
    p.initiator_depth = m.initiator_depth;
    p.rnr_retry_count = m.rnr_retry_count;
    p.srq = m.srq;
    // The REP's resources are the peer's view: our RTR/RTS use the smaller of both sides'.
    id->initiator_depth = std::min(id->initiator_depth, m.responder_resources);
    id->responder_resources = std::min(id->responder_resources, m.initiator_depth);
    raise(*id, ev_connect_response, 0, &p);
}

void cm_agent::on_rtu(const gid& src, const cm_rtu& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src);
    if (id == nullptr || id->st != state::rep_sent || id->remote_comm_id != m.local_comm_id) {
        ++_stats.mads_dropped;
        return;
    }
    settle(*id);
    id->st = state::established;
    raise(*id, ev_established, 0);
}

void cm_agent::on_rej(const gid& src, const cm_rej& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src);
    if (id == nullptr) {
        ++_stats.mads_dropped;
        return;
    }
    if (id->st != state::req_sent && id->st != state::rep_sent && id->st != state::rep_rcvd) {
        ++_stats.mads_dropped;
        return;
    }
    settle(*id);
    id->st = state::disconnected;
    event_params p;
    p.private_data = m.private_data.data();
    p.private_len = rej_private_bytes;
    raise(*id, ev_rejected, m.reason, &p);
}

void cm_agent::on_mra(const gid& src, const cm_mra& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src);
    if (id == nullptr || !id->outstanding) {
        ++_stats.mads_dropped;
        return;
    }
    // The peer needs service_timeout more: wait that long (capped) before resending.
    const auto extra =
        std::chrono::microseconds(4096ull << std::min<uint8_t>(m.service_timeout, 24)) / 1000;
    id->deadline =
        clock::now() + resend_interval + std::min<clock::duration>(extra, std::chrono::seconds(60));
}

void cm_agent::on_dreq(const gid& src, uint64_t tid, const cm_dreq& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src);
    if (id == nullptr || id->remote_comm_id != m.local_comm_id) {
        // Not (or no longer) ours: a DREP costs nothing and ends the peer's retries.
        send(src, cm_message{tid, cm_drep{m.remote_comm_id, m.local_comm_id}});
        return;
    }
    id->transaction_id = tid;
    switch (id->st) {
        case state::established:
        case state::rep_sent:
        case state::rep_rcvd:
            settle(*id);
            id->st = state::dreq_rcvd;
            raise(*id, ev_disconnected, 0);
            break;
        case state::dreq_sent:  // both sides disconnected at once
            send(src, cm_message{tid, cm_drep{id->local_comm_id, id->remote_comm_id}});
            break;
        default:
            send(src, cm_message{tid, cm_drep{id->local_comm_id, id->remote_comm_id}});
            break;
    }
}

void cm_agent::on_drep(const gid& src, const cm_drep& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src);
    if (id == nullptr || id->st != state::dreq_sent) {
        ++_stats.mads_dropped;
        return;
    }
    settle(*id);
    id->st = state::disconnected;
    if (id->client == 0) {
        erase_id(id->handle);  // an orphan's work is done
        return;
    }
    raise(*id, ev_disconnected, 0);
}

void cm_agent::on_sidr_req(const gid& src, uint64_t tid, const cm_sidr_req& m) {
    for (auto& [h, id] : _ids) {
        if (id.remote_comm_id == m.request_id && id.dst_ip == src && id.listener != 0 &&
            (id.st == state::sidr_req_rcvd || id.st == state::sidr_done)) {
            // A retransmission: the application is still deciding (the requester retries),
            // or our SIDR_REP was lost: send it again.
            if (id.sidr_reply) {
                ++_stats.retransmissions;
                ++_stats.mads_sent;
                _send(src, *id.sidr_reply);
            }
            return;
        }
    }
    const auto ip = read_cma_header(m.private_data);
    auto refuse = [&](sidr_status s) {
        cm_sidr_rep r;
        r.request_id = m.request_id;
        r.status = s;
        r.service_id = m.service_id;
        send(src, cm_message{tid, r});
    };
    if (!addressed_to_us(m.service_id, ip, src)) {
        return;
    }
    if (_admit && _admit(src) != 0) {
        ++_stats.rejected_by_policy;
        refuse(sidr_status::rejected);
        return;
    }
    cm_id* listener = find_listener(port_space_of(m.service_id), port_of(m.service_id), ip->dst_ip);
    if (listener == nullptr || listener->qp_type != IBV_QPT_UD) {
        ++_stats.rejected_no_listener;
        refuse(sidr_status::no_service);
        return;
    }
    // Each SIDR_REQ an application has not answered holds an id: bounded like REQs, so no
    // peer fills the vNIC's ids with requests (the sender retries, as for a full backlog).
    if (!backlog_has_room(*listener)) {
        return;
    }
    const uint32_t listener_handle = listener->handle;
    cm_id* child = new_id(listener->client, listener->ps, listener->qp_type);
    if (child == nullptr) {
        ++_stats.ids_refused;
        refuse(sidr_status::no_qp);
        return;
    }
    listener = &_ids.at(listener_handle);
    child->listener = listener_handle;
    child->bound = true;
    child->src_ip = ip->dst_ip;
    child->inet6 = !is_ipv4_gid(src);
    child->src_port = listener->src_port;
    child->dst_ip = src;
    child->dst_port = ip->src_port;
    child->have_route = true;
    child->remote_comm_id = m.request_id;
    child->transaction_id = tid;
    child->st = state::sidr_req_rcvd;
    event_params p;
    p.ud = true;
    p.private_data = m.private_data.data() + cma_header_bytes;
    p.private_len = sidr_user_private;
    p.ah_ip = src;
    raise(*child, ev_connect_request, 0, &p, listener_handle, listener->uid, child->handle);
}

void cm_agent::on_sidr_rep(const gid& src, const cm_sidr_rep& m) {
    cm_id* id = by_comm_id(m.request_id, src);
    if (id == nullptr || id->st != state::sidr_req_sent) {
        ++_stats.mads_dropped;
        return;
    }
    settle(*id);
    if (m.status != sidr_status::valid) {
        id->st = state::disconnected;
        raise(*id, ev_unreachable, static_cast<int32_t>(m.status));
        return;
    }
    id->st = state::sidr_done;
    id->remote_qpn = m.qpn;
    id->remote_qkey = m.qkey;
    event_params p;
    p.ud = true;
    p.private_data = m.private_data.data();
    p.private_len = sidr_rep_private_bytes;
    p.qp_num = m.qpn;
    p.qkey = m.qkey;
    p.ah_ip = src;
    raise(*id, ev_established, 0, &p);
}

// ---- REQs waiting for their listener -----------------------------------------------------

bool cm_agent::hold(const gid& src, uint64_t tid, const cm_req& m) {
    std::map<gid, std::size_t> per_peer;
    for (held_req& h : _held) {
        if (h.src == src && h.req.local_comm_id == m.local_comm_id) {
            h.tid = tid;  // a retransmission: answered under its latest transaction id
            return true;
        }
        ++per_peer[h.src];
    }
    if (_held.size() >= _limits.max_held_reqs) {
        // Taken: the peer holding the most (the oldest of its REQs) makes room for a peer
        // holding fewer; a newcomer that already holds as many as anyone is refused itself.
        const auto heaviest =
            std::max_element(per_peer.begin(), per_peer.end(),
                             [](const auto& x, const auto& y) { return x.second < y.second; });
        const std::size_t mine = per_peer.count(src) != 0 ? per_peer[src] : 0;
        ++_stats.held_reqs_refused;
        if (heaviest == per_peer.end() || heaviest->second <= mine) {
            return false;
        }
        const auto oldest = std::find_if(_held.begin(), _held.end(), [&](const held_req& h) {
            return h.src == heaviest->first;
        });
        ++_stats.rejected_no_listener;
        send_rej(oldest->src, oldest->tid, 0, oldest->req.local_comm_id, message_kind::req,
                 rej_reason::invalid_service_id);
        _held.erase(oldest);
    }
    _held.push_back({src, tid, m, clock::now() + hold_for_listener});
    return true;
}

std::size_t cm_agent::waiting_requests(uint32_t listener) const {
    std::size_t n = 0;
    for (const auto& [h, id] : _ids) {
        n += id.listener != 0 && (listener == 0 || id.listener == listener) &&
             (id.st == state::req_rcvd || id.st == state::sidr_req_rcvd);
    }
    return n;
}

bool cm_agent::backlog_has_room(const cm_id& listener) {
    if (waiting_requests(listener.handle) >= static_cast<std::size_t>(listener.backlog) ||
        waiting_requests() >= _limits.max_backlog) {
        ++_stats.mads_dropped;
        ++_stats.requests_over_backlog;
        return false;
    }
    return true;
}

void cm_agent::take_held(uint16_t ps, uint16_t port) {
    std::vector<held_req> taken;
    std::erase_if(_held, [&](const held_req& h) {
        const bool match =
            port_space_of(h.req.service_id) == ps && port_of(h.req.service_id) == port;
        if (match) {
            taken.push_back(h);
        }
        return match;
    });
    for (const held_req& h : taken) {
        on_req(h.src, h.tid, h.req, false);
    }
}

}  // namespace jakiro::rdmacm
