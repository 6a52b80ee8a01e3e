#include "rdmacm/cm_agent.hh"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "rdmacm/cma_header.hh"
#include "verbs_shim/cm_protocol.hh"

namespace jakiro::rdmacm {

namespace {

// rdma_cm_event_type values (rdma/rdma_cma.h), as the ucma ABI carries them.
enum : uint32_t {
    ev_addr_resolved = 0,
    ev_addr_error = 1,
    ev_route_resolved = 2,
    ev_route_error = 3,
    ev_connect_request = 4,
    ev_connect_response = 5,
    ev_connect_error = 6,
    ev_unreachable = 7,
    ev_rejected = 8,
    ev_established = 9,
    ev_disconnected = 10,
};

// RDMA_UDP_QKEY: the Q_Key of every rdma_cm UD QP (librdmacm and the kernel agree on it).
constexpr uint32_t udp_qkey = 0x0123'4567;
// How long we wait for an answer before resending (4.096 µs × 2^16 ≈ 268 ms, the value our
// REQs announce as the remote CM response timeout), and how often.
constexpr uint8_t cm_response_timeout = 16;
constexpr auto resend_interval = std::chrono::microseconds(4096ull << cm_response_timeout) / 1000;
constexpr int max_cm_retries = 15;
// A disconnect is not worth that long: the peer may be gone.
constexpr int max_dreq_retries = 5;
constexpr std::size_t req_user_private = req_private_bytes - cma_header_bytes;  // 56
constexpr std::size_t sidr_user_private = sidr_req_private_bytes - cma_header_bytes;

gid ipv4_gid(uint32_t ip_be) {
    gid g{};
    g[10] = 0xFF;
    g[11] = 0xFF;
    std::memcpy(g.data() + 12, &ip_be, 4);
    return g;
}

template <typename T>
bool read_cmd(std::span<const uint8_t> in, T& out) {
    // The kernel copies the struct's size from the caller; a shorter `in` is EINVAL.
    if (in.size() < sizeof(T)) {
        return false;
    }
    std::memcpy(&out, in.data(), sizeof(T));
    return true;
}

template <typename T>
void put_response(std::vector<uint8_t>& out, const T& resp) {
    out.resize(sizeof(T));
    std::memcpy(out.data(), &resp, sizeof(T));
}

// An IPv4 sockaddr out of a sockaddr_in6-sized or sockaddr_storage field: AF_INET, or the
// IPv6 forms of IPv4 ("::" for any address, ::ffff:a.b.c.d), which programs that bind with
// getaddrinfo(AI_PASSIVE) hand over. nullopt for anything else (AF_IB, real IPv6: the overlay
// is IPv4).
std::optional<sockaddr_in> ipv4_of(const void* p) {
    sockaddr_in a;
    std::memcpy(&a, p, sizeof(a));
    if (a.sin_family == AF_INET) {
        return a;
    }
    if (a.sin_family != AF_INET6) {
        return std::nullopt;
    }
    sockaddr_in6 six;
    std::memcpy(&six, p, sizeof(six));
    const uint8_t* b = six.sin6_addr.s6_addr;
    static constexpr uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    const bool any = IN6_IS_ADDR_UNSPECIFIED(&six.sin6_addr);
    if (!any && std::memcmp(b, mapped, sizeof(mapped)) != 0) {
        return std::nullopt;
    }
    sockaddr_in out{};
    out.sin_family = AF_INET;
    out.sin_port = six.sin6_port;
    if (!any) {
        std::memcpy(&out.sin_addr.s_addr, b + 12, 4);
    }
    return out;
}

bool unicast(uint32_t ip_be) {
    const uint32_t ip = ntohl(ip_be);
    return ip != 0 && ip != 0xFFFF'FFFFu && (ip >> 28) != 0xE && (ip >> 24) != 127;
}

void write_sockaddr(void* dst, std::size_t room, uint32_t ip_be, uint16_t port) {
    std::memset(dst, 0, room);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = ip_be;
    std::memcpy(dst, &a, sizeof(a));
}

void fill_ah(ib_uverbs_ah_attr& ah, uint32_t dst_ip_be, uint8_t tos) {
    ah = {};
    const gid g = ipv4_gid(dst_ip_be);
    std::memcpy(ah.grh.dgid, g.data(), 16);
    ah.grh.sgid_index = 0;
    ah.grh.hop_limit = 64;
    ah.grh.traffic_class = tos;
    ah.is_global = 1;
    ah.port_num = 1;
}

}  // namespace

struct cm_agent::event_params {
    const uint8_t* private_data = nullptr;
    std::size_t private_len = 0;
    uint32_t qp_num = 0;
    uint32_t qkey = 0;
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t retry_count = 0;
    uint8_t rnr_retry_count = 0;
    bool srq = false;
    bool ud = false;
    uint32_t ah_ip_be = 0;
};

cm_agent::cm_agent(agent_identity self, mad_sender send, admission admit, agent_limits limits)
    : _self(self), _send(std::move(send)), _admit(std::move(admit)), _limits(limits) {
    std::random_device rd;
    _next_tid = (uint64_t{rd()} << 32) | rd();
    _comm_id_seed = rd();
}

cm_agent::~cm_agent() = default;

uint32_t cm_agent::open_channel(uint64_t client, int event_fd) {
    if (_channels.size() >= _limits.max_channels || _channels.count(client) != 0) {
        return 0;
    }
    channel ch;
    ch.client = client;
    ch.event_fd = event_fd;
    ch.token = _next_token++;
    if (_next_token == 0) {
        _next_token = 1;
    }
    const uint32_t token = ch.token;
    _channels.emplace(client, std::move(ch));
    return token;
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

cm_agent::cm_id* cm_agent::by_comm_id(uint32_t local_comm_id, uint32_t src_ip_be) {
    const auto it = _by_comm_id.find(local_comm_id);
    if (it == _by_comm_id.end()) {
        return nullptr;
    }
    cm_id& id = _ids.at(it->second);
    return id.dst_ip_be == src_ip_be ? &id : nullptr;
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

cm_agent::cm_id* cm_agent::find_listener(uint16_t ps, uint16_t port, uint32_t dst_ip_be) {
    for (auto& [h, id] : _ids) {
        if (id.st == state::listening && id.ps == ps && id.src_port == port &&
            (id.src_ip_be == 0 || id.src_ip_be == dst_ip_be)) {
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

void cm_agent::send(uint32_t dst_ip_be, const cm_message& m) {
    ++_stats.mads_sent;
    _send(dst_ip_be, encode(m));
}

void cm_agent::send_tracked(cm_id& id, const cm_message& m) {
    id.outstanding = encode(m);
    id.retries_left = std::holds_alternative<cm_dreq>(m.body) ? max_dreq_retries : max_cm_retries;
    id.deadline = clock::now() + resend_interval;
    ++_stats.mads_sent;
    _send(id.dst_ip_be, *id.outstanding);
}

void cm_agent::settle(cm_id& id) {
    id.outstanding.reset();
    id.deadline = clock::time_point::max();
}

void cm_agent::send_rej(uint32_t dst_ip_be, uint64_t tid, uint32_t local_comm_id,
                        uint32_t remote_comm_id, message_kind what, rej_reason reason) {
    cm_rej r;
    r.local_comm_id = local_comm_id;
    r.remote_comm_id = remote_comm_id;
    r.message_rejected = what;
    r.reason = static_cast<uint16_t>(reason);
    send(dst_ip_be, cm_message{tid, r});
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
            send(id.dst_ip_be,
                 cm_message{id.transaction_id, cm_drep{id.local_comm_id, id.remote_comm_id}});
            return false;
        case state::req_rcvd:
            send_rej(id.dst_ip_be, id.transaction_id, id.local_comm_id, id.remote_comm_id,
                     message_kind::req, rej_reason::consumer_defined);
            return false;
        case state::req_sent:
            send_rej(id.dst_ip_be, id.transaction_id, id.local_comm_id, 0, message_kind::other,
                     rej_reason::timeout);
            return false;
        case state::sidr_req_rcvd: {
            cm_sidr_rep r;
            r.request_id = id.remote_comm_id;
            r.status = sidr_status::rejected;
            r.service_id = service_id(id.ps, id.src_port);
            id.sidr_reply = encode(cm_message{id.transaction_id, r});  // for a lost one
            ++_stats.mads_sent;
            _send(id.dst_ip_be, *id.sidr_reply);
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
            fill_ah(ud.ah_attr, p->ah_ip_be, id.tos);
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

// ---- commands ------------------------------------------------------------------------------

int cm_agent::command(uint64_t client, std::span<const uint8_t> cmd,
                      std::span<const uint8_t> option, std::vector<uint8_t>& response) {
    ++_stats.commands;
    response.clear();
    rdma_ucm_cmd_hdr hdr;
    if (cmd.size() < sizeof(hdr) || _channels.count(client) == 0) {
        ++_stats.bad_commands;
        return EINVAL;
    }
    std::memcpy(&hdr, cmd.data(), sizeof(hdr));
    if (sizeof(hdr) + hdr.in > cmd.size()) {
        ++_stats.bad_commands;
        return EINVAL;
    }
    const auto in = cmd.subspan(sizeof(hdr), hdr.in);
    int rc = ENOSYS;
    switch (hdr.cmd) {
        case RDMA_USER_CM_CMD_CREATE_ID:
            rc = create_id(client, in, response);
            break;
        case RDMA_USER_CM_CMD_DESTROY_ID:
            rc = destroy_id(client, in, response);
            break;
        case RDMA_USER_CM_CMD_BIND_IP:
            rc = bind_ip(client, in, false);
            break;
        case RDMA_USER_CM_CMD_BIND:
            rc = bind_ip(client, in, true);
            break;
        case RDMA_USER_CM_CMD_RESOLVE_IP:
            rc = resolve_ip(client, in, false);
            break;
        case RDMA_USER_CM_CMD_RESOLVE_ADDR:
            rc = resolve_ip(client, in, true);
            break;
        case RDMA_USER_CM_CMD_RESOLVE_ROUTE:
            rc = resolve_route(client, in);
            break;
        case RDMA_USER_CM_CMD_QUERY_ROUTE:
            rc = query_route(client, in, response);
            break;
        case RDMA_USER_CM_CMD_QUERY:
            rc = query(client, in, response);
            break;
        case RDMA_USER_CM_CMD_CONNECT:
            rc = connect(client, in);
            break;
        case RDMA_USER_CM_CMD_LISTEN:
            rc = listen(client, in);
            break;
        case RDMA_USER_CM_CMD_ACCEPT:
            rc = accept(client, in);
            break;
        case RDMA_USER_CM_CMD_REJECT:
            rc = reject(client, in);
            break;
        case RDMA_USER_CM_CMD_DISCONNECT:
            rc = disconnect(client, in);
            break;
        case RDMA_USER_CM_CMD_INIT_QP_ATTR:
            rc = init_qp_attr(client, in, response);
            break;
        case RDMA_USER_CM_CMD_SET_OPTION:
            rc = set_option(client, in, option);
            break;
        case RDMA_USER_CM_CMD_NOTIFY:
            rc = notify(client, in);
            break;
        case RDMA_USER_CM_CMD_MIGRATE_ID:
            rc = migrate_id(client, in, response);
            break;
        case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
        case RDMA_USER_CM_CMD_JOIN_MCAST:
            // The overlay carries no multicast: refused cleanly (issue 13, point 4).
            rc = EOPNOTSUPP;
            break;
        case RDMA_USER_CM_CMD_LEAVE_MCAST:
            rc = ENOENT;  // nothing was ever joined
            break;
        case RDMA_USER_CM_CMD_GET_EVENT:  // the shim serves it from the event socket
            rc = EINVAL;
            break;
        default:
            rc = hdr.cmd > RDMA_USER_CM_CMD_JOIN_MCAST ? EINVAL : ENOSYS;
            break;
    }
    if (rc == 0 && response.size() > hdr.out) {
        // The kernel answers ENOSPC when the caller's buffer cannot hold the response.
        response.clear();
        rc = ENOSPC;
    }
    if (rc != 0) {
        ++_stats.bad_commands;
    }
    return rc;
}

int cm_agent::create_id(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out) {
    rdma_ucm_create_id c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    if (c.ps != port_space_tcp && c.ps != port_space_udp && c.ps != port_space_ib &&
        c.ps != 0x0002 /* IPOIB */) {
        return EINVAL;
    }
    if (c.qp_type != IBV_QPT_RC && c.qp_type != IBV_QPT_UD && c.qp_type != IBV_QPT_UC) {
        return EINVAL;
    }
    cm_id* id = new_id(client, c.ps, c.qp_type);
    if (id == nullptr) {
        return EDQUOT;
    }
    id->uid = c.uid;
    rdma_ucm_create_id_resp r{};
    r.id = id->handle;
    put_response(out, r);
    return 0;
}

int cm_agent::destroy_id(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out) {
    rdma_ucm_destroy_id c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    if (!release(*id)) {
        erase_id(c.id);
    }
    rdma_ucm_destroy_id_resp r{};
    r.events_reported = 0;  // the shim counts what it delivered and fills this in
    put_response(out, r);
    return 0;
}

int cm_agent::bind_ip(uint64_t client, std::span<const uint8_t> in, bool sockaddr_storage) {
    uint32_t handle;
    std::optional<sockaddr_in> a;
    if (sockaddr_storage) {
        rdma_ucm_bind c;
        if (!read_cmd(in, c)) {
            return EINVAL;
        }
        handle = c.id;
        a = ipv4_of(&c.addr);
    } else {
        rdma_ucm_bind_ip c;
        if (!read_cmd(in, c)) {
            return EINVAL;
        }
        handle = c.id;
        a = ipv4_of(&c.addr);
    }
    cm_id* id = find(client, handle);
    if (id == nullptr) {
        return ENOENT;
    }
    if (!a) {
        return EAFNOSUPPORT;  // AF_IB and IPv6: librdmacm falls back to the IPv4 commands
    }
    if (id->bound || id->st != state::idle) {
        return EINVAL;
    }
    // The vNIC's address, any, or loopback: the kernel binds a loopback address to the first
    // device (cma_bind_loopback), and libfabric binds 127.0.0.1 when given no address.
    const bool loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    if (a->sin_addr.s_addr != 0 && a->sin_addr.s_addr != _self.ip_be && !loopback) {
        return EADDRNOTAVAIL;
    }
    uint16_t port = ntohs(a->sin_port);
    if (port == 0) {
        port = ephemeral_port(id->ps);
        if (port == 0) {
            return EADDRINUSE;
        }
    } else if (port_in_use(id->ps, port, id)) {
        return EADDRINUSE;
    }
    id->bound = true;
    // A loopback bind is reported as the vNIC's address: the vNIC is the namespace's only RDMA
    // device, and a peer must be able to reach what a program learns from
    // rdma_get_local_addr (libfabric's verbs provider advertises it).
    id->src_ip_be = loopback ? _self.ip_be : a->sin_addr.s_addr;
    id->src_port = port;
    return 0;
}

int cm_agent::resolve_ip(uint64_t client, std::span<const uint8_t> in, bool sockaddr_storage) {
    uint32_t handle;
    std::optional<sockaddr_in> src, dst;
    bool have_src = false;
    if (sockaddr_storage) {
        rdma_ucm_resolve_addr c;
        if (!read_cmd(in, c)) {
            return EINVAL;
        }
        handle = c.id;
        have_src = c.src_size != 0;
        src = ipv4_of(&c.src_addr);
        dst = ipv4_of(&c.dst_addr);
    } else {
        rdma_ucm_resolve_ip c;
        if (!read_cmd(in, c)) {
            return EINVAL;
        }
        handle = c.id;
        have_src = c.src_addr.sin6_family != 0;
        src = ipv4_of(&c.src_addr);
        dst = ipv4_of(&c.dst_addr);
    }
    cm_id* id = find(client, handle);
    if (id == nullptr) {
        return ENOENT;
    }
    if (!dst || (have_src && !src)) {
        return EAFNOSUPPORT;
    }
    if (id->st != state::idle && id->st != state::addr_resolved) {
        return EINVAL;
    }
    if (!id->bound) {
        if (have_src && src->sin_addr.s_addr != 0 && src->sin_addr.s_addr != _self.ip_be) {
            return EADDRNOTAVAIL;
        }
        const uint16_t port = ephemeral_port(id->ps);
        if (port == 0) {
            return EADDRINUSE;
        }
        id->bound = true;
        id->src_port = port;
    }
    id->src_ip_be = _self.ip_be;
    id->dst_ip_be = dst->sin_addr.s_addr;
    id->dst_port = ntohs(dst->sin_port);
    const uint32_t host = ntohl(id->dst_ip_be);
    if (!unicast(id->dst_ip_be) && (host >> 28) != 0xE) {
        raise(*id, ev_addr_error, -EHOSTUNREACH);
        return 0;
    }
    // No ARP on the fabric: any unicast address is resolved; the overlay's VLT of this vNIC's
    // VPC is where its MADs go (an address nobody holds times out as UNREACHABLE).
    id->st = state::addr_resolved;
    raise(*id, ev_addr_resolved, 0);
    return 0;
}

int cm_agent::resolve_route(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_resolve_route c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    if (id->st != state::addr_resolved && id->st != state::route_resolved) {
        return EINVAL;
    }
    id->st = state::route_resolved;
    id->have_route = true;
    raise(*id, ev_route_resolved, 0);
    return 0;
}

int cm_agent::query_route(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out) {
    rdma_ucm_query c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    const cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    rdma_ucm_query_route_resp r{};
    // The device: librdmacm matches it by node GUID against ibv_get_device_guid() (index -1:
    // match the GUID alone).
    r.node_guid = _self.node_guid_be;
    r.port_num = 1;
    r.ibdev_index = 0xFFFF'FFFFu;
    const uint32_t src = id->src_ip_be != 0 ? id->src_ip_be : _self.ip_be;
    write_sockaddr(&r.src_addr, sizeof(r.src_addr), id->bound ? id->src_ip_be : 0, id->src_port);
    write_sockaddr(&r.dst_addr, sizeof(r.dst_addr), id->dst_ip_be, id->dst_port);
    auto& p = r.ib_route[0];
    const gid s = ipv4_gid(src);
    std::memcpy(p.sgid, s.data(), 16);
    if (id->dst_ip_be != 0) {
        const gid d = ipv4_gid(id->dst_ip_be);
        std::memcpy(p.dgid, d.data(), 16);
    }
    p.pkey = htons(0xFFFF);
    p.mtu = id->path_mtu;
    p.mtu_selector = 2;
    p.hop_limit = 64;
    p.traffic_class = id->tos;
    p.numb_path = 1;
    p.rate = 3;  // 10 Gb/s, informational
    p.rate_selector = 2;
    p.packet_life_time = 16;
    p.packet_life_time_selector = 2;
    r.num_paths = id->have_route ? 1 : 0;
    put_response(out, r);
    return 0;
}

int cm_agent::query(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out) {
    rdma_ucm_query c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    const cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    if (c.option != RDMA_USER_CM_QUERY_ADDR) {
        return ENOSYS;  // PATH and GID belong to AF_IB, which this device does not offer
    }
    rdma_ucm_query_addr_resp r{};
    r.node_guid = _self.node_guid_be;
    r.port_num = 1;
    r.pkey = 0xFFFF;
    r.src_size = sizeof(sockaddr_in);
    r.dst_size = sizeof(sockaddr_in);
    write_sockaddr(&r.src_addr, sizeof(r.src_addr), id->src_ip_be, id->src_port);
    write_sockaddr(&r.dst_addr, sizeof(r.dst_addr), id->dst_ip_be, id->dst_port);
    r.ibdev_index = 0xFFFF'FFFFu;
    put_response(out, r);
    return 0;
}

int cm_agent::connect(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_connect c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    if (id->st != state::route_resolved || !c.conn_param.valid) {
        return EINVAL;
    }
    const auto& p = c.conn_param;
    if (!unicast(id->dst_ip_be)) {
        return EINVAL;  // a multicast group is joined, not connected to
    }
    if (_admit && _admit(id->dst_ip_be) != 0) {
        // This vNIC's own security groups refuse the peer: nothing goes on the wire, and the
        // connection is rejected as the peer's agent would reject it (reason 28), through an
        // event: programs (rping among them) handle a REJECTED event, not a failed connect.
        ++_stats.rejected_by_policy;
        id->st = state::disconnected;
        raise(*id, ev_rejected, static_cast<int32_t>(rej_reason::consumer_defined));
        return 0;
    }
    if (id->qp_type == IBV_QPT_UD) {
        if (p.private_data_len > sidr_user_private) {
            return EINVAL;
        }
        cm_sidr_req r;
        r.request_id = new_comm_id();
        r.service_id = service_id(id->ps, id->dst_port);
        write_cma_header(r.private_data, {id->src_port, _self.ip_be, id->dst_ip_be});
        std::memcpy(r.private_data.data() + cma_header_bytes, p.private_data, p.private_data_len);
        id->local_comm_id = r.request_id;
        _by_comm_id[r.request_id] = id->handle;
        id->transaction_id = _next_tid++;
        id->st = state::sidr_req_sent;
        send_tracked(*id, cm_message{id->transaction_id, r});
        return 0;
    }
    if (p.private_data_len > req_user_private || p.qp_num == 0 || p.qp_num > 0xFF'FFFF) {
        return EINVAL;
    }
    std::random_device rd;
    cm_req r;
    r.local_comm_id = new_comm_id();
    r.service_id = service_id(id->ps, id->dst_port);
    r.local_ca_guid = be64toh(_self.node_guid_be);
    r.local_qpn = p.qp_num;
    r.responder_resources = p.responder_resources;
    r.initiator_depth = p.initiator_depth;
    r.remote_cm_response_timeout = cm_response_timeout;
    r.transport = id->qp_type == IBV_QPT_UC ? cm_transport::uc : cm_transport::rc;
    r.end_to_end_flow_control = p.flow_control != 0;
    r.starting_psn = rd() & 0xFF'FFFF;
    r.local_cm_response_timeout = cm_response_timeout;
    r.retry_count = p.retry_count & 7;
    r.pkey = 0xFFFF;
    r.path_mtu = id->path_mtu;
    r.rnr_retry_count = p.rnr_retry_count & 7;
    r.max_cm_retries = max_cm_retries;
    r.srq = p.srq != 0;
    r.primary_local_lid = 0xFFFF;  // permissive: RoCE routes by GID
    r.primary_remote_lid = 0xFFFF;
    r.primary_local_gid = ipv4_gid(_self.ip_be);
    r.primary_remote_gid = ipv4_gid(id->dst_ip_be);
    r.primary_packet_rate = 3;
    r.primary_traffic_class = id->tos;
    r.primary_hop_limit = 64;
    r.primary_local_ack_timeout = id->ack_timeout;
    write_cma_header(r.private_data, {id->src_port, _self.ip_be, id->dst_ip_be});
    std::memcpy(r.private_data.data() + cma_header_bytes, p.private_data, p.private_data_len);
    id->local_comm_id = r.local_comm_id;
    _by_comm_id[r.local_comm_id] = id->handle;
    id->local_qpn = p.qp_num;
    id->sq_psn = r.starting_psn;
    id->responder_resources = p.responder_resources;
    id->initiator_depth = p.initiator_depth;
    id->retry_count = r.retry_count;
    id->rnr_retry_count = r.rnr_retry_count;
    id->srq = r.srq;
    id->transaction_id = _next_tid++;
    id->st = state::req_sent;
    send_tracked(*id, cm_message{id->transaction_id, r});
    return 0;
}

int cm_agent::listen(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_listen c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    if (id->st == state::listening) {
        id->backlog = c.backlog > 0 ? static_cast<int>(c.backlog) : 128;
        return 0;
    }
    if (id->st != state::idle) {
        return EINVAL;
    }
    if (!id->bound) {
        const uint16_t port = ephemeral_port(id->ps);
        if (port == 0) {
            return EADDRINUSE;
        }
        id->bound = true;
        id->src_port = port;
    }
    id->backlog = c.backlog > 0 ? std::min<int>(static_cast<int>(c.backlog), 1024) : 128;
    id->st = state::listening;
    return 0;
}

int cm_agent::accept(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_accept c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    const auto& p = c.conn_param;
    if (id->st == state::rep_rcvd && !p.valid) {
        // The active side after CONNECT_RESPONSE: its QP is ready, the RTU completes it.
        send(id->dst_ip_be,
             cm_message{id->transaction_id, cm_rtu{id->local_comm_id, id->remote_comm_id}});
        id->st = state::established;
        return 0;
    }
    if (id->st == state::sidr_req_rcvd) {
        if (!p.valid || p.private_data_len > sidr_rep_private_bytes || p.qp_num > 0xFF'FFFF) {
            return EINVAL;
        }
        cm_sidr_rep r;
        r.request_id = id->remote_comm_id;
        r.status = sidr_status::valid;
        r.qpn = p.qp_num;
        r.service_id = service_id(id->ps, id->src_port);
        r.qkey = p.qkey != 0 ? p.qkey : udp_qkey;
        std::memcpy(r.private_data.data(), p.private_data, p.private_data_len);
        id->sidr_reply = encode(cm_message{id->transaction_id, r});
        ++_stats.mads_sent;
        _send(id->dst_ip_be, *id->sidr_reply);
        id->uid = c.uid;
        id->st = state::sidr_done;
        return 0;
    }
    if (id->st != state::req_rcvd || !p.valid) {
        return EINVAL;
    }
    if (p.private_data_len > rep_private_bytes || p.qp_num == 0 || p.qp_num > 0xFF'FFFF) {
        return EINVAL;
    }
    cm_rep r;
    r.local_comm_id = id->local_comm_id;
    r.remote_comm_id = id->remote_comm_id;
    r.local_qpn = p.qp_num;
    r.starting_psn = id->sq_psn;
    r.responder_resources = p.responder_resources;
    r.initiator_depth = p.initiator_depth;
    r.target_ack_delay = 15;
    r.end_to_end_flow_control = p.flow_control != 0;
    r.rnr_retry_count = p.rnr_retry_count & 7;
    r.srq = p.srq != 0;
    r.local_ca_guid = be64toh(_self.node_guid_be);
    std::memcpy(r.private_data.data(), p.private_data, p.private_data_len);
    id->uid = c.uid;
    id->local_qpn = p.qp_num;
    id->responder_resources = p.responder_resources;
    id->initiator_depth = p.initiator_depth;
    id->st = state::rep_sent;
    send_tracked(*id, cm_message{id->transaction_id, r});
    return 0;
}

int cm_agent::reject(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_reject c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    if (id->st == state::sidr_req_rcvd) {
        release(*id);  // a SIDR_REP saying "rejected"
        id->st = state::sidr_done;
        return 0;
    }
    if (id->st != state::req_rcvd && id->st != state::rep_rcvd) {
        return EINVAL;
    }
    cm_rej r;
    r.local_comm_id = id->local_comm_id;
    r.remote_comm_id = id->remote_comm_id;
    r.message_rejected = id->st == state::req_rcvd ? message_kind::req : message_kind::rep;
    r.reason = static_cast<uint16_t>(rej_reason::consumer_defined);
    std::memcpy(r.private_data.data(), c.private_data,
                std::min<std::size_t>(c.private_data_len, rej_private_bytes));
    send(id->dst_ip_be, cm_message{id->transaction_id, r});
    settle(*id);
    id->st = state::disconnected;
    return 0;
}

int cm_agent::disconnect(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_disconnect c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    switch (id->st) {
        case state::established:
        case state::rep_sent:  // RTU lost but the peer is talking: as IBTA's COMM_EST
        {
            settle(*id);
            id->transaction_id = _next_tid++;
            id->st = state::dreq_sent;
            send_tracked(
                *id, cm_message{id->transaction_id,
                                cm_dreq{id->local_comm_id, id->remote_comm_id, id->remote_qpn}});
            return 0;
        }
        case state::dreq_rcvd:
            send(id->dst_ip_be,
                 cm_message{id->transaction_id, cm_drep{id->local_comm_id, id->remote_comm_id}});
            id->st = state::disconnected;
            return 0;
        default:
            return EINVAL;
    }
}

int cm_agent::init_qp_attr(uint64_t client, std::span<const uint8_t> in,
                           std::vector<uint8_t>& out) {
    rdma_ucm_init_qp_attr c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    const cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    ib_uverbs_qp_attr r{};
    r.qp_state = c.qp_state;
    uint32_t mask = IBV_QP_STATE;
    switch (c.qp_state) {
        case IBV_QPS_INIT:
            r.pkey_index = 0;
            r.port_num = 1;
            mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
            if (id->qp_type == IBV_QPT_UD) {
                r.qkey = udp_qkey;
                mask |= IBV_QP_QKEY;
            } else {
                r.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
                if (id->responder_resources != 0) {
                    r.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
                }
                mask |= IBV_QP_ACCESS_FLAGS;
            }
            break;
        case IBV_QPS_RTR:
            if (id->qp_type == IBV_QPT_UD) {
                break;
            }
            if (id->st != state::req_rcvd && id->st != state::rep_rcvd &&
                id->st != state::rep_sent && id->st != state::established) {
                return EINVAL;
            }
            fill_ah(r.ah_attr, id->dst_ip_be, id->tos);
            r.path_mtu = id->path_mtu;
            r.dest_qp_num = id->remote_qpn;
            r.rq_psn = id->rq_psn;
            r.max_dest_rd_atomic = id->responder_resources;
            r.min_rnr_timer = 12;  // 0.64 ms
            mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
            break;
        case IBV_QPS_RTS:
            r.sq_psn = id->qp_type == IBV_QPT_UD ? 0 : id->sq_psn;
            mask |= IBV_QP_SQ_PSN;
            if (id->qp_type == IBV_QPT_UD) {
                break;
            }
            if (id->st != state::req_rcvd && id->st != state::rep_rcvd &&
                id->st != state::rep_sent && id->st != state::established) {
                return EINVAL;
            }
            r.timeout = id->ack_timeout;
            r.retry_cnt = id->retry_count;
            r.rnr_retry = id->rnr_retry_count;
            r.max_rd_atomic = id->initiator_depth;
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
            break;
        default:
            return EINVAL;
    }
    r.qp_attr_mask = mask;
    put_response(out, r);
    return 0;
}

int cm_agent::set_option(uint64_t client, std::span<const uint8_t> in,
                         std::span<const uint8_t> option) {
    rdma_ucm_set_option c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    if (c.optlen != option.size()) {
        return EINVAL;  // the shim copies exactly optlen bytes
    }
    if (c.level == RDMA_OPTION_ID) {
        switch (c.optname) {
            case RDMA_OPTION_ID_TOS:
                if (option.size() != 1) {
                    return EINVAL;
                }
                id->tos = option[0];
                return 0;
            case RDMA_OPTION_ID_REUSEADDR:
            case RDMA_OPTION_ID_AFONLY:
                return option.size() == sizeof(int) ? 0 : EINVAL;
            case RDMA_OPTION_ID_ACK_TIMEOUT:
                if (option.size() != 1) {
                    return EINVAL;
                }
                id->ack_timeout = std::min<uint8_t>(option[0], 31);
                return 0;
            default:
                return ENOSYS;
        }
    }
    return ENOSYS;  // RDMA_OPTION_IB_PATH: paths are the overlay's business
}

int cm_agent::notify(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_notify c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    if (c.event == IBV_EVENT_COMM_EST && id->st == state::rep_sent) {
        settle(*id);
        id->st = state::established;
        raise(*id, ev_established, 0);
    }
    return 0;
}

int cm_agent::migrate_id(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out) {
    rdma_ucm_migrate_id c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    // `fd` is the old channel's token (the shim swapped the descriptor for it): only a channel
    // of the same vNIC is found, and the id must be that channel's.
    uint64_t from = 0;
    for (const auto& [cl, ch] : _channels) {
        if (ch.token == c.fd) {
            from = cl;
        }
    }
    cm_id* id = from != 0 ? find(from, c.id) : nullptr;
    if (id == nullptr) {
        return ENOENT;
    }
    id->client = client;
    rdma_ucm_migrate_resp r{};
    r.events_reported = 0;  // the shim fills in what it delivered
    put_response(out, r);
    return 0;
}

// ---- MADs ----------------------------------------------------------------------------------

void cm_agent::on_mad(uint32_t src_ip_be, std::span<const uint8_t> mad) {
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
                on_req(src_ip_be, m->transaction_id, body);
            } else if constexpr (std::is_same_v<T, cm_rep>) {
                on_rep(src_ip_be, body);
            } else if constexpr (std::is_same_v<T, cm_rtu>) {
                on_rtu(src_ip_be, body);
            } else if constexpr (std::is_same_v<T, cm_rej>) {
                on_rej(src_ip_be, body);
            } else if constexpr (std::is_same_v<T, cm_mra>) {
                on_mra(src_ip_be, body);
            } else if constexpr (std::is_same_v<T, cm_dreq>) {
                on_dreq(src_ip_be, m->transaction_id, body);
            } else if constexpr (std::is_same_v<T, cm_drep>) {
                on_drep(src_ip_be, body);
            } else if constexpr (std::is_same_v<T, cm_sidr_req>) {
                on_sidr_req(src_ip_be, m->transaction_id, body);
            } else if constexpr (std::is_same_v<T, cm_sidr_rep>) {
                on_sidr_rep(src_ip_be, body);
            }
        },
        m->body);
}

void cm_agent::on_req(uint32_t src_ip_be, uint64_t tid, const cm_req& m) {
    // A retransmission of a REQ we already hold: answer as we did (MRA while the application
    // decides, the REP again once it accepted).
    for (auto& [h, id] : _ids) {
        if (id.remote_comm_id == m.local_comm_id && id.dst_ip_be == src_ip_be && id.listener != 0) {
            if (id.st == state::req_rcvd) {
                cm_mra mra{id.local_comm_id, id.remote_comm_id, message_kind::req, 20};
                send(src_ip_be, cm_message{tid, mra});
            } else if (id.st == state::rep_sent && id.outstanding) {
                ++_stats.mads_sent;
                _send(src_ip_be, *id.outstanding);
            }
            return;
        }
    }
    const auto ip = read_cma_header(m.private_data);
    if (!is_ip_service(m.service_id) || !ip || ip->dst_ip_be != _self.ip_be ||
        m.transport == cm_transport::rd) {
        ++_stats.mads_dropped;
        return;
    }
    if (ip->src_ip_be != src_ip_be) {
        forged();
        return;
    }
    cm_id* listener =
        find_listener(port_space_of(m.service_id), port_of(m.service_id), _self.ip_be);
    if (listener == nullptr || listener->qp_type == IBV_QPT_UD) {
        ++_stats.rejected_no_listener;
        send_rej(src_ip_be, tid, 0, m.local_comm_id, message_kind::req,
                 rej_reason::invalid_service_id);
        return;
    }
    if (_admit && _admit(src_ip_be) != 0) {
        ++_stats.rejected_by_policy;
        send_rej(src_ip_be, tid, 0, m.local_comm_id, message_kind::req,
                 rej_reason::consumer_defined);
        return;
    }
    int pending = 0;
    for (const auto& [h, id] : _ids) {
        pending += id.listener == listener->handle && id.st == state::req_rcvd;
    }
    if (pending >= listener->backlog) {
        ++_stats.mads_dropped;  // the peer retries, as a full TCP backlog makes it do
        return;
    }
    const uint32_t listener_handle = listener->handle;
    cm_id* child = new_id(listener->client, listener->ps, listener->qp_type);
    if (child == nullptr) {
        send_rej(src_ip_be, tid, 0, m.local_comm_id, message_kind::req, rej_reason::no_qp);
        return;
    }
    listener = &_ids.at(listener_handle);  // new_id may have rehashed
    child->listener = listener_handle;
    child->bound = true;
    child->src_ip_be = _self.ip_be;
    child->src_port = listener->src_port;
    child->dst_ip_be = src_ip_be;
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
    child->ack_timeout = m.primary_local_ack_timeout != 0 ? m.primary_local_ack_timeout : 14;
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

void cm_agent::on_rep(uint32_t src_ip_be, const cm_rep& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src_ip_be);
    if (id == nullptr) {
        ++_stats.mads_dropped;
        return;
    }
    if (id->st == state::established && id->remote_comm_id == m.local_comm_id) {
        // Our RTU was lost: say it again.
        send(src_ip_be,
             cm_message{id->transaction_id, cm_rtu{id->local_comm_id, id->remote_comm_id}});
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

void cm_agent::on_rtu(uint32_t src_ip_be, const cm_rtu& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src_ip_be);
    if (id == nullptr || id->st != state::rep_sent || id->remote_comm_id != m.local_comm_id) {
        ++_stats.mads_dropped;
        return;
    }
    settle(*id);
    id->st = state::established;
    raise(*id, ev_established, 0);
}

void cm_agent::on_rej(uint32_t src_ip_be, const cm_rej& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src_ip_be);
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

void cm_agent::on_mra(uint32_t src_ip_be, const cm_mra& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src_ip_be);
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

void cm_agent::on_dreq(uint32_t src_ip_be, uint64_t tid, const cm_dreq& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src_ip_be);
    if (id == nullptr || id->remote_comm_id != m.local_comm_id) {
        // Not (or no longer) ours: a DREP costs nothing and ends the peer's retries.
        send(src_ip_be, cm_message{tid, cm_drep{m.remote_comm_id, m.local_comm_id}});
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
            send(src_ip_be, cm_message{tid, cm_drep{id->local_comm_id, id->remote_comm_id}});
            break;
        default:
            send(src_ip_be, cm_message{tid, cm_drep{id->local_comm_id, id->remote_comm_id}});
            break;
    }
}

void cm_agent::on_drep(uint32_t src_ip_be, const cm_drep& m) {
    cm_id* id = by_comm_id(m.remote_comm_id, src_ip_be);
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

void cm_agent::on_sidr_req(uint32_t src_ip_be, uint64_t tid, const cm_sidr_req& m) {
    for (auto& [h, id] : _ids) {
        if (id.remote_comm_id == m.request_id && id.dst_ip_be == src_ip_be && id.listener != 0 &&
            (id.st == state::sidr_req_rcvd || id.st == state::sidr_done)) {
            // A retransmission: the application is still deciding (the requester retries),
            // or our SIDR_REP was lost: send it again.
            if (id.sidr_reply) {
                ++_stats.retransmissions;
                ++_stats.mads_sent;
                _send(src_ip_be, *id.sidr_reply);
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
        send(src_ip_be, cm_message{tid, r});
    };
    if (!is_ip_service(m.service_id) || !ip || ip->dst_ip_be != _self.ip_be) {
        ++_stats.mads_dropped;
        return;
    }
    if (ip->src_ip_be != src_ip_be) {
        forged();
        return;
    }
    cm_id* listener =
        find_listener(port_space_of(m.service_id), port_of(m.service_id), _self.ip_be);
    if (listener == nullptr || listener->qp_type != IBV_QPT_UD) {
        ++_stats.rejected_no_listener;
        refuse(sidr_status::no_service);
        return;
    }
    if (_admit && _admit(src_ip_be) != 0) {
        ++_stats.rejected_by_policy;
        refuse(sidr_status::rejected);
        return;
    }
    const uint32_t listener_handle = listener->handle;
    cm_id* child = new_id(listener->client, listener->ps, listener->qp_type);
    if (child == nullptr) {
        refuse(sidr_status::no_qp);
        return;
    }
    listener = &_ids.at(listener_handle);
    child->listener = listener_handle;
    child->bound = true;
    child->src_ip_be = _self.ip_be;
    child->src_port = listener->src_port;
    child->dst_ip_be = src_ip_be;
    child->dst_port = ip->src_port;
    child->have_route = true;
    child->remote_comm_id = m.request_id;
    child->transaction_id = tid;
    child->st = state::sidr_req_rcvd;
    event_params p;
    p.ud = true;
    p.private_data = m.private_data.data() + cma_header_bytes;
    p.private_len = sidr_user_private;
    p.ah_ip_be = src_ip_be;
    raise(*child, ev_connect_request, 0, &p, listener_handle, listener->uid, child->handle);
}

void cm_agent::on_sidr_rep(uint32_t src_ip_be, const cm_sidr_rep& m) {
    cm_id* id = by_comm_id(m.request_id, src_ip_be);
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
    p.ah_ip_be = src_ip_be;
    raise(*id, ev_established, 0, &p);
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
    return soonest;
}

void cm_agent::run_timers(clock::time_point now) {
    for (auto& [cl, ch] : _channels) {
        flush(ch);
    }
    std::vector<uint32_t> finished_orphans;
    for (auto& [h, id] : _ids) {
        if (id.deadline > now || !id.outstanding) {
            continue;
        }
        if (id.retries_left-- > 0) {
            ++_stats.retransmissions;
            ++_stats.mads_sent;
            _send(id.dst_ip_be, *id.outstanding);
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
                send_rej(id.dst_ip_be, id.transaction_id, id.local_comm_id, 0, message_kind::other,
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
