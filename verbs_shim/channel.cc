#include "verbs_shim/channel.hh"

#include "verbs_abi/endpoint_address.hh"
#include "verbs_abi/fd_passing.hh"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

channel::~channel() {
    close();
}

int channel::open(const char* where) {
    close();
    sockaddr_un addr{};
    socklen_t len = 0;
    if (!verbs_endpoint::to_sockaddr(where, addr, len)) {
        return ENAMETOOLONG;
    }
    // CLOEXEC: a program that execs must not keep the vNIC's contexts alive in the child.
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return errno;
    }
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
        const int error = errno;
        ::close(fd);
        // An abstract name nobody listens on is ECONNREFUSED; say "no such vNIC here".
        return error == ECONNREFUSED && where[0] == '@' ? ENOENT : error;
    }
    _fd = fd;
    return 0;
}

void channel::close() {
    if (_fd >= 0) {
        ::close(_fd);
        _fd = -1;
    }
}

int channel::call_with_fds(void* request, std::size_t request_size, void* reply,
                           std::size_t reply_size, std::span<int> fds_out, int fd_in) {
    const std::lock_guard lock(_mutex);
    if (_fd < 0 || fds_out.size() > proto::max_fds_per_message) {
        return _fd < 0 ? EIO : EINVAL;
    }
    proto::header req{};
    std::memcpy(&req, request, sizeof(req));
    req.request_id = _next_id++;
    std::memcpy(request, &req, sizeof(req));

    // MSG_NOSIGNAL: a vanished jakirod must surface as an error, not kill the program.
    if (proto::send_with_fd(_fd, request, request_size, fd_in, MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request_size)) {
        return errno == EPIPE || errno == ECONNRESET ? EIO : errno;
    }
    pollfd p{_fd, POLLIN, 0};
    int ready;
    do {
        ready = poll(&p, 1, reply_timeout_ms);
    } while (ready < 0 && errno == EINTR);
    if (ready <= 0) {
        // A late reply would answer the wrong request: this channel is done.
        shutdown(_fd, SHUT_RDWR);
        return ready == 0 ? ETIMEDOUT : errno;
    }

    alignas(8) std::array<std::byte, proto::max_message_size + 1> buffer;
    iovec iov{buffer.data(), buffer.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * proto::max_fds_per_message)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n;
    do {
        n = recvmsg(_fd, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        return n == 0 || errno == ECONNRESET ? EIO : errno;
    }

    int received[proto::max_fds_per_message];
    std::size_t fds = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (std::size_t i = 0; i < count && fds < proto::max_fds_per_message; ++i) {
                std::memcpy(&received[fds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            }
        }
    }
    auto close_received = [&](std::size_t from) {
        for (std::size_t i = from; i < fds; ++i) {
            ::close(received[i]);
        }
    };

    int status = 0;
    const std::span<const std::byte> message(buffer.data(), static_cast<std::size_t>(n));
    const bool truncated = (msg.msg_flags & MSG_TRUNC) != 0;
    if (!proto::check_reply(message, truncated, req, status) || status != 0) {
        close_received(0);
        return status;
    }
    if (message.size() != reply_size || fds < fds_out.size()) {
        close_received(0);
        return EPROTO;
    }
    std::memcpy(reply, buffer.data(), reply_size);
    for (std::size_t i = 0; i < fds_out.size(); ++i) {
        fds_out[i] = received[i];
    }
    close_received(fds_out.size());
    return 0;
}

int channel::hello(proto::hello_reply& out, int& async_fd) {
    auto req =
        proto::make_message<proto::hello_request>(static_cast<uint16_t>(proto::opcode::hello), 0);
    req.pid = static_cast<uint32_t>(getpid());
    proto::put_name(req.program, program_invocation_short_name);
    return call(&req, sizeof(req), &out, sizeof(out), &async_fd);
}

int channel::query(proto::query_reply& out) {
    auto req =
        proto::make_message<proto::query_request>(static_cast<uint16_t>(proto::opcode::query), 0);
    req.port_num = 1;
    return call(&req, sizeof(req), &out, sizeof(out));
}

}  // namespace jakiro::verbs_shim
