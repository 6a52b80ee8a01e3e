#include "rnic/rdmacm/cm_agent.hh"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "rnic/rdmacm/agent_support.hh"
#include "verbs_abi/cm_protocol.hh"

namespace jakiro::rdmacm {

using namespace detail;

cm_agent::cm_agent(agent_identity self, mad_sender send, admission admit, agent_limits limits)
    : _self(self), _send(std::move(send)), _admit(std::move(admit)), _limits(limits) {
    std::random_device rd;
    _next_tid = (uint64_t{rd()} << 32) | rd();
    _comm_id_seed = rd();
}

cm_agent::~cm_agent() = default;

bool cm_agent::open_channel(uint64_t client, int event_fd) {
    if (_channels.size() >= _limits.max_channels || _channels.count(client) != 0) {
        return false;
    }
    channel ch;
    ch.client = client;
    ch.event_fd = event_fd;
    _channels.emplace(client, std::move(ch));
    return true;
}

void cm_agent::close_channel(uint64_t client) {
    std::vector<uint32_t> owned;
    for (const auto& [handle, id] : _ids) {
        if (id.client == client) {
            owned.push_back(handle);
        }
    }
    for (const uint32_t h : owned) {
        if (!release(_ids.at(h))) {
            erase_id(h);
        }
    }
    _channels.erase(client);
}

// ---- ids -----------------------------------------------------------------------------------

cm_agent::cm_id* cm_agent::find(uint64_t client, uint32_t handle) {
    const auto it = _ids.find(handle);
    return it != _ids.end() && it->second.client == client ? &it->second : nullptr;
}

cm_agent::cm_id* cm_agent::by_comm_id(uint32_t local_comm_id, const gid& src) {
    const auto it = _by_comm_id.find(local_comm_id);
    if (it == _by_comm_id.end()) {
        return nullptr;
    }
    cm_id& id = _ids.at(it->second);
    return id.dst_ip == src ? &id : nullptr;
}

cm_agent::cm_id* cm_agent::new_id(uint64_t client, uint16_t ps, uint8_t qp_type) {
    if (_ids.size() >= _limits.max_ids) {
        return nullptr;
    }
    while (_next_handle == 0 || _ids.count(_next_handle) != 0) {
        ++_next_handle;
    }
    cm_id id;
    id.handle = _next_handle++;
    id.client = client;
    id.ps = ps;
    id.qp_type = qp_type;
    id.path_mtu = _self.path_mtu;
    return &_ids.emplace(id.handle, id).first->second;
}

void cm_agent::erase_id(uint32_t handle) {
    const auto it = _ids.find(handle);
    if (it == _ids.end()) {
        return;
    }
    if (it->second.local_comm_id != 0) {
        _by_comm_id.erase(it->second.local_comm_id);
    }
    _ids.erase(it);
}

// A listener bound to any address takes both families when bound as AF_INET6, only IPv4 as
// AF_INET (the kernel's dual-stack listener).
cm_agent::cm_id* cm_agent::find_listener(uint16_t ps, uint16_t port, const gid& dst) {
    for (auto& [h, id] : _ids) {
        if (id.st == state::listening && id.ps == ps && id.src_port == port &&
            (id.src_ip == dst || (is_any(id.src_ip) && (id.inet6 || is_ipv4_gid(dst))))) {
            return &id;
        }
    }
    return nullptr;
}

bool cm_agent::port_in_use(uint16_t ps, uint16_t port, const cm_id* except) const {
    for (const auto& [h, id] : _ids) {
        // Ids a listener created share its port, as accepted TCP sockets do.
        if (&id != except && id.bound && id.listener == 0 && id.ps == ps && id.src_port == port) {
            return true;
        }
    }
    return false;
}

uint16_t cm_agent::ephemeral_port(uint16_t ps) {
    // The Linux default ip_local_port_range.
    constexpr uint16_t low = 32768, high = 60999;
    static thread_local std::minstd_rand rng{std::random_device{}()};
    uint16_t port = static_cast<uint16_t>(low + rng() % (high - low + 1));
    for (uint32_t tries = 0; tries <= high - low; ++tries) {
        if (!port_in_use(ps, port, nullptr)) {
            return port;
        }
        port = port == high ? low : static_cast<uint16_t>(port + 1);
    }
    return 0;
}

uint32_t cm_agent::new_comm_id() {
    // Random-looking and never 0 or in use: a peer must not guess them to inject a REJ/DREQ
    // (it also has to come from the connection's peer address).
    for (;;) {
        _comm_id_seed = _comm_id_seed * 1664525u + 1013904223u;
        const uint32_t c = _comm_id_seed ^ 0x5bd1'e995u;
        if (c != 0 && _by_comm_id.count(c) == 0) {
            return c;
        }
    }
}

// ---- wire ----------------------------------------------------------------------------------

void cm_agent::send(const gid& dst, const cm_message& m) {
    ++_stats.mads_sent;
    _send(dst, encode(m));
}

void cm_agent::send_tracked(cm_id& id, const cm_message& m) {
    id.outstanding = encode(m);
    id.retries_left = std::holds_alternative<cm_dreq>(m.body) ? max_dreq_retries : max_cm_retries;
    id.deadline = clock::now() + resend_interval;
    ++_stats.mads_sent;
    _send(id.dst_ip, *id.outstanding);
}

void cm_agent::settle(cm_id& id) {
    id.outstanding.reset();
    id.deadline = clock::time_point::max();
}

void cm_agent::send_rej(const gid& dst, uint64_t tid, uint32_t local_comm_id,
                        uint32_t remote_comm_id, message_kind what, rej_reason reason) {
    cm_rej r;
    r.local_comm_id = local_comm_id;
    r.remote_comm_id = remote_comm_id;
    r.message_rejected = what;
    r.reason = static_cast<uint16_t>(reason);
    send(dst, cm_message{tid, r});
}

bool cm_agent::release(cm_id& id) {
    switch (id.st) {
        case state::established:
        case state::rep_rcvd:
        case state::rep_sent:
            // Destroyed while connected: the DREQ goes on being retransmitted by an orphan
            // (no owner, no events) until the peer's DREP or the retries end, as the kernel's
            // IB CM does after rdma_destroy_id. Otherwise a lost DREQ leaves the peer waiting.
            settle(id);
            id.transaction_id = _next_tid++;
            id.st = state::dreq_sent;
            send_tracked(id,
                         cm_message{id.transaction_id,
                                    cm_dreq{id.local_comm_id, id.remote_comm_id, id.remote_qpn}});
            id.client = 0;
            return true;
        case state::dreq_sent:
            id.client = 0;
            return id.outstanding.has_value();
        case state::dreq_rcvd:
            send(id.dst_ip,
                 cm_message{id.transaction_id, cm_drep{id.local_comm_id, id.remote_comm_id}});
            return false;
        case state::req_rcvd:
            send_rej(id.dst_ip, id.transaction_id, id.local_comm_id, id.remote_comm_id,
                     message_kind::req, rej_reason::consumer_defined);
            return false;
        case state::req_sent:
            send_rej(id.dst_ip, id.transaction_id, id.local_comm_id, 0, message_kind::other,
                     rej_reason::timeout);
            return false;
        case state::sidr_req_rcvd: {
            cm_sidr_rep r;
            r.request_id = id.remote_comm_id;
            r.status = sidr_status::rejected;
            r.service_id = service_id(id.ps, id.src_port);
            id.sidr_reply = encode(cm_message{id.transaction_id, r});  // for a lost one
            ++_stats.mads_sent;
            _send(id.dst_ip, *id.sidr_reply);
            return false;
        }
        default:
            return false;
    }
}

// ---- events --------------------------------------------------------------------------------

void cm_agent::raise(const cm_id& id, uint32_t event, int32_t status, const event_params* p) {
    raise(id, event, status, p, id.handle, id.uid, id.handle);
}

void cm_agent::raise(const cm_id& id, uint32_t event, int32_t status, const event_params* p,
                     uint32_t charged_to, uint64_t uid, uint32_t reported_id) {
    const auto ch = _channels.find(id.client);
    if (ch == _channels.end()) {
        return;
    }
    rdma_ucm_event_resp resp{};
    resp.uid = uid;
    resp.id = reported_id;
    resp.event = event;
    resp.status = static_cast<uint32_t>(status);
    if (p != nullptr) {
        const std::size_t len = std::min<std::size_t>(p->private_len, RDMA_MAX_PRIVATE_DATA);
        if (p->ud) {
            auto& ud = resp.param.ud;
            ud.qp_num = p->qp_num;
            ud.qkey = p->qkey;
            fill_ah(ud.ah_attr, p->ah_ip, id.tos);
            if (len > 0) {
                std::memcpy(ud.private_data, p->private_data, len);
            }
            ud.private_data_len = static_cast<uint8_t>(len);
        } else {
            auto& c = resp.param.conn;
            c.qp_num = p->qp_num;
            if (len > 0) {
                std::memcpy(c.private_data, p->private_data, len);
            }
            c.private_data_len = static_cast<uint8_t>(len);
            c.srq = p->srq;
            c.responder_resources = p->responder_resources;
            c.initiator_depth = p->initiator_depth;
            c.retry_count = p->retry_count;
            c.rnr_retry_count = p->rnr_retry_count;
        }
    }
    cm_proto::event_header h{};
    h.hdr.magic = cm_proto::magic;
    h.hdr.version = cm_proto::version;
    h.hdr.opcode = static_cast<uint16_t>(cm_proto::opcode::event);
    h.hdr.length = sizeof(h) + sizeof(resp);
    h.charged_handle = charged_to;
    h.response_bytes = sizeof(resp);
    std::vector<uint8_t> msg(sizeof(h) + sizeof(resp));
    std::memcpy(msg.data(), &h, sizeof(h));
    std::memcpy(msg.data() + sizeof(h), &resp, sizeof(resp));
    ++_stats.events;
    channel& c = ch->second;
    if (c.queued.size() >= _limits.max_queued_events) {
        ++_stats.events_dropped;
        return;
    }
    c.queued.push_back(std::move(msg));
    flush(c);
}

void cm_agent::flush(channel& ch) {
    while (!ch.queued.empty()) {
        const auto& m = ch.queued.front();
        const ssize_t n = ::send(ch.event_fd, m.data(), m.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;  // the timer tries again
        }
        ch.queued.pop_front();  // sent, or the client is gone (close_channel follows)
    }
}

// ---- timers --------------------------------------------------------------------------------

cm_agent::clock::time_point cm_agent::next_deadline() const {
    auto soonest = clock::time_point::max();
    for (const auto& [h, id] : _ids) {
        soonest = std::min(soonest, id.deadline);
    }
    for (const auto& [cl, ch] : _channels) {
        if (!ch.queued.empty()) {
            soonest = std::min(soonest, clock::now() + std::chrono::milliseconds(10));
        }
    }
    for (const held_req& h : _held) {
        soonest = std::min(soonest, h.until);
    }
    return soonest;
}

void cm_agent::run_timers(clock::time_point now) {
    for (auto& [cl, ch] : _channels) {
        flush(ch);
    }
    std::erase_if(_held, [&](const held_req& h) {
        if (h.until > now) {
            return false;
        }
        ++_stats.rejected_no_listener;  // no listener came
        send_rej(h.src, h.tid, 0, h.req.local_comm_id, message_kind::req,
                 rej_reason::invalid_service_id);
        return true;
    });
    std::vector<uint32_t> finished_orphans;
    for (auto& [h, id] : _ids) {
        if (id.deadline > now || !id.outstanding) {
            continue;
        }
        if (id.retries_left-- > 0) {
            ++_stats.retransmissions;
            ++_stats.mads_sent;
            _send(id.dst_ip, *id.outstanding);
            id.deadline = now + resend_interval;
            continue;
        }
        ++_stats.timeouts;
        settle(id);
        if (id.client == 0) {
            finished_orphans.push_back(h);
            continue;
        }
        switch (id.st) {
            case state::req_sent:
                send_rej(id.dst_ip, id.transaction_id, id.local_comm_id, 0, message_kind::other,
                         rej_reason::timeout);
                id.st = state::disconnected;
                raise(id, ev_unreachable, -ETIMEDOUT);
                break;
            case state::rep_sent:
                id.st = state::disconnected;
                raise(id, ev_unreachable, -ETIMEDOUT);
                break;
            case state::sidr_req_sent:
                id.st = state::disconnected;
                raise(id, ev_unreachable, -ETIMEDOUT);
                break;
            case state::dreq_sent:
                id.st = state::disconnected;
                raise(id, ev_disconnected, 0);
                break;
            default:
                break;
        }
    }
    for (const uint32_t h : finished_orphans) {
        erase_id(h);
    }
}

}  // namespace jakiro::rdmacm
