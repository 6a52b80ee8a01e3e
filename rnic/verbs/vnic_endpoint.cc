// One vNIC's face over its life: built, started, given a new quota, events and adopted sockets
// from other threads, reported on, stopped; and its thread's loop, which polls the wake-up
// eventfd, the listeners and the clients and hands each to its part (client_session.cc for the
// clients, cm_relay.cc for the rdma_cm agent). Across a restart it is frozen, saved and restored
// by endpoint_image.cc.

#include "rnic/verbs/vnic_endpoint.hh"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "rnic/engine.hh"
#include "rnic/verbs/vnic_endpoint_parts.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::verbs {

namespace {

namespace proto = verbs_proto;
using vnic_endpoint_parts::cm_limits_of;
using vnic_endpoint_parts::send_with_fd;

// How long the listeners rest after accept() ran out of descriptors: the pending connection
// stays queued and would otherwise wake poll() in a busy loop.
constexpr int accept_backoff_ms = 100;

void wake(int fd) {
    if (fd >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = write(fd, &one, sizeof(one));
    }
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
        make_cm_agent(std::move(p.admit), std::move(p.admit_ipv6));
    }
}

vnic_endpoint::~vnic_endpoint() {
    stop();
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

}  // namespace jakiro::verbs
