#include "channel_server.hh"

#include "verbs_shim/fd_passing.hh"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>

namespace jakiro::verbs {

namespace {

namespace proto = verbs_proto;

// How long the listeners rest after accept() ran out of descriptors: the pending connection
// stays queued and would otherwise wake poll() in a busy loop.
constexpr int accept_backoff_ms = 100;

bool make_dirs(const std::string& dir) {
    for (std::size_t pos = 1; pos != std::string::npos;) {
        pos = dir.find('/', pos + 1);
        const std::string prefix = dir.substr(0, pos);
        if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
            return false;
        }
    }
    return true;
}

bool fill_address(sockaddr_un& addr, const std::string& path) {
    if (path.size() >= sizeof(addr.sun_path)) {
        return false;
    }
    addr = {};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    return true;
}

// True when something accepts connections at `path` (a live daemon, not a stale file).
bool socket_is_live(const std::string& path) {
    sockaddr_un addr;
    if (!fill_address(addr, path)) {
        return false;
    }
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return false;
    }
    const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    return live;
}

std::string read_link(const std::string& path) {
    char target[256];
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    return n < 0 ? std::string() : std::string(target, static_cast<std::size_t>(n));
}

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

}  // namespace

vnic_quota quota_of(const rdma_config& rdma) {
    vnic_quota q;
    q.max_qps = rdma.max_qps;
    q.max_pds = rdma.max_pds;
    q.max_mrs = rdma.max_mrs;
    q.max_mr_bytes = rdma.max_mr_bytes;
    q.max_cqs = rdma.max_cqs;
    q.max_cqes = rdma.max_cqes;
    q.max_srqs = rdma.max_srqs;
    q.max_wqes = rdma.max_wqes;
    q.max_contexts = rdma.max_contexts;
    return q;
}

channel_config make_channel_config(const host_config& config) {
    channel_config out;
    out.host_name = config.name;
    out.tenant_mtu = config.tenant_mtu();
    // Slots are handed out in configuration order at startup (host_manager), and the
    // channel server serves the startup vNICs: index == slot.
    for (std::size_t i = 0; i < config.vnics.size(); ++i) {
        const auto& v = config.vnics[i];
        out.vnics.push_back(
            {v.name, v.mac, v.ip.address, static_cast<uint16_t>(i), quota_of(v.rdma)});
    }
    return out;
}

channel_server::channel_server(channel_config config) : _config(std::move(config)) {
    const cq_error_sink sink{[](void* self, uint64_t client, uint32_t cq) {
                                 static_cast<channel_server*>(self)->raise_cq_error(client, cq);
                             },
                             this};
    for (const auto& vnic : _config.vnics) {
        _resources.push_back(std::make_unique<vnic_resources>(engine_limits(), sink, vnic.quota));
        _devices.push_back({&vnic, _config.host_name, _config.tenant_mtu, _resources.back().get()});
    }
}

channel_server::~channel_server() {
    stop();
}

std::string channel_server::socket_path(std::size_t vnic_index) const {
    return _config.socket_dir + "/" + mac_text(_config.vnics.at(vnic_index).mac) + ".sock";
}

channel_stats channel_server::stats() const {
    channel_stats s;
    s.accepted = _accepted.load(std::memory_order_relaxed);
    s.refused = _refused.load(std::memory_order_relaxed);
    s.disconnected = _disconnected.load(std::memory_order_relaxed);
    s.requests = _requests.load(std::memory_order_relaxed);
    s.bad_requests = _bad_requests.load(std::memory_order_relaxed);
    return s;
}

bool channel_server::start(std::string& error) {
    if (!make_dirs(_config.socket_dir) || !make_dirs(_config.socket_dir + "/by-name")) {
        error = "cannot create " + _config.socket_dir + ": " + std::strerror(errno);
        return false;
    }
    raise_fd_limit(2 * max_clients + 1024);
    // Sockets are named after MACs: two vNICs with one MAC could not both have an RDMA face.
    for (std::size_t i = 0; i < _config.vnics.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            if (_config.vnics[i].mac == _config.vnics[j].mac) {
                error = "vNICs " + _config.vnics[j].name + " and " + _config.vnics[i].name +
                        " share MAC " + mac_text(_config.vnics[i].mac) +
                        "; each vNIC needs its own for its verbs socket";
                return false;
            }
        }
    }
    for (std::size_t i = 0; i < _config.vnics.size(); ++i) {
        if (!open_listener(i, error)) {
            close_listeners();
            return false;
        }
    }
    _wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (_wake_fd < 0) {
        error = std::string("eventfd: ") + std::strerror(errno);
        close_listeners();
        return false;
    }
    _stopping = false;
    _thread = std::thread([this] { serve(); });
    return true;
}

bool channel_server::open_listener(std::size_t vnic_index, std::string& error) {
    listener l;
    l.path = socket_path(vnic_index);
    sockaddr_un addr;
    if (!fill_address(addr, l.path)) {
        error = "verbs socket path too long: " + l.path;
        return false;
    }
    // A socket file left by a crashed daemon is stale if nobody accepts on it; a live one
    // means another jakirod serves a vNIC with this MAC, which is a configuration error.
    if (socket_is_live(l.path)) {
        error = "another jakirod is serving " + l.path + " (vNIC " +
                _config.vnics[vnic_index].name + ")";
        return false;
    }
    unlink(l.path.c_str());
    l.fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l.fd < 0 || bind(l.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(l.fd, 64) != 0) {
        error = "cannot listen on " + l.path + ": " + std::strerror(errno);
        if (l.fd >= 0) {
            close(l.fd);
        }
        return false;
    }
    // Tenant programs need not run as root: anyone who can reach the path may connect. The
    // path is the boundary (a VM sees only its own socket); see verbs_shim/README.md.
    chmod(l.path.c_str(), 0666);
    link_by_name(l, _config.vnics[vnic_index].name);
    _listeners.push_back(std::move(l));
    return true;
}

void channel_server::link_by_name(listener& l, const std::string& vnic_name) {
    // A name becomes a file name: refuse anything that could leave the directory.
    if (vnic_name.empty() || vnic_name[0] == '.' || vnic_name.find('/') != std::string::npos) {
        return;
    }
    const std::string link = _config.socket_dir + "/by-name/" + vnic_name + ".sock";
    const std::string target = "../" + l.path.substr(l.path.rfind('/') + 1);
    const std::string existing = read_link(link);
    if (!existing.empty() && existing != target && socket_is_live(link)) {
        std::cerr << "jakirod: verbs: vNIC name " << vnic_name
                  << " is also served by another jakirod; use jakiro-run --socket " << l.path
                  << "\n";
        return;
    }
    unlink(link.c_str());
    if (symlink(target.c_str(), link.c_str()) == 0) {
        l.link = link;
    }
}

void channel_server::close_listeners() {
    for (auto& l : _listeners) {
        close(l.fd);
        unlink(l.path.c_str());
        // Only remove the name link if it still points to our socket.
        if (!l.link.empty() && read_link(l.link) == "../" + l.path.substr(l.path.rfind('/') + 1)) {
            unlink(l.link.c_str());
        }
    }
    _listeners.clear();
}

void channel_server::stop() {
    if (_thread.joinable()) {
        _stopping = true;
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = write(_wake_fd, &one, sizeof(one));
        _thread.join();
    }
    close_listeners();
    if (_wake_fd >= 0) {
        close(_wake_fd);
        _wake_fd = -1;
    }
    const std::lock_guard lock(_adopt_mutex);
    for (auto& [fd, vnic] : _adopted) {
        close(fd);
    }
    _adopted.clear();
}

bool channel_server::adopt(int fd, std::size_t vnic_index) {
    if (!_thread.joinable() || _stopping || vnic_index >= _config.vnics.size()) {
        close(fd);
        return false;
    }
    {
        const std::lock_guard lock(_adopt_mutex);
        _adopted.emplace_back(fd, vnic_index);
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(_wake_fd, &one, sizeof(one));
    return true;
}

void channel_server::take_adopted() {
    uint64_t count;
    [[maybe_unused]] const ssize_t n = read(_wake_fd, &count, sizeof(count));
    std::vector<std::pair<int, std::size_t>> adopted;
    {
        const std::lock_guard lock(_adopt_mutex);
        adopted.swap(_adopted);
    }
    for (auto& [fd, vnic] : adopted) {
        add_client(fd, vnic);
    }
}

void channel_server::enable_qps(roce::engine* engine,
                                std::function<int(uint16_t slot, uint32_t remote_ip_be)> admit) {
    for (std::size_t i = 0; i < _config.vnics.size(); ++i) {
        const vnic_identity& v = _config.vnics[i];
        qp_support support;
        support.engine = engine;
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
        if (admit) {
            const uint16_t slot = v.slot;
            support.admit = [admit, slot](uint32_t remote) { return admit(slot, remote); };
        }
        _resources[i]->enable_qps(std::move(support));
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

void channel_server::add_client(int fd, std::size_t vnic_index) {
    if (_clients.size() >= max_clients) {
        _refused.fetch_add(1, std::memory_order_relaxed);
        close(fd);
        return;
    }
    client c;
    c.fd = fd;
    c.vnic = vnic_index;
    c.s.client_id = ++_next_client_id;
    _clients.push_back(c);
    _accepted.fetch_add(1, std::memory_order_relaxed);
    _client_count.store(_clients.size(), std::memory_order_relaxed);
}

bool channel_server::accept_clients(std::size_t vnic_index) {
    for (;;) {
        const int fd =
            accept4(_listeners[vnic_index].fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            // EAGAIN: all taken. Out of descriptors or memory: the caller backs off.
            return !(errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM);
        }
        add_client(fd, vnic_index);
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
    const bool truncated = (msg.msg_flags & MSG_TRUNC) != 0;
    auto out =
        handle_request(std::span<const std::byte>(buffer.data(), static_cast<std::size_t>(n)),
                       truncated, std::span<int>(fds.data(), fd_count), c.s, _devices[c.vnic]);
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

void channel_server::drop_client(client& c, bool device_gone) {
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
    // Everything the client created goes with it (PDs, MRs, CQs; later QPs and RCFT
    // entries): a process that dies leaves nothing behind.
    _resources[c.vnic]->release_client(c.s.client_id);
    close(c.fd);
    c.fd = -1;
    _disconnected.fetch_add(1, std::memory_order_relaxed);
}

void channel_server::serve() {
    std::vector<pollfd> fds;
    auto listeners_resume = std::chrono::steady_clock::time_point{};
    while (!_stopping.load(std::memory_order_acquire)) {
        const bool listen_now = std::chrono::steady_clock::now() >= listeners_resume;
        fds.clear();
        fds.push_back({_wake_fd, POLLIN, 0});
        for (const auto& l : _listeners) {
            fds.push_back({listen_now ? l.fd : -1, POLLIN, 0});
        }
        for (const auto& c : _clients) {
            fds.push_back({c.fd, POLLIN, 0});
        }
        const int ready = poll(fds.data(), fds.size(), listen_now ? -1 : accept_backoff_ms);
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
        const std::size_t first_client = 1 + _listeners.size();
        std::vector<bool> keep(_clients.size(), true);
        for (std::size_t i = 0; i < _clients.size(); ++i) {
            if (fds[first_client + i].revents != 0) {
                keep[i] = serve_client(_clients[i]);
            }
        }
        std::size_t kept = 0;
        for (std::size_t i = 0; i < _clients.size(); ++i) {
            if (keep[i]) {
                _clients[kept++] = _clients[i];
            } else {
                drop_client(_clients[i], false);
            }
        }
        _clients.resize(kept);
        _client_count.store(_clients.size(), std::memory_order_relaxed);

        for (std::size_t i = 0; i < _listeners.size(); ++i) {
            if (fds[1 + i].revents != 0) {
                if (!accept_clients(i)) {
                    listeners_resume = std::chrono::steady_clock::now() +
                                       std::chrono::milliseconds(accept_backoff_ms);
                }
            }
        }
        if (fds[0].revents != 0) {
            take_adopted();
            send_pending_events();
        }
    }
    for (auto& c : _clients) {
        drop_client(c, true);
    }
    _clients.clear();
    _client_count.store(0, std::memory_order_relaxed);
}

}  // namespace jakiro::verbs
