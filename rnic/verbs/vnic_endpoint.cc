#include "vnic_endpoint.hh"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "rnic/engine.hh"
#include "verbs_abi/cm_protocol.hh"
#include "verbs_abi/fd_passing.hh"

namespace jakiro::verbs {

namespace {

namespace proto = verbs_proto;

// How long the listeners rest after accept() ran out of descriptors: the pending connection
// stays queued and would otherwise wake poll() in a busy loop.
constexpr int accept_backoff_ms = 100;
// Replies to ourselves may queue more: this many rounds per turn, the rest on the next.
constexpr int local_mad_rounds = 8;

bool send_with_fd(int fd, const void* data, std::size_t size, int passed_fd) {
    // Never block on a client that does not read, never die of SIGPIPE for one that left.
    return proto::send_with_fd(fd, data, size, passed_fd, MSG_NOSIGNAL | MSG_DONTWAIT) ==
           static_cast<ssize_t>(size);
}

void wake(int fd) {
    if (fd >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = write(fd, &one, sizeof(one));
    }
}

rdmacm::agent_limits cm_limits_of(const vnic_quota& q) {
    rdmacm::agent_limits limits;
    limits.max_ids = q.max_cm_ids;
    limits.max_channels = std::max<uint32_t>(1, q.max_contexts);
    limits.max_backlog = q.max_cm_backlog;
    limits.max_held_reqs = q.max_cm_held_reqs;
    return limits;
}

}  // namespace

vnic_endpoint::vnic_endpoint(parts p, settings s)
    : _spec(std::move(p.spec)),
      _ns(std::move(p.ns)),
      _listeners(std::move(p.listeners)),
      _resources(std::move(p.resources)),
      _engine(p.engine),
      _settings(std::move(s)),
      _quota(_spec.identity.quota) {
    _device = {&_spec.identity, _settings.host_name, _settings.tenant_mtu, _resources.get()};
    if (_engine != nullptr) {
        make_cm_agent(std::move(p.admit));
    }
}

vnic_endpoint::~vnic_endpoint() {
    stop();
}

void vnic_endpoint::make_cm_agent(std::function<int(uint32_t)> admit) {
    const vnic_identity& v = _spec.identity;
    rdmacm::agent_identity self;
    self.slot = v.slot;
    self.ip_be = htonl(v.ip);
    self.node_guid_be = htobe64(node_guid_from_mac(v.mac));
    const uint32_t mtu = path_mtu_for(_settings.tenant_mtu);
    self.path_mtu = mtu >= 4096 ? 5 : mtu >= 2048 ? 4 : mtu >= 1024 ? 3 : mtu >= 512 ? 2 : 1;
    roce::engine* engine = _engine;
    const uint16_t slot = v.slot;
    const auto mac = v.mac;
    const uint32_t ip_be = self.ip_be;
    auto send = [this, engine, slot, mac, ip_be](uint32_t dst_ip_be,
                                                 const rdmacm::mad_buffer& mad) {
        if (dst_ip_be == ip_be) {
            // To ourselves (a process dialling its own vNIC): no wire involved.
            _local_mads.push_back({ip_be, mad});
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
    _cm = std::make_unique<rdmacm::cm_agent>(self, std::move(send), std::move(admit),
                                             cm_limits_of(v.quota));
}

bool vnic_endpoint::start(std::string& error) {
    _wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (_wake_fd < 0) {
        error = "vNIC " + _spec.identity.name + ": eventfd: " + std::strerror(errno);
        return false;
    }
    if (_engine != nullptr) {
        // MADs for the vNIC wake its thread as any other news does.
        _engine->gsi().open(_spec.identity.slot, _quota.max_qp1_queue, _wake_fd);
        _qp1_open = true;
    }
    launch();
    return true;
}

void vnic_endpoint::launch() {
    _stopping = false;
    _freezing = false;
    _thread = std::thread([this] {
        // "jk-verbs-<vnic>" in top and /proc/PID/task (15 characters at most).
        const std::string name = ("jk-verbs-" + _spec.identity.name).substr(0, 15);
        pthread_setname_np(pthread_self(), name.c_str());
        serve();
    });
}

void vnic_endpoint::stop() {
    if (_thread.joinable()) {
        _stopping = true;
        wake(_wake_fd);
        _thread.join();
    }
    if (_frozen) {
        // Nobody serves them any more: they learn the device is gone, as from a running one.
        drop_all_clients();
        _frozen = false;
    }
    close_image_fds();
    // Its names are free from here on: the vNIC may be bound again (it moved) at once.
    for (const int fd : _listeners) {
        close(fd);
    }
    _listeners.clear();
    {
        const std::lock_guard lock(_mutex);
        for (const int fd : _adopted) {
            close(fd);
        }
        _adopted.clear();
        _events.clear();
    }
    // Everything the clients created goes now, before the owner moves on: a vNIC served again
    // in the same slot must not find the old QPs (same handles) in the engine, nor the old
    // doorbell installed, nor the old agent's MADs in QP1's queues.
    _cm.reset();
    if (_engine != nullptr && _qp1_open) {
        _engine->gsi().close(_spec.identity.slot);  // before _wake_fd closes: it writes it
        _qp1_open = false;
    }
    _device.resources = nullptr;
    _resources.reset();
    if (_wake_fd >= 0) {
        close(_wake_fd);
        _wake_fd = -1;
    }
}

void vnic_endpoint::set_quota(const vnic_quota& quota) {
    {
        const std::lock_guard lock(_mutex);
        _quota = quota;
    }
    if (_resources != nullptr) {
        _resources->set_quota(quota);
    }
    if (_engine != nullptr) {
        _engine->gsi().set_limit(_spec.identity.slot, quota.max_qp1_queue);
    }
    {
        const std::lock_guard lock(_mutex);
        _new_quota = quota;
    }
    wake(_wake_fd);
}

void vnic_endpoint::adopt(int fd) {
    {
        const std::lock_guard lock(_mutex);
        _adopted.push_back(fd);
    }
    wake(_wake_fd);
}

void vnic_endpoint::post_event(uint64_t client, event_type type, uint64_t handle) {
    {
        const std::lock_guard lock(_mutex);
        _events.push_back({client, type, handle});
    }
    wake(_wake_fd);
}

endpoint_report vnic_endpoint::report() const {
    endpoint_report r;
    r.slot = _spec.identity.slot;
    r.name = _spec.identity.name;
    r.clients = client_count();
    r.counters.accepted = _counters.accepted.load(std::memory_order_relaxed);
    r.counters.refused = _counters.refused.load(std::memory_order_relaxed);
    r.counters.refused_foreign = _counters.refused_foreign.load(std::memory_order_relaxed);
    r.counters.hello_timeouts = _counters.hello_timeouts.load(std::memory_order_relaxed);
    r.counters.disconnected = _counters.disconnected.load(std::memory_order_relaxed);
    r.counters.requests = _counters.requests.load(std::memory_order_relaxed);
    r.counters.bad_requests = _counters.bad_requests.load(std::memory_order_relaxed);
    if (_engine != nullptr) {
        r.qp1 = _engine->gsi().counters(_spec.identity.slot);
    }
    {
        // Never the resources' mutex here: a verb may hold it for as long as the worker makes
        // it wait, and reports are read under the channel server's lock.
        const std::lock_guard lock(_mutex);
        r.cm = _cm_snapshot;
        r.cm_ids = _cm_ids;
        r.quota = _quota;
    }
    return r;
}

void vnic_endpoint::publish() {
    if (_cm == nullptr) {
        return;
    }
    const std::lock_guard lock(_mutex);
    _cm_snapshot = _cm->stats();
    _cm_ids = _cm->id_count();
}

void vnic_endpoint::take_posted() {
    std::vector<int> adopted;
    std::vector<pending_event> events;
    std::optional<vnic_quota> quota;
    {
        const std::lock_guard lock(_mutex);
        adopted.swap(_adopted);
        events.swap(_events);
        quota.swap(_new_quota);
    }
    if (quota && _cm != nullptr) {
        _cm->set_limits(cm_limits_of(*quota));
    }
    for (const int fd : adopted) {
        add_client(fd, getpid());
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

void vnic_endpoint::add_client(int fd, pid_t pid) {
    if (_clients.size() >= _resources->quota().max_contexts) {
        _counters.refused.fetch_add(1, std::memory_order_relaxed);
        close(fd);
        return;
    }
    client c;
    // Its descriptors, from the host reserve: refused only when the vNIC is over its share of
    // a host whose descriptors are all taken (counted in the vNIC's account).
    if (!charge(_resources->account(), host_resource::descriptors, descriptors_per_context,
                c.descriptors)) {
        close(fd);
        return;
    }
    c.fd = fd;
    c.pid = pid;
    c.hello_deadline = std::chrono::steady_clock::now() + _settings.hello_timeout;
    const uint64_t serial = _settings.client_ids->fetch_add(1, std::memory_order_relaxed) + 1;
    c.s.client_id = (uint64_t{_spec.identity.slot} << 48) | (serial & ((uint64_t{1} << 48) - 1));
    _clients.push_back(std::move(c));
    _counters.accepted.fetch_add(1, std::memory_order_relaxed);
    _client_count.store(_clients.size(), std::memory_order_relaxed);
}

bool vnic_endpoint::accept_clients(int listener) {
    for (;;) {
        const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            // EAGAIN: all taken. Out of descriptors or memory: the caller backs off.
            return !(errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM);
        }
        ucred cred{};
        socklen_t len = sizeof(cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
            !_ns.holds_process(cred.pid)) {
            _counters.refused_foreign.fetch_add(1, std::memory_order_relaxed);
            close(fd);
            continue;
        }
        add_client(fd, cred.pid);
    }
}

bool vnic_endpoint::serve_client(client& c) {
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
    _counters.requests.fetch_add(1, std::memory_order_relaxed);
    // Until HELLO, the peer must still be in the vNIC's namespace: a process that connected
    // and then left it (setns) does not take the vNIC along.
    if (!c.s.hello_done && !_ns.holds_process(c.pid)) {
        for (std::size_t i = 0; i < fd_count; ++i) {
            close(fds[i]);
        }
        _counters.refused_foreign.fetch_add(1, std::memory_order_relaxed);
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
                       truncated, std::span<int>(fds.data(), fd_count), c.s, _device);
    for (std::size_t i = 0; i < fd_count; ++i) {
        if (fds[i] >= 0) {
            close(fds[i]);
        }
    }
    if (out.error != proto::parse_error::none) {
        _counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
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

uint64_t vnic_endpoint::channel_held_by(std::span<const int> fds) const {
    uint64_t cookie = 0;
    socklen_t len = sizeof(cookie);
    if (fds.size() != 1 || getsockopt(fds[0], SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0 ||
        len != sizeof(cookie) || cookie == 0) {
        return 0;
    }
    for (const auto& other : _clients) {
        if (other.cm_channel_cookie == cookie) {
            return other.s.client_id;
        }
    }
    return 0;
}

bool vnic_endpoint::serve_cm(client& c, std::span<const std::byte> message, bool truncated,
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
        _counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
        r.r.status = error;
        reply_size = sizeof(cm_proto::reply_header);
    };
    rdmacm::cm_agent* cm = _cm.get();
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
                                response, channel_held_by(fds));
                if (rc != 0 || sizeof(r) + response.size() > reply.size()) {
                    fail(rc != 0 ? rc : EMSGSIZE);
                } else {
                    r.response_bytes = static_cast<uint32_t>(response.size());
                    reply_size = sizeof(r) + response.size();
                    if (!response.empty()) {
                        std::memcpy(reply.data() + sizeof(r), response.data(), response.size());
                    }
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
    publish();  // before the reply: what a client was answered, the report says already
    const bool sent = send_with_fd(c.fd, reply.data(), reply_size, passed);
    if (passed >= 0) {
        close(passed);
    }
    return sent;
}

void vnic_endpoint::serve_gsi() {
    if (_cm == nullptr) {
        return;
    }
    for (const auto& d : _engine->gsi().take_rx(_spec.identity.slot)) {
        _cm->on_mad(d.remote_ip_be, d.mad);
    }
    for (int round = 0; round < local_mad_rounds && !_local_mads.empty(); ++round) {
        auto local = std::move(_local_mads);
        _local_mads.clear();
        for (const auto& m : local) {
            _cm->on_mad(m.from_ip_be, m.mad);
        }
    }
    const auto now = std::chrono::steady_clock::now();
    if (_cm->next_deadline() <= now) {
        _cm->run_timers(now);
    }
}

void vnic_endpoint::drop_client(client& c, bool device_gone) {
    if (_cm != nullptr) {
        _cm->close_channel(c.s.client_id);
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
    _resources->release_client(c.s.client_id);
    close(c.fd);
    c.fd = -1;
    c.descriptors.reset();
    _counters.disconnected.fetch_add(1, std::memory_order_relaxed);
}

int vnic_endpoint::poll_timeout_ms(bool listen_now) const {
    auto soonest = std::chrono::steady_clock::time_point::max();
    for (const auto& c : _clients) {
        if (!c.s.hello_done) {
            soonest = std::min(soonest, c.hello_deadline);
        }
    }
    if (_cm != nullptr) {
        soonest = std::min(soonest, _cm->next_deadline());
    }
    if (!_local_mads.empty()) {
        soonest = std::chrono::steady_clock::now();
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

void vnic_endpoint::serve() {
    std::vector<pollfd> fds;
    auto listeners_resume = std::chrono::steady_clock::time_point{};
    while (!_stopping.load(std::memory_order_acquire)) {
        const bool listen_now = std::chrono::steady_clock::now() >= listeners_resume;
        fds.clear();
        fds.push_back({_wake_fd, POLLIN, 0});
        const std::size_t first_listener = fds.size();
        for (const int fd : _listeners) {
            fds.push_back({listen_now ? fd : -1, POLLIN, 0});
        }
        const std::size_t first_client = fds.size();
        for (const auto& c : _clients) {
            fds.push_back({c.fd, POLLIN, 0});
        }
        const int ready = poll(fds.data(), fds.size(), poll_timeout_ms(listen_now));
        if (ready < 0) {
            if (errno == EINTR) {
                continue;
            }
            std::cerr << "jakirod: verbs: " << _spec.identity.name
                      << ": poll: " << std::strerror(errno) << "\n";
            break;
        }
        if (_stopping.load(std::memory_order_acquire)) {
            break;
        }
        if (fds[0].revents != 0) {
            // Before the requests of this round: a quota posted before a request holds for it.
            uint64_t count;
            [[maybe_unused]] const ssize_t n = read(_wake_fd, &count, sizeof(count));
            take_posted();
        }
        serve_gsi();  // MADs that arrived wrote _wake_fd too; timers may be due anyway
        // Clients first: their indices in `fds` are only valid until the vector changes. Those
        // take_posted() just adopted come after the polled ones, and are read next round.
        const auto now = std::chrono::steady_clock::now();
        const std::size_t polled = fds.size() - first_client;
        const std::size_t served = _clients.size();
        std::vector<bool> keep(served, true);
        for (std::size_t i = 0; i < served; ++i) {
            if (i < polled && fds[first_client + i].revents != 0) {
                keep[i] = serve_client(_clients[i]);
            }
            if (keep[i] && !_clients[i].s.hello_done && now >= _clients[i].hello_deadline) {
                _counters.hello_timeouts.fetch_add(1, std::memory_order_relaxed);
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

        for (std::size_t i = 0; i < _listeners.size(); ++i) {
            if (fds[first_listener + i].revents != 0 && !accept_clients(_listeners[i])) {
                listeners_resume =
                    std::chrono::steady_clock::now() + std::chrono::milliseconds(accept_backoff_ms);
            }
        }
        publish();
    }
    if (!_freezing) {
        drop_all_clients();
    }
}

void vnic_endpoint::drop_all_clients() {
    for (auto& c : _clients) {
        drop_client(c, true);
    }
    _clients.clear();
    _client_count.store(0, std::memory_order_relaxed);
    publish();
}

}  // namespace jakiro::verbs
