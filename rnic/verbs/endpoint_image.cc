// vnic_endpoint across a restart (vnic_endpoint.hh; docs/restart.md): freeze and thaw, the face
// in a state image, and the successor's endpoint rebuilt from it. The tenant's side never
// changes: its verbs connection, async channel and rdma_cm event socket are the same sockets
// (the successor holds the other ends, which came in the image), its handles and keys name the
// same objects, its mappings are of the same memfds.

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "rnic/engine.hh"
#include "rnic/verbs/vnic_endpoint.hh"

namespace jakiro::verbs {

namespace {

// Bounds of what one face's image may list, so that a corrupt count fails at once.
constexpr uint32_t max_listed_listeners = 16;
constexpr uint32_t max_listed_clients = 1u << 16;
constexpr uint32_t max_listed_events = 1u << 20;

void wake(int fd) {
    if (fd >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = write(fd, &one, sizeof(one));
    }
}

void close_all(std::vector<int>& fds) {
    for (const int fd : fds) {
        if (fd >= 0) {
            close(fd);
        }
    }
    fds.clear();
}

}  // namespace

void vnic_endpoint::freeze() {
    if (_frozen) {
        return;
    }
    if (_thread.joinable()) {
        _freezing = true;
        _stopping.store(true, std::memory_order_release);
        wake(_wake_fd);
        _thread.join();
    }
    _frozen = true;
}

bool vnic_endpoint::thaw(std::string& error) {
    if (!_frozen) {
        error = "vNIC " + _spec.identity.name + ": not frozen";
        return false;
    }
    close_image_fds();
    _frozen = false;
    launch();
    // What arrived while frozen (requests, MADs, events) is served at once.
    wake(_wake_fd);
    return true;
}

void vnic_endpoint::close_image_fds() {
    close_all(_image_fds);
}

bool vnic_endpoint::save(handover::image_writer& w, std::string& error) {
    if (!_frozen) {
        error = "vNIC " + _spec.identity.name + ": saved while it serves";
        return false;
    }
    close_image_fds();
    w.u16(_spec.identity.slot);
    w.string(_spec.identity.name);
    for (const auto* counter : {&_counters.accepted, &_counters.refused, &_counters.refused_foreign,
                                &_counters.hello_timeouts, &_counters.disconnected,
                                &_counters.requests, &_counters.bad_requests}) {
        w.u64(counter->load(std::memory_order_relaxed));
    }
    w.u32(static_cast<uint32_t>(_listeners.size()));
    for (const int fd : _listeners) {
        w.fd(fd);
    }
    w.u32(static_cast<uint32_t>(_clients.size()));
    for (const auto& c : _clients) {
        w.fd(c.fd);
        w.boolean(c.async_fd >= 0);
        if (c.async_fd >= 0) {
            w.fd(c.async_fd);
        }
        w.boolean(c.cm_event_fd >= 0);
        if (c.cm_event_fd >= 0) {
            w.fd(c.cm_event_fd);
        }
        w.u64(c.cm_channel_cookie);
        w.i64(c.pid);
        w.u64(c.s.client_id);
        w.boolean(c.s.hello_done);
    }
    {
        const std::lock_guard lock(_mutex);
        w.u32(static_cast<uint32_t>(_adopted.size()));
        for (const int fd : _adopted) {
            w.fd(fd);
        }
        w.u32(static_cast<uint32_t>(_events.size()));
        for (const auto& e : _events) {
            w.u64(e.client);
            w.u32(static_cast<uint32_t>(e.type));
            w.u64(e.handle);
        }
    }
    w.u32(static_cast<uint32_t>(_local_mads.size()));
    for (const auto& m : _local_mads) {
        w.pod(m.from);
        w.pod(m.mad);
    }
    if (!_resources->save(w, _image_fds, error)) {
        error = "vNIC " + _spec.identity.name + ": " + error;
        return false;
    }
    w.boolean(_cm != nullptr);
    if (_cm != nullptr) {
        _cm->save(w);
    }
    return true;
}

void vnic_endpoint::hand_over() {
    if (!_frozen) {
        return;
    }
    // Our ends of the tenant's sockets: the successor holds its own copies.
    close_all(_listeners);
    for (auto& c : _clients) {
        for (int* fd : {&c.fd, &c.async_fd, &c.cm_event_fd}) {
            if (*fd >= 0) {
                close(*fd);
                *fd = -1;
            }
        }
        c.descriptors.reset();
    }
    _clients.clear();
    _client_count.store(0, std::memory_order_relaxed);
    {
        const std::lock_guard lock(_mutex);
        close_all(_adopted);
        _events.clear();
    }
    _local_mads.clear();
    _cm.reset();  // its destructor says nothing on the wire
    if (_engine != nullptr && _qp1_open) {
        _engine->gsi().close(_spec.identity.slot);
        _qp1_open = false;
    }
    if (_resources != nullptr) {
        _resources->hand_over();
        _device.resources = nullptr;
        _resources.reset();
    }
    close_image_fds();
    _frozen = false;
}

std::unique_ptr<vnic_endpoint> vnic_endpoint::restore(parts p, settings s,
                                                      handover::section_reader& r) {
    const uint16_t slot = r.u16();
    const std::string name = r.string();
    if (r.ok() && (slot != p.spec.identity.slot || name != p.spec.identity.name)) {
        r.fail("state section 'rdma_faces': the face of vNIC " + name + " (slot " +
               std::to_string(slot) + ") restored as " + p.spec.identity.name);
    }
    if (!r.ok()) {
        close_all(p.listeners);
        return nullptr;
    }
    std::atomic<uint64_t>* client_ids = s.client_ids;
    auto ep = std::make_unique<vnic_endpoint>(std::move(p), std::move(s));
    // Until it is whole, it is frozen: a failure hands everything over again, untouched.
    ep->_frozen = true;
    auto fail = [&ep] {
        ep->hand_over();
        return nullptr;
    };
    for (auto* counter :
         {&ep->_counters.accepted, &ep->_counters.refused, &ep->_counters.refused_foreign,
          &ep->_counters.hello_timeouts, &ep->_counters.disconnected, &ep->_counters.requests,
          &ep->_counters.bad_requests}) {
        counter->store(r.u64(), std::memory_order_relaxed);
    }
    const uint32_t listeners = r.count(max_listed_listeners);
    for (uint32_t i = 0; i < listeners && r.ok(); ++i) {
        const int fd = r.fd();
        if (fd >= 0) {
            ep->_listeners.push_back(fd);
        }
    }
    const uint32_t clients = r.count(max_listed_clients);
    uint64_t highest_serial = 0;
    const auto now = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < clients && r.ok(); ++i) {
        client c;
        c.fd = r.fd();
        c.async_fd = r.boolean() ? r.fd() : -1;
        c.cm_event_fd = r.boolean() ? r.fd() : -1;
        c.cm_channel_cookie = r.u64();
        c.pid = static_cast<pid_t>(r.i64());
        c.s.client_id = r.u64();
        c.s.hello_done = r.boolean();
        // Pushed before it is checked: whatever it holds is closed by hand_over() on failure.
        ep->_clients.push_back(std::move(c));
        const client& added = ep->_clients.back();
        if (!r.ok()) {
            break;
        }
        if (client_slot(added.s.client_id) != ep->_spec.identity.slot ||
            std::count_if(ep->_clients.begin(), ep->_clients.end(), [&](const client& o) {
                return o.s.client_id == added.s.client_id;
            }) != 1) {
            r.fail("state section 'rdma_faces': a client of vNIC " + name +
                   " under another vNIC's or a repeated id");
            break;
        }
        highest_serial = std::max(highest_serial, added.s.client_id & ((uint64_t{1} << 48) - 1));
        if (!added.s.hello_done) {
            ep->_clients.back().hello_deadline = now + ep->_settings.hello_timeout;
        }
        if (!charge(ep->_resources->account(), host_resource::descriptors, descriptors_per_context,
                    ep->_clients.back().descriptors)) {
            r.fail("state section 'rdma_faces': the host reserve refuses vNIC " + name +
                   "'s connections");
            break;
        }
    }
    const uint32_t adopted = r.count(max_listed_clients);
    for (uint32_t i = 0; i < adopted && r.ok(); ++i) {
        const int fd = r.fd();
        if (fd >= 0) {
            ep->_adopted.push_back(fd);
        }
    }
    const uint32_t events = r.count(max_listed_events);
    for (uint32_t i = 0; i < events && r.ok(); ++i) {
        pending_event e{};
        e.client = r.u64();
        e.type = static_cast<event_type>(r.u32());
        e.handle = r.u64();
        ep->_events.push_back(e);
    }
    const uint32_t mads = r.count(max_listed_events);
    for (uint32_t i = 0; i < mads && r.ok(); ++i) {
        local_mad m{};
        if (r.version() >= 2) {
            m.from = r.pod<rdmacm::gid>();
        } else {  // version 1 (before IPv6): the vNIC's IPv4 address, 32 bits
            m.from = rdmacm::ipv4_gid(r.u32());
        }
        m.mad = r.pod<rdmacm::mad_buffer>();
        ep->_local_mads.push_back(m);
    }
    if (!r.ok() || !ep->_resources->restore(r)) {
        return fail();
    }
    const bool has_cm = r.boolean();
    if (r.ok() && has_cm) {
        if (ep->_cm == nullptr) {
            r.fail("state section 'rdma_faces': vNIC " + name +
                   " had rdma_cm and has no engine to speak it through now");
            return fail();
        }
        const auto event_fd_of = [&ep](uint64_t client_id) {
            for (const auto& c : ep->_clients) {
                if (c.s.client_id == client_id) {
                    return c.cm_event_fd;
                }
            }
            return -1;
        };
        if (!ep->_cm->restore(r, event_fd_of)) {
            return fail();
        }
    }
    if (!r.ok()) {
        return fail();
    }
    if (client_ids != nullptr) {
        // New clients' ids continue past the restored ones, on every vNIC of the server.
        uint64_t seen = client_ids->load(std::memory_order_relaxed);
        while (seen < highest_serial && !client_ids->compare_exchange_weak(
                                            seen, highest_serial, std::memory_order_relaxed)) {
        }
    }
    ep->_client_count.store(ep->_clients.size(), std::memory_order_relaxed);
    ep->_frozen = false;
    ep->publish();
    return ep;
}

}  // namespace jakiro::verbs
