// A vNIC's clients, each one verbs context: accepted from the vNIC's namespace alone (and
// within its max_contexts and its share of the host's descriptors), then one request at a time
// with the descriptors it brought (the rest closed), HELLO first, until it leaves or is
// dropped; whatever it created goes with it.

#include "rnic/verbs/vnic_endpoint.hh"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "rnic/verbs/vnic_endpoint_parts.hh"
#include "verbs_abi/cm_protocol.hh"
#include "verbs_abi/fd_passing.hh"

namespace jakiro::verbs {

namespace {

namespace proto = verbs_proto;
using vnic_endpoint_parts::send_with_fd;

}  // namespace

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

void vnic_endpoint::drop_all_clients() {
    for (auto& c : _clients) {
        drop_client(c, true);
    }
    _clients.clear();
    _client_count.store(0, std::memory_order_relaxed);
    publish();
}

}  // namespace jakiro::verbs
