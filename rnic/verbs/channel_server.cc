#include "channel_server.hh"

#include "verbs_abi/cm_protocol.hh"

#include "verbs_abi/endpoint_address.hh"
#include "verbs_abi/fd_passing.hh"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <iostream>

namespace jakiro::verbs {

namespace {

namespace proto = verbs_proto;

// How long the listeners rest after accept() ran out of descriptors: the pending connection
// stays queued and would otherwise wake poll() in a busy loop.
constexpr int accept_backoff_ms = 100;
// Connections a listener queues before accept; each vNIC has its own listeners.
constexpr int listen_backlog = 64;
// How long sync() waits for the server thread to apply a change: tearing down a vNIC's QPs
// goes through the engine, whose calls time out after 5 s each.
constexpr auto change_timeout = std::chrono::seconds(30);
// Descriptors jakirod may need for clients: two per connection, for this many connections.
constexpr std::size_t expected_clients = 4096;

// Every client holds two descriptors here; the default soft limit (1024) would cap jakirod
// at a few hundred verbs contexts, so raise it towards the hard limit once.
void raise_fd_limit(std::size_t wanted) {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= wanted) {
        return;
    }
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, wanted);
    setrlimit(RLIMIT_NOFILE, &lim);
}

bool send_with_fd(int fd, const void* data, std::size_t size, int passed_fd) {
    // Never block on a client that does not read, never die of SIGPIPE for one that left.
    return proto::send_with_fd(fd, data, size, passed_fd, MSG_NOSIGNAL | MSG_DONTWAIT) ==
           static_cast<ssize_t>(size);
}

bool same_endpoint(const endpoint_config& a, const endpoint_config& b) {
    return a.identity.name == b.identity.name && a.identity.mac == b.identity.mac &&
           a.identity.ip == b.identity.ip && a.identity.slot == b.identity.slot &&
           a.identity.engine == b.identity.engine && a.netns == b.netns && a.port == b.port &&
           a.own_namespace == b.own_namespace;
}

}  // namespace

// One vNIC's RDMA face. Lives while the configuration has the vNIC and while a client of it is
// still being torn down (clients hold it).
struct channel_server::endpoint {
    endpoint_config spec;
    tenant_namespace ns;
    std::unique_ptr<vnic_resources> resources;
    device_context device;
    std::vector<int> listeners;
    std::size_t clients = 0;  // server thread
    // The vNIC's rdma_cm agent (with an engine only: it speaks through QP1); server thread.
    std::unique_ptr<rdmacm::cm_agent> cm;

    ~endpoint() {
        for (const int fd : listeners) {
            close(fd);
        }
    }
};

channel_server::channel_server(channel_config config)
    : _config(std::move(config)),
      _sink{[](void* self, uint64_t client, uint32_t cq) {
                static_cast<channel_server*>(self)->raise_cq_error(client, cq);
            },
            this} {
    if (_config.reserve == nullptr) {
        _config.reserve = std::make_shared<host_reserve>();
    }
}

channel_server::~channel_server() {
    stop();
}

std::string channel_server::socket_path(uint16_t slot) const {
    const std::lock_guard lock(_endpoints_mutex);
    const auto it = _endpoints.find(slot);
    return it == _endpoints.end() ? std::string() : socket_path_for(it->second->spec);
}

std::string channel_server::name_address(const std::string& vnic) const {
    return _config.endpoint_prefix + "name/" + vnic;
}

bool channel_server::serves(uint16_t slot) const {
    const std::lock_guard lock(_endpoints_mutex);
    return _endpoints.count(slot) != 0;
}

vnic_resources& channel_server::resources(uint16_t slot) {
    const std::lock_guard lock(_endpoints_mutex);
    return *_endpoints.at(slot)->resources;
}

channel_stats channel_server::stats() const {
    channel_stats s;
    s.accepted = _accepted.load(std::memory_order_relaxed);
    s.refused = _refused.load(std::memory_order_relaxed);
    s.refused_foreign = _refused_foreign.load(std::memory_order_relaxed);
    s.hello_timeouts = _hello_timeouts.load(std::memory_order_relaxed);
    s.disconnected = _disconnected.load(std::memory_order_relaxed);
    s.requests = _requests.load(std::memory_order_relaxed);
    s.bad_requests = _bad_requests.load(std::memory_order_relaxed);
    s.vnics_removed = _vnics_removed.load(std::memory_order_relaxed);
    s.cm_commands = _cm.commands.load(std::memory_order_relaxed);
    s.cm_bad_commands = _cm.bad_commands.load(std::memory_order_relaxed);
    s.cm_mads_sent = _cm.mads_sent.load(std::memory_order_relaxed);
    s.cm_mads_received = _cm.mads_received.load(std::memory_order_relaxed);
    s.cm_mads_dropped = _cm.mads_dropped.load(std::memory_order_relaxed);
    s.cm_retransmissions = _cm.retransmissions.load(std::memory_order_relaxed);
    s.cm_timeouts = _cm.timeouts.load(std::memory_order_relaxed);
    s.cm_rejected_by_policy = _cm.rejected_by_policy.load(std::memory_order_relaxed);
    s.cm_rejected_no_listener = _cm.rejected_no_listener.load(std::memory_order_relaxed);
    s.cm_mads_forged = _cm.mads_forged.load(std::memory_order_relaxed);
    return s;
}

void channel_server::publish_cm_stats() {
    rdmacm::agent_stats sum;
    {
        const std::lock_guard lock(_endpoints_mutex);
        for (const auto& [slot, ep] : _endpoints) {
            if (ep->cm == nullptr) {
                continue;
            }
            const auto& a = ep->cm->stats();
            sum.commands += a.commands;
            sum.bad_commands += a.bad_commands;
            sum.mads_sent += a.mads_sent;
            sum.mads_received += a.mads_received;
            sum.mads_dropped += a.mads_dropped;
            sum.retransmissions += a.retransmissions;
            sum.timeouts += a.timeouts;
            sum.rejected_by_policy += a.rejected_by_policy;
            sum.rejected_no_listener += a.rejected_no_listener;
            sum.mads_forged += a.mads_forged;
        }
    }
    _cm.commands.store(sum.commands, std::memory_order_relaxed);
    _cm.bad_commands.store(sum.bad_commands, std::memory_order_relaxed);
    _cm.mads_sent.store(sum.mads_sent, std::memory_order_relaxed);
    _cm.mads_received.store(sum.mads_received, std::memory_order_relaxed);
    _cm.mads_dropped.store(sum.mads_dropped, std::memory_order_relaxed);
    _cm.retransmissions.store(sum.retransmissions, std::memory_order_relaxed);
    _cm.timeouts.store(sum.timeouts, std::memory_order_relaxed);
    _cm.rejected_by_policy.store(sum.rejected_by_policy, std::memory_order_relaxed);
    _cm.rejected_no_listener.store(sum.rejected_no_listener, std::memory_order_relaxed);
    _cm.mads_forged.store(sum.mads_forged, std::memory_order_relaxed);
}

void channel_server::enable_qps(std::vector<roce::engine*> engines,
                                std::function<int(uint16_t slot, uint32_t remote_ip_be)> admit) {
    _engines = std::move(engines);
    _admit = std::move(admit);
}

roce::engine* channel_server::engine_for(const vnic_identity& v) const {
    return v.engine < _engines.size() ? _engines[v.engine] : nullptr;
}

bool channel_server::start(std::string& error, std::string& warnings) {
    raise_fd_limit(2 * expected_clients + 1024);
    _wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (_wake_fd < 0) {
        error = std::string("eventfd: ") + std::strerror(errno);
        return false;
    }
    _stopping = false;
    _thread = std::thread([this] { serve(); });
    if (!sync(_config.vnics, warnings)) {
        warnings += "\n";
    }
    return true;
}

std::shared_ptr<channel_server::endpoint> channel_server::make_endpoint(const endpoint_config& spec,
                                                                        std::string& error) {
    auto ep = std::make_shared<endpoint>();
    ep->spec = spec;
    const bool found = spec.own_namespace ? tenant_namespace::own(ep->ns, error)
                       : !spec.netns.empty()
                           ? tenant_namespace::named(spec.netns, ep->ns, error)
                           : tenant_namespace::veth_peer(spec.port, ep->ns, error);
    if (!found) {
        error = "vNIC " + spec.identity.name + ": no RDMA face: " + error;
        return nullptr;
    }
    const std::string mac_address = socket_path_for(spec);
    std::vector<std::string> addresses = {mac_address};
    if (verbs_endpoint::valid_name(spec.identity.name)) {
        addresses.push_back(name_address(spec.identity.name));
    }
    for (const auto& address : addresses) {
        const int fd = ep->ns.listen_inside(address, listen_backlog, error);
        if (fd < 0) {
            error = "vNIC " + spec.identity.name + ": " + error;
            return nullptr;
        }
        ep->listeners.push_back(fd);
    }
    ep->resources = std::make_unique<vnic_resources>(engine_limits(), _sink, spec.identity.quota,
                                                     _config.reserve);
    ep->device = {&ep->spec.identity, _config.host_name, _config.tenant_mtu, ep->resources.get()};
    if (!_engines.empty()) {
        if (engine_for(spec.identity) == nullptr) {
            error = "vNIC " + spec.identity.name + ": no RoCE engine " +
                    std::to_string(spec.identity.engine);
            return nullptr;
        }
        ep->resources->enable_qps(qp_support_for(ep->spec.identity));
        ep->cm = make_cm_agent(ep->spec.identity);
    }
    return ep;
}

std::unique_ptr<rdmacm::cm_agent> channel_server::make_cm_agent(const vnic_identity& v) {
    rdmacm::agent_identity self;
    self.slot = v.slot;
    self.ip_be = htonl(v.ip);
    self.node_guid_be = htobe64(node_guid_from_mac(v.mac));
    const uint32_t mtu = path_mtu_for(_config.tenant_mtu);
    self.path_mtu = mtu >= 4096 ? 5 : mtu >= 2048 ? 4 : mtu >= 1024 ? 3 : mtu >= 512 ? 2 : 1;
    roce::engine* engine = engine_for(v);
    const uint16_t slot = v.slot;
    const auto mac = v.mac;
    const uint32_t ip_be = self.ip_be;
    auto send = [this, engine, slot, mac, ip_be](uint32_t dst_ip_be,
                                                 const rdmacm::mad_buffer& mad) {
        if (dst_ip_be == ip_be) {
            // To ourselves (a process dialling its own vNIC): no wire involved.
            _local_mads.push_back({slot, ip_be, mad});
            return;
        }
        roce::gsi_datagram d;
        d.vnic = slot;
        d.remote_ip_be = dst_ip_be;
        d.local_mac = mac;
        d.local_ip_be = ip_be;
        d.mad = mad;
        if (engine->gsi().push_tx(d)) {
            engine->wake();
        }
    };
    rdmacm::cm_agent::admission admit;
    if (_admit) {
        auto check = _admit;
        admit = [check, slot](uint32_t remote) { return check(slot, remote); };
    }
    rdmacm::agent_limits limits;
    limits.max_channels = std::max<uint32_t>(1, v.quota.max_contexts);
    return std::make_unique<rdmacm::cm_agent>(self, std::move(send), std::move(admit), limits);
}

std::string channel_server::socket_path_for(const endpoint_config& spec) const {
    const std::string full = verbs_endpoint::by_mac(spec.identity.mac.data());
    return _config.endpoint_prefix + full.substr(verbs_endpoint::prefix.size());
}

qp_support channel_server::qp_support_for(const vnic_identity& v) {
    qp_support support;
    support.engine = engine_for(v);
    support.local.vnic = v.slot;
    support.local.mac = v.mac;
    support.local.ip_be = htonl(v.ip);
    support.events = {[](void* self, uint64_t client, uint32_t type, uint32_t qp) {
                          static_cast<channel_server*>(self)->raise_event(
                              client, static_cast<proto_event_type>(type), qp);
                      },
                      this};
    const uint32_t path_mtu = path_mtu_for(_config.tenant_mtu);
    support.limits.max_mtu = path_mtu >= 4096   ? IBV_MTU_4096
                             : path_mtu >= 2048 ? IBV_MTU_2048
                             : path_mtu >= 1024 ? IBV_MTU_1024
                             : path_mtu >= 512  ? IBV_MTU_512
                                                : IBV_MTU_256;
    if (_admit) {
        const uint16_t slot = v.slot;
        auto admit = _admit;
        support.admit = [admit, slot](uint32_t remote) { return admit(slot, remote); };
    }
    return support;
}

bool channel_server::sync(const std::vector<endpoint_config>& vnics, std::string& error) {
    std::map<uint16_t, std::shared_ptr<endpoint>> current;
    {
        const std::lock_guard lock(_endpoints_mutex);
        current = _endpoints;
    }
    // Removals first, so that a vNIC that moved (new slot, namespace or MAC) frees its names
    // before they are bound again.
    for (const auto& [slot, ep] : current) {
        // Named captures: C++20 lets a lambda capture a structured binding, clang 14 (clang-tidy's
        // front end here) does not.
        const bool wanted = std::any_of(
            vnics.begin(), vnics.end(), [&, slot = slot, &spec = ep->spec](const auto& v) {
                return v.identity.slot == slot && same_endpoint(v, spec);
            });
        if (!wanted) {
            withdraw(slot);
        }
    }
    std::string errors;
    for (const auto& v : vnics) {
        std::string why;
        if (!serve(v, why)) {
            errors += (errors.empty() ? "" : "; ") + why;
        }
    }
    if (!errors.empty()) {
        error = errors;
        return false;
    }
    return true;
}

bool channel_server::serve(const endpoint_config& vnic, std::string& error) {
    std::shared_ptr<endpoint> current;
    {
        const std::lock_guard lock(_endpoints_mutex);
        const auto it = _endpoints.find(vnic.identity.slot);
        if (it != _endpoints.end()) {
            current = it->second;
        }
    }
    if (current != nullptr && same_endpoint(vnic, current->spec)) {
        // Limits change in place: lowering one refuses new objects, existing ones stay.
        current->resources->set_quota(vnic.identity.quota);
        return true;
    }
    if (current != nullptr) {
        withdraw(vnic.identity.slot);  // moved: its old names go before the new ones are bound
    }
    auto ep = make_endpoint(vnic, error);
    if (ep == nullptr) {
        return false;
    }
    std::vector<change> add;
    add.push_back({std::move(ep), 0, false});
    post(std::move(add));
    return true;
}

void channel_server::withdraw(uint16_t slot) {
    post({{nullptr, slot, true}});
}

void channel_server::post(std::vector<change> changes) {
    std::unique_lock lock(_adopt_mutex);
    if (!_thread.joinable() || _stopping) {
        // Not serving: nothing to tear down, and nobody to hand new endpoints to.
        lock.unlock();
        const std::lock_guard endpoints_lock(_endpoints_mutex);
        for (auto& c : changes) {
            if (c.remove) {
                _endpoints.erase(c.remove_slot);
            }
        }
        return;
    }
    for (auto& c : changes) {
        _changes.push_back(std::move(c));
    }
    const uint64_t ticket = ++_changes_posted;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(_wake_fd, &one, sizeof(one));
    _changes_applied.wait_for(lock, change_timeout, [&] { return _changes_done >= ticket; });
}

void channel_server::apply_changes() {
    std::vector<change> changes;
    uint64_t ticket = 0;
    {
        const std::lock_guard lock(_adopt_mutex);
        changes.swap(_changes);
        ticket = _changes_posted;
    }
    for (auto& c : changes) {
        if (!c.remove) {
            const std::lock_guard lock(_endpoints_mutex);
            _endpoints[c.add->spec.identity.slot] = std::move(c.add);
            continue;
        }
        std::shared_ptr<endpoint> gone;
        {
            const std::lock_guard lock(_endpoints_mutex);
            const auto it = _endpoints.find(c.remove_slot);
            if (it == _endpoints.end()) {
                continue;
            }
            gone = std::move(it->second);
            _endpoints.erase(it);
        }
        // Its clients learn the device is gone, and everything they created goes: QPs leave
        // the engine (their peers see the connection end), MRs are unmapped.
        std::size_t kept = 0;
        for (std::size_t i = 0; i < _clients.size(); ++i) {
            if (_clients[i].ep == gone) {
                drop_client(_clients[i], true);
            } else if (kept++ != i) {
                _clients[kept - 1] = std::move(_clients[i]);
            }
        }
        _clients.resize(kept);
        _client_count.store(_clients.size(), std::memory_order_relaxed);
        _vnics_removed.fetch_add(1, std::memory_order_relaxed);
        // Its names are free from here on, even while serve() still holds a reference for
        // this turn: sync() may bind them again (the vNIC moved) as soon as this returns.
        for (const int fd : gone->listeners) {
            close(fd);
        }
        gone->listeners.clear();
        // And its objects go now, before sync() returns: a vNIC re-added in the same slot must
        // not find the old QPs (same handles) in the engine or the old doorbell installed.
        gone->device.resources = nullptr;
        gone->resources.reset();
    }
    {
        const std::lock_guard lock(_adopt_mutex);
        _changes_done = ticket;
    }
    _changes_applied.notify_all();
}

void channel_server::stop() {
    if (_thread.joinable()) {
        _stopping = true;
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = write(_wake_fd, &one, sizeof(one));
        _thread.join();
    }
    {
        const std::lock_guard lock(_endpoints_mutex);
        _endpoints.clear();
    }
    if (_wake_fd >= 0) {
        close(_wake_fd);
        _wake_fd = -1;
    }
    const std::lock_guard lock(_adopt_mutex);
    for (auto& [fd, slot] : _adopted) {
        close(fd);
    }
    _adopted.clear();
    _changes.clear();
    _changes_done = _changes_posted;
    _changes_applied.notify_all();
}

bool channel_server::adopt(int fd, uint16_t slot) {
    if (!_thread.joinable() || _stopping || !serves(slot)) {
        close(fd);
        return false;
    }
    {
        const std::lock_guard lock(_adopt_mutex);
        _adopted.emplace_back(fd, slot);
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(_wake_fd, &one, sizeof(one));
    return true;
}

void channel_server::take_adopted() {
    std::vector<std::pair<int, uint16_t>> adopted;
    {
        const std::lock_guard lock(_adopt_mutex);
        adopted.swap(_adopted);
    }
    for (auto& [fd, slot] : adopted) {
        std::shared_ptr<endpoint> ep;
        {
            const std::lock_guard lock(_endpoints_mutex);
            const auto it = _endpoints.find(slot);
            if (it != _endpoints.end()) {
                ep = it->second;
            }
        }
        if (ep == nullptr) {
            close(fd);
            continue;
        }
        add_client(fd, getpid(), ep);
    }
}

void channel_server::raise_cq_error(uint64_t client, uint32_t cq_handle) {
    raise_event(client, proto::event_type::cq_err, cq_handle);
}

void channel_server::raise_event(uint64_t client, proto::event_type type, uint64_t handle) {
    {
        const std::lock_guard lock(_adopt_mutex);
        _pending_events.push_back({client, type, handle});
    }
    if (_wake_fd >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = write(_wake_fd, &one, sizeof(one));
    }
}

void channel_server::send_pending_events() {
    std::vector<pending_event> events;
    {
        const std::lock_guard lock(_adopt_mutex);
        events.swap(_pending_events);
    }
    for (const auto& e : events) {
        for (const auto& c : _clients) {
            if (c.s.client_id != e.client || c.async_fd < 0) {
                continue;
            }
            auto m = proto::make_message<proto::async_event_message>(
                static_cast<uint16_t>(proto::opcode::async_event), 0);
            m.type = static_cast<uint32_t>(e.type);
            m.port_num = 0;
            m.handle = e.handle;
            send_with_fd(c.async_fd, &m, sizeof(m), -1);
        }
    }
}

void channel_server::add_client(int fd, pid_t pid, const std::shared_ptr<endpoint>& ep) {
    if (ep->clients >= ep->resources->quota().max_contexts) {
        _refused.fetch_add(1, std::memory_order_relaxed);
        close(fd);
        return;
    }
    client c;
    // Its descriptors, from the host reserve: refused only when the vNIC is over its share of
    // a host whose descriptors are all taken (counted in the vNIC's account).
    if (!charge(ep->resources->account(), host_resource::descriptors, descriptors_per_context,
                c.descriptors)) {
        close(fd);
        return;
    }
    c.fd = fd;
    c.pid = pid;
    c.ep = ep;
    c.hello_deadline = std::chrono::steady_clock::now() + _config.hello_timeout;
    c.s.client_id = ++_next_client_id;
    ++ep->clients;
    _clients.push_back(std::move(c));
    _accepted.fetch_add(1, std::memory_order_relaxed);
    _client_count.store(_clients.size(), std::memory_order_relaxed);
}

bool channel_server::accept_clients(endpoint& ep, int listener) {
    for (;;) {
        const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            // EAGAIN: all taken. Out of descriptors or memory: the caller backs off.
            return !(errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM);
        }
        ucred cred{};
        socklen_t len = sizeof(cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
            !ep.ns.holds_process(cred.pid)) {
            _refused_foreign.fetch_add(1, std::memory_order_relaxed);
            close(fd);
            continue;
        }
        std::shared_ptr<endpoint> self;
        {
            const std::lock_guard lock(_endpoints_mutex);
            const auto it = _endpoints.find(ep.spec.identity.slot);
            if (it != _endpoints.end() && it->second.get() == &ep) {
                self = it->second;
            }
        }
        if (self == nullptr) {
            close(fd);
            return true;
        }
        add_client(fd, cred.pid, self);
    }
}

bool channel_server::serve_client(client& c) {
    // One byte more than the largest message, so an oversized one is seen as such.
    alignas(8) std::array<std::byte, proto::max_message_size + 1> buffer;
    iovec iov{buffer.data(), buffer.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * proto::max_fds_per_message)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(c.fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
        return errno == EAGAIN || errno == EINTR;
    }
    if (n == 0) {
        return false;  // the client closed its context or exited
    }
    // Descriptors that came with the request: the handler keeps the ones it asked for and
    // the rest are closed below, so nobody can make jakirod hoard files. (More than
    // max_fds_per_message were already dropped by the kernel: MSG_CTRUNC.)
    std::array<int, proto::max_fds_per_message> fds;
    std::size_t fd_count = 0;
    for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) {
            const std::size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (std::size_t i = 0; i < count; ++i) {
                int fd;
                std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
                if (fd_count < fds.size()) {
                    fds[fd_count++] = fd;
                } else {
                    close(fd);
                }
            }
        }
    }
    _requests.fetch_add(1, std::memory_order_relaxed);
    // Until HELLO, the peer must still be in the vNIC's namespace: a process that connected
    // and then left it (setns) does not take the vNIC along.
    if (!c.s.hello_done && !c.ep->ns.holds_process(c.pid)) {
        for (std::size_t i = 0; i < fd_count; ++i) {
            close(fds[i]);
        }
        _refused_foreign.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    const bool truncated = (msg.msg_flags & MSG_TRUNC) != 0;
    cm_proto::header cm_hdr{};
    if (c.s.hello_done && static_cast<std::size_t>(n) >= sizeof(cm_hdr)) {
        std::memcpy(&cm_hdr, buffer.data(), sizeof(cm_hdr));
    }
    if (cm_hdr.magic == cm_proto::magic) {
        const bool keep =
            serve_cm(c, std::span<const std::byte>(buffer.data(), static_cast<std::size_t>(n)),
                     truncated, std::span<const int>(fds.data(), fd_count));
        for (std::size_t i = 0; i < fd_count; ++i) {
            close(fds[i]);  // MIGRATE_ID's proof, read and done with; nothing else carries any
        }
        return keep;
    }
    auto out =
        handle_request(std::span<const std::byte>(buffer.data(), static_cast<std::size_t>(n)),
                       truncated, std::span<int>(fds.data(), fd_count), c.s, c.ep->device);
    for (std::size_t i = 0; i < fd_count; ++i) {
        if (fds[i] >= 0) {
            close(fds[i]);
        }
    }
    if (out.error != proto::parse_error::none) {
        _bad_requests.fetch_add(1, std::memory_order_relaxed);
    }
    if (out.what == outcome::action::drop) {
        return false;
    }
    int passed = out.reply_fd;  // e.g. a CQ ring; ours to close once sent
    if (out.with_async_channel) {
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
            const int error = errno;
            // Out of descriptors: say so instead of a HELLO the shim could not use.
            proto::header hello{};
            std::memcpy(&hello, out.reply.data(), sizeof(hello));
            auto r = proto::make_message<proto::reply_header>(hello.opcode, hello.request_id);
            r.status = error;
            std::memcpy(out.reply.data(), &r, sizeof(r));
            out.reply_size = sizeof(r);
            c.s.hello_done = false;
        } else {
            c.async_fd = pair[0];
            passed = pair[1];
            // Our end only: events are never worth blocking the server for, while the
            // shim's end stays blocking for ibv_get_async_event().
            fcntl(c.async_fd, F_SETFL, fcntl(c.async_fd, F_GETFL) | O_NONBLOCK);
        }
    }
    bool sent = false;
    if (out.reply_fd2 >= 0) {
        const int both[2] = {passed, out.reply_fd2};
        sent = proto::send_with_fds(c.fd, out.reply.data(), out.reply_size, both,
                                    MSG_NOSIGNAL | MSG_DONTWAIT) ==
               static_cast<ssize_t>(out.reply_size);
        close(out.reply_fd2);
    } else {
        sent = send_with_fd(c.fd, out.reply.data(), out.reply_size, passed);
    }
    // A reply that could not be sent (the client left, or does not read) is lost, and the
    // client is dropped below: whatever the request created goes with it (drop_client).
    if (passed >= 0) {
        close(passed);  // the client has its own copy now (or never will)
    }
    return sent && out.what == outcome::action::reply;
}

uint64_t channel_server::channel_held_by(const client& c, std::span<const int> fds) const {
    uint64_t cookie = 0;
    socklen_t len = sizeof(cookie);
    if (fds.size() != 1 || getsockopt(fds[0], SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0 ||
        len != sizeof(cookie) || cookie == 0) {
        return 0;
    }
    for (const auto& other : _clients) {
        if (other.ep == c.ep && other.cm_channel_cookie == cookie) {
            return other.s.client_id;
        }
    }
    return 0;
}

bool channel_server::serve_cm(client& c, std::span<const std::byte> message, bool truncated,
                              std::span<const int> fds) {
    cm_proto::header hdr;
    std::memcpy(&hdr, message.data(), sizeof(hdr));
    std::array<std::byte, cm_proto::max_message_size> reply{};
    cm_proto::ucma_reply r{};
    r.r.hdr = hdr;
    r.r.hdr.opcode = static_cast<uint16_t>(hdr.opcode | cm_proto::reply_flag);
    std::size_t reply_size = sizeof(cm_proto::reply_header);
    int passed = -1;
    auto fail = [&](int error) {
        _bad_requests.fetch_add(1, std::memory_order_relaxed);
        r.r.status = error;
        reply_size = sizeof(cm_proto::reply_header);
    };
    rdmacm::cm_agent* cm = c.ep->cm.get();
    if (hdr.version != cm_proto::version) {
        fail(EPROTONOSUPPORT);
    } else if (truncated || message.size() > cm_proto::max_message_size) {
        fail(EMSGSIZE);
    } else if (hdr.length != message.size()) {
        fail(EBADMSG);
    } else if (cm == nullptr) {
        fail(EOPNOTSUPP);  // no engine: no QP1 to speak CM through
    } else if (hdr.opcode == static_cast<uint16_t>(cm_proto::opcode::open_channel)) {
        int pair[2];
        if (message.size() != sizeof(cm_proto::header)) {
            fail(EBADMSG);
        } else if (c.cm_event_fd >= 0) {
            fail(EBUSY);  // one channel per connection
        } else if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
            fail(errno);
        } else {
            fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK);
            // The tenant's end is the channel: whoever shows it later (MIGRATE_ID) holds it.
            uint64_t cookie = 0;
            socklen_t len = sizeof(cookie);
            if (getsockopt(pair[1], SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0 ||
                !cm->open_channel(c.s.client_id, pair[0])) {
                close(pair[0]);
                close(pair[1]);
                fail(EMFILE);
            } else {
                c.cm_event_fd = pair[0];
                c.cm_channel_cookie = cookie;
                passed = pair[1];
                cm_proto::open_channel_reply o{};
                o.r = r.r;
                std::memcpy(reply.data(), &o, sizeof(o));
                reply_size = sizeof(o);
            }
        }
    } else if (hdr.opcode == static_cast<uint16_t>(cm_proto::opcode::ucma)) {
        cm_proto::ucma_request q{};
        if (message.size() < sizeof(q)) {
            fail(EBADMSG);
        } else {
            std::memcpy(&q, message.data(), sizeof(q));
            const auto bytes = std::span<const uint8_t>(
                reinterpret_cast<const uint8_t*>(message.data()), message.size());
            if (q.command_bytes > cm_proto::max_command_bytes ||
                q.option_bytes > cm_proto::max_option_bytes ||
                sizeof(q) + q.command_bytes + q.option_bytes != message.size()) {
                fail(EBADMSG);
            } else if (!cm->has_channel(c.s.client_id)) {
                fail(EPROTO);  // open_channel first
            } else {
                std::vector<uint8_t> response;
                const int rc =
                    cm->command(c.s.client_id, bytes.subspan(sizeof(q), q.command_bytes),
                                bytes.subspan(sizeof(q) + q.command_bytes, q.option_bytes),
                                response, channel_held_by(c, fds));
                if (rc != 0 || sizeof(r) + response.size() > reply.size()) {
                    fail(rc != 0 ? rc : EMSGSIZE);
                } else {
                    r.response_bytes = static_cast<uint32_t>(response.size());
                    reply_size = sizeof(r) + response.size();
                    std::memcpy(reply.data() + sizeof(r), response.data(), response.size());
                }
            }
        }
    } else {
        fail(EOPNOTSUPP);
    }
    if (passed < 0) {
        // Everything but a successful open_channel (already in place) replies with `r`: the
        // reply header alone on failure, the ucma response after it on success.
        r.r.hdr.length = static_cast<uint32_t>(reply_size);
        std::memcpy(reply.data(), &r, std::min(reply_size, sizeof(r)));
    } else {
        cm_proto::open_channel_reply o;
        std::memcpy(&o, reply.data(), sizeof(o));
        o.r.hdr.length = sizeof(o);
        std::memcpy(reply.data(), &o, sizeof(o));
    }
    const bool sent = send_with_fd(c.fd, reply.data(), reply_size, passed);
    if (passed >= 0) {
        close(passed);
    }
    return sent;
}

void channel_server::serve_gsi() {
    if (_engines.empty()) {
        return;
    }
    auto deliver = [this](uint16_t slot, uint32_t from, std::span<const uint8_t> mad) {
        const std::lock_guard lock(_endpoints_mutex);
        const auto it = _endpoints.find(slot);
        if (it != _endpoints.end() && it->second->cm != nullptr) {
            it->second->cm->on_mad(from, mad);
        }
    };
    for (roce::engine* engine : _engines) {
        for (const auto& d : engine->gsi().take_rx()) {
            deliver(d.vnic, d.remote_ip_be, d.mad);
        }
    }
    // Replies to ourselves may queue more: bounded rounds.
    for (int round = 0; round < 8 && !_local_mads.empty(); ++round) {
        auto local = std::move(_local_mads);
        _local_mads.clear();
        for (const auto& m : local) {
            deliver(m.slot, m.from_ip_be, m.mad);
        }
    }
    const auto now = std::chrono::steady_clock::now();
    const std::lock_guard lock(_endpoints_mutex);
    for (auto& [slot, ep] : _endpoints) {
        if (ep->cm != nullptr && ep->cm->next_deadline() <= now) {
            ep->cm->run_timers(now);
        }
    }
}

void channel_server::drop_client(client& c, bool device_gone) {
    if (c.ep->cm != nullptr) {
        c.ep->cm->close_channel(c.s.client_id);
    }
    if (c.cm_event_fd >= 0) {
        close(c.cm_event_fd);
        c.cm_event_fd = -1;
    }
    if (c.async_fd >= 0) {
        if (device_gone) {
            auto event = proto::make_message<proto::async_event_message>(
                static_cast<uint16_t>(proto::opcode::async_event), 0);
            event.type = static_cast<uint32_t>(proto::event_type::device_fatal);
            event.port_num = 1;
            send_with_fd(c.async_fd, &event, sizeof(event), -1);
        }
        close(c.async_fd);
        c.async_fd = -1;
    }
    // Everything the client created goes with it (PDs, MRs, CQs, QPs and their RCFT entries):
    // a process that dies leaves nothing behind.
    c.ep->resources->release_client(c.s.client_id);
    --c.ep->clients;
    close(c.fd);
    c.fd = -1;
    c.descriptors.reset();
    c.ep.reset();
    _disconnected.fetch_add(1, std::memory_order_relaxed);
}

int channel_server::poll_timeout_ms(bool listen_now) const {
    auto soonest = std::chrono::steady_clock::time_point::max();
    for (const auto& c : _clients) {
        if (!c.s.hello_done) {
            soonest = std::min(soonest, c.hello_deadline);
        }
    }
    {
        const std::lock_guard lock(_endpoints_mutex);
        for (const auto& [slot, ep] : _endpoints) {
            if (ep->cm != nullptr) {
                soonest = std::min(soonest, ep->cm->next_deadline());
            }
        }
        if (!_local_mads.empty()) {
            soonest = std::chrono::steady_clock::now();
        }
    }
    int timeout = listen_now ? -1 : accept_backoff_ms;
    if (soonest != std::chrono::steady_clock::time_point::max()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              soonest - std::chrono::steady_clock::now())
                              .count();
        const int ms = static_cast<int>(std::clamp<int64_t>(left + 1, 0, 60000));
        timeout = timeout < 0 ? ms : std::min(timeout, ms);
    }
    return timeout;
}

void channel_server::serve() {
    std::vector<pollfd> fds;
    std::vector<std::pair<std::shared_ptr<endpoint>, int>> listening;
    auto listeners_resume = std::chrono::steady_clock::time_point{};
    while (!_stopping.load(std::memory_order_acquire)) {
        const bool listen_now = std::chrono::steady_clock::now() >= listeners_resume;
        listening.clear();
        {
            const std::lock_guard lock(_endpoints_mutex);
            for (const auto& [slot, ep] : _endpoints) {
                for (const int fd : ep->listeners) {
                    listening.emplace_back(ep, fd);
                }
            }
        }
        fds.clear();
        fds.push_back({_wake_fd, POLLIN, 0});
        const std::size_t first_gsi = fds.size();
        for (roce::engine* engine : _engines) {
            fds.push_back({engine->gsi().rx_notify_fd(), POLLIN, 0});
        }
        const std::size_t first_listener = fds.size();
        for (const auto& [ep, fd] : listening) {
            fds.push_back({listen_now ? fd : -1, POLLIN, 0});
        }
        for (const auto& c : _clients) {
            fds.push_back({c.fd, POLLIN, 0});
        }
        const int ready = poll(fds.data(), fds.size(), poll_timeout_ms(listen_now));
        if (ready < 0) {
            if (errno == EINTR) {
                continue;
            }
            std::cerr << "jakirod: verbs: poll: " << std::strerror(errno) << "\n";
            break;
        }
        if (_stopping.load(std::memory_order_acquire)) {
            break;
        }
        // Clients first: their indices in `fds` are only valid until the vector changes.
        for (std::size_t i = first_gsi; i < first_listener; ++i) {
            if (fds[i].revents != 0) {
                uint64_t count;
                [[maybe_unused]] const ssize_t n = read(fds[i].fd, &count, sizeof(count));
            }
        }
        serve_gsi();
        const std::size_t first_client = first_listener + listening.size();
        const auto now = std::chrono::steady_clock::now();
        const std::size_t served = _clients.size();
        std::vector<bool> keep(served, true);
        for (std::size_t i = 0; i < served; ++i) {
            if (fds[first_client + i].revents != 0) {
                keep[i] = serve_client(_clients[i]);
            }
            if (keep[i] && !_clients[i].s.hello_done && now >= _clients[i].hello_deadline) {
                _hello_timeouts.fetch_add(1, std::memory_order_relaxed);
                keep[i] = false;
            }
        }
        std::size_t kept = 0;
        for (std::size_t i = 0; i < served; ++i) {
            if (!keep[i]) {
                drop_client(_clients[i], false);
            } else if (kept++ != i) {
                _clients[kept - 1] = std::move(_clients[i]);
            }
        }
        _clients.resize(kept);
        _client_count.store(_clients.size(), std::memory_order_relaxed);

        for (std::size_t i = 0; i < listening.size(); ++i) {
            if (fds[first_listener + i].revents != 0 &&
                !accept_clients(*listening[i].first, listening[i].second)) {
                listeners_resume =
                    std::chrono::steady_clock::now() + std::chrono::milliseconds(accept_backoff_ms);
            }
        }
        if (fds[0].revents != 0) {
            uint64_t count;
            [[maybe_unused]] const ssize_t n = read(_wake_fd, &count, sizeof(count));
            apply_changes();
            take_adopted();
            send_pending_events();
        }
        publish_cm_stats();
    }
    for (auto& c : _clients) {
        drop_client(c, true);
    }
    _clients.clear();
    _client_count.store(0, std::memory_order_relaxed);
}

}  // namespace jakiro::verbs
