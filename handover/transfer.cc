#include "handover/transfer.hh"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace jakiro::handover {

namespace {

enum class message : uint32_t { offer = 1, verdict, chunk, image_end, outcome };

// One message's payload; seqpacket keeps message boundaries, so a message is one recvmsg.
constexpr std::size_t max_message = std::size_t{64} * 1024;
constexpr std::size_t chunk_bytes = std::size_t{48} * 1024;
// The kernel's SCM_MAX_FD is 253.
constexpr std::size_t chunk_fds = 250;
constexpr uint32_t protocol = 1;

struct header {
    uint32_t type;
    uint32_t protocol;
};

bool send_message(int sock, message type, const std::byte* data, std::size_t size, const int* fds,
                  std::size_t nfds, std::string& error) {
    std::vector<std::byte> buffer(sizeof(header) + size);
    const header h{static_cast<uint32_t>(type), protocol};
    std::memcpy(buffer.data(), &h, sizeof h);
    if (size != 0) {
        std::memcpy(buffer.data() + sizeof h, data, size);
    }
    iovec iov{buffer.data(), buffer.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    std::vector<char> control;
    if (nfds != 0) {
        control.assign(CMSG_SPACE(sizeof(int) * nfds), 0);
        msg.msg_control = control.data();
        msg.msg_controllen = control.size();
        cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * nfds);
    }
    for (;;) {
        const ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
        if (n == static_cast<ssize_t>(buffer.size())) {
            return true;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        error = std::string("hand-over socket: send: ") +
                (n < 0 ? std::strerror(errno) : "short write");
        return false;
    }
}

struct incoming {
    message type;
    std::vector<std::byte> payload;
    std::vector<int> fds;
};

void close_all(std::vector<int>& fds) {
    for (const int fd : fds) {
        if (fd >= 0) {
            close(fd);
        }
    }
    fds.clear();
}

std::optional<incoming> receive_message(int sock, std::chrono::milliseconds timeout,
                                        std::string& error) {
    pollfd p{sock, POLLIN, 0};
    for (;;) {
        const int r = poll(&p, 1, static_cast<int>(timeout.count()));
        if (r > 0) {
            break;
        }
        if (r < 0 && errno == EINTR) {
            continue;
        }
        error =
            r == 0 ? "hand-over socket: no answer within " + std::to_string(timeout.count()) + " ms"
                   : std::string("hand-over socket: poll: ") + std::strerror(errno);
        return std::nullopt;
    }
    std::vector<std::byte> buffer(sizeof(header) + max_message);
    iovec iov{buffer.data(), buffer.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * chunk_fds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n;
    do {
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    incoming in{};
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            const std::size_t at = in.fds.size();
            in.fds.resize(at + count);
            std::memcpy(in.fds.data() + at, CMSG_DATA(c), count * sizeof(int));
        }
    }
    if (n <= 0) {
        close_all(in.fds);
        error = n == 0 ? "hand-over socket: the peer closed it"
                       : std::string("hand-over socket: receive: ") + std::strerror(errno);
        return std::nullopt;
    }
    if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
        static_cast<std::size_t>(n) < sizeof(header)) {
        close_all(in.fds);
        error = "hand-over socket: a malformed message";
        return std::nullopt;
    }
    header h{};
    std::memcpy(&h, buffer.data(), sizeof h);
    if (h.protocol != protocol) {
        close_all(in.fds);
        error = "hand-over socket: the peer speaks hand-over protocol " +
                std::to_string(h.protocol) + ", this binary " + std::to_string(protocol);
        return std::nullopt;
    }
    in.type = static_cast<message>(h.type);
    in.payload.assign(buffer.begin() + sizeof(header), buffer.begin() + n);
    return in;
}

std::optional<incoming> expect(int sock, message type, std::chrono::milliseconds timeout,
                               std::string& error) {
    auto in = receive_message(sock, timeout, error);
    if (in && in->type != type) {
        close_all(in->fds);
        error = "hand-over socket: an unexpected message (" +
                std::to_string(static_cast<uint32_t>(in->type)) + ")";
        return std::nullopt;
    }
    if (in && type != message::chunk && !in->fds.empty()) {
        close_all(in->fds);
        error = "hand-over socket: descriptors where none belong";
        return std::nullopt;
    }
    return in;
}

// A small payload codec: u32 and strings, bounds-checked.
struct payload_writer {
    std::vector<std::byte> out;
    void u32(uint32_t v) {
        const auto* b = reinterpret_cast<const std::byte*>(&v);
        out.insert(out.end(), b, b + sizeof v);
    }
    void string(const std::string& s) {
        u32(static_cast<uint32_t>(s.size()));
        const auto* b = reinterpret_cast<const std::byte*>(s.data());
        out.insert(out.end(), b, b + s.size());
    }
};

struct payload_reader {
    const std::vector<std::byte>& in;
    std::size_t at = 0;
    bool ok = true;
    uint32_t u32() {
        uint32_t v = 0;
        if (in.size() - at < sizeof v) {
            ok = false;
            return 0;
        }
        std::memcpy(&v, in.data() + at, sizeof v);
        at += sizeof v;
        return v;
    }
    std::string string() {
        const uint32_t n = u32();
        if (!ok || in.size() - at < n) {
            ok = false;
            return {};
        }
        std::string s(reinterpret_cast<const char*>(in.data() + at), n);
        at += n;
        return s;
    }
};

std::optional<ino_t> netns_of(const std::string& pid) {
    struct stat st {};
    if (stat(("/proc/" + pid + "/ns/net").c_str(), &st) != 0) {
        return std::nullopt;
    }
    return st.st_ino;
}

}  // namespace

bool peer_is_trusted(int sock, std::string& why) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        why = std::string("SO_PEERCRED: ") + std::strerror(errno);
        return false;
    }
    if (cred.uid != geteuid()) {
        why = "peer uid " + std::to_string(cred.uid) + " is not this service's";
        return false;
    }
    const auto ours = netns_of("self");
    const auto theirs = netns_of(std::to_string(cred.pid));
    if (!ours || !theirs || *ours != *theirs) {
        why = "peer pid " + std::to_string(cred.pid) + " is not in this network namespace";
        return false;
    }
    return true;
}

bool send_offer(int sock, const offer& o, std::string& error) {
    payload_writer w;
    w.string(o.version);
    w.u32(static_cast<uint32_t>(o.reads.size()));
    for (const auto& [kind, version] : o.reads) {
        w.u32(kind);
        w.u32(version);
    }
    return send_message(sock, message::offer, w.out.data(), w.out.size(), nullptr, 0, error);
}

std::optional<offer> receive_offer(int sock, std::chrono::milliseconds timeout,
                                   std::string& error) {
    auto in = expect(sock, message::offer, timeout, error);
    if (!in) {
        return std::nullopt;
    }
    payload_reader r{in->payload};
    offer o;
    o.version = r.string();
    const uint32_t n = r.u32();
    for (uint32_t i = 0; r.ok && i < n && i < 1024; ++i) {
        const uint32_t kind = r.u32();
        const uint32_t version = r.u32();
        o.reads[static_cast<uint16_t>(kind)] = static_cast<uint16_t>(version);
    }
    if (!r.ok || n > 1024) {
        error = "hand-over socket: a malformed offer";
        return std::nullopt;
    }
    return o;
}

bool send_verdict(int sock, const std::string& refusal, std::string& error) {
    payload_writer w;
    w.u32(refusal.empty() ? 1 : 0);
    w.string(refusal);
    return send_message(sock, message::verdict, w.out.data(), w.out.size(), nullptr, 0, error);
}

std::optional<std::string> receive_verdict(int sock, std::chrono::milliseconds timeout,
                                           std::string& error) {
    auto in = expect(sock, message::verdict, timeout, error);
    if (!in) {
        return std::nullopt;
    }
    payload_reader r{in->payload};
    const uint32_t accepted = r.u32();
    std::string refusal = r.string();
    if (!r.ok || (accepted == 0 && refusal.empty())) {
        error = "hand-over socket: a malformed verdict";
        return std::nullopt;
    }
    return accepted != 0 ? std::string() : refusal;
}

bool send_image(int sock, const image_writer& image, std::string& error) {
    const auto& data = image.data();
    const auto& fds = image.fds();
    std::size_t at = 0, fd_at = 0;
    while (at < data.size() || fd_at < fds.size()) {
        const std::size_t n = std::min(chunk_bytes, data.size() - at);
        const std::size_t nfds = std::min(chunk_fds, fds.size() - fd_at);
        if (!send_message(sock, message::chunk, data.data() + at, n, fds.data() + fd_at, nfds,
                          error)) {
            return false;
        }
        at += n;
        fd_at += nfds;
    }
    payload_writer w;
    w.u32(static_cast<uint32_t>(data.size()));
    w.u32(static_cast<uint32_t>(fds.size()));
    return send_message(sock, message::image_end, w.out.data(), w.out.size(), nullptr, 0, error);
}

std::optional<received_image> receive_image(int sock, std::chrono::milliseconds timeout,
                                            std::size_t max_bytes, std::string& error) {
    received_image image;
    for (;;) {
        auto in = receive_message(sock, timeout, error);
        if (!in) {
            close_all(image.fds);
            return std::nullopt;
        }
        image.fds.insert(image.fds.end(), in->fds.begin(), in->fds.end());
        if (in->type == message::image_end) {
            payload_reader r{in->payload};
            const uint32_t bytes = r.u32();
            const uint32_t nfds = r.u32();
            if (!r.ok || bytes != image.data.size() || nfds != image.fds.size()) {
                close_all(image.fds);
                error = "hand-over socket: the image arrived incomplete";
                return std::nullopt;
            }
            return image;
        }
        if (in->type != message::chunk || image.data.size() + in->payload.size() > max_bytes) {
            close_all(image.fds);
            error =
                in->type != message::chunk
                    ? "hand-over socket: an unexpected message inside the image"
                    : "hand-over socket: the image exceeds " + std::to_string(max_bytes) + " bytes";
            return std::nullopt;
        }
        image.data.insert(image.data.end(), in->payload.begin(), in->payload.end());
    }
}

bool send_outcome(int sock, const std::string& failure, std::string& error) {
    payload_writer w;
    w.u32(failure.empty() ? 1 : 0);
    w.string(failure);
    return send_message(sock, message::outcome, w.out.data(), w.out.size(), nullptr, 0, error);
}

std::optional<std::string> receive_outcome(int sock, std::chrono::milliseconds timeout,
                                           std::string& error) {
    auto in = expect(sock, message::outcome, timeout, error);
    if (!in) {
        return std::nullopt;
    }
    payload_reader r{in->payload};
    const uint32_t running = r.u32();
    std::string failure = r.string();
    if (!r.ok || (running == 0 && failure.empty())) {
        error = "hand-over socket: a malformed outcome";
        return std::nullopt;
    }
    return running != 0 ? std::string() : failure;
}

}  // namespace jakiro::handover
