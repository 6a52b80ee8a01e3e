#include "handover/fd_store.hh"

#include <fcntl.h>
#include <linux/kcmp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace jakiro::handover {

namespace {

constexpr char magic[8] = {'J', 'A', 'K', 'I', 'R', 'O', 'F', 'S'};
constexpr uint32_t envelope_format = 1;
constexpr uint32_t max_sections = 1024;
constexpr uint32_t max_indexes = 1u << 24;
// A manager that does not read its socket must not hold the exit up for ever.
constexpr auto send_timeout = std::chrono::seconds(5);
constexpr auto barrier_timeout = std::chrono::seconds(5);

std::string errno_text(const char* what) {
    return std::string(what) + ": " + std::strerror(errno);
}

// A datagram socket connected to the manager's notify socket.
class notify_connection {
  public:
    notify_connection(const std::string& path, std::string& error) {
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        if (path.empty() || (path[0] != '/' && path[0] != '@') ||
            path.size() >= sizeof(addr.sun_path)) {
            error = "NOTIFY_SOCKET '" + path + "' is not a socket path";
            return;
        }
        std::memcpy(addr.sun_path, path.data(), path.size());
        if (path[0] == '@') {
            addr.sun_path[0] = '\0';
        }
        const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() +
                                                 (path[0] == '/'));
        _fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        timeval tv{static_cast<time_t>(send_timeout.count()), 0};
        if (_fd < 0 || setsockopt(_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
            connect(_fd, reinterpret_cast<const sockaddr*>(&addr), size) != 0) {
            error = errno_text(("NOTIFY_SOCKET " + path).c_str());
            if (_fd >= 0) {
                close(_fd);
                _fd = -1;
            }
        }
    }
    ~notify_connection() {
        if (_fd >= 0) {
            close(_fd);
        }
    }
    notify_connection(const notify_connection&) = delete;
    notify_connection& operator=(const notify_connection&) = delete;

    bool ok() const { return _fd >= 0; }

    bool send(std::string_view text, std::span<const int> fds, std::string& error) {
        iovec iov{const_cast<char*>(text.data()), text.size()};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        std::vector<char> control;
        if (!fds.empty()) {
            control.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
            msg.msg_control = control.data();
            msg.msg_controllen = control.size();
            cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
            cmsg->cmsg_level = SOL_SOCKET;
            cmsg->cmsg_type = SCM_RIGHTS;
            cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
            std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
        }
        for (;;) {
            const ssize_t n = sendmsg(_fd, &msg, MSG_NOSIGNAL);
            if (n == static_cast<ssize_t>(text.size())) {
                return true;
            }
            if (n < 0 && errno == EINTR) {
                continue;
            }
            error = n < 0 ? errno_text("NOTIFY_SOCKET: send") : "NOTIFY_SOCKET: short send";
            return false;
        }
    }

  private:
    int _fd = -1;
};

bool barrier(notify_connection& to, std::chrono::milliseconds timeout, std::string& error) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
        error = errno_text("BARRIER: pipe");
        return false;
    }
    const int write_end = pipe_fds[1];
    const bool sent = to.send("BARRIER=1", std::span<const int>(&write_end, 1), error);
    close(write_end);
    if (!sent) {
        close(pipe_fds[0]);
        return false;
    }
    // The manager closes its copy once it has processed every earlier message.
    pollfd p{pipe_fds[0], POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        const int r = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
        if (r > 0) {
            break;
        }
        if (r < 0 && errno == EINTR) {
            continue;
        }
        close(pipe_fds[0]);
        error = r == 0 ? "the service manager did not answer BARRIER=1 within " +
                             std::to_string(timeout.count()) + " ms"
                       : errno_text("BARRIER: poll");
        return false;
    }
    close(pipe_fds[0]);
    return true;
}

// Two descriptors of one open file (dup, or a tenant sending one file twice): systemd's store
// keeps one of them.
bool same_open_file(int a, int b) {
    return a == b || syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE, a, b) == 0;
}

class cursor {
  public:
    explicit cursor(std::span<const std::byte> bytes) : _bytes(bytes) {}
    template <class T>
    bool get(T& out) {
        if (_bytes.size() - _at < sizeof(T)) {
            return false;
        }
        std::memcpy(&out, _bytes.data() + _at, sizeof(T));
        _at += sizeof(T);
        return true;
    }
    std::size_t left() const { return _bytes.size() - _at; }
    std::span<const std::byte> rest() const { return _bytes.subspan(_at); }

  private:
    std::span<const std::byte> _bytes;
    std::size_t _at = 0;
};

template <class T>
void put(std::vector<std::byte>& out, const T& v) {
    const auto* b = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), b, b + sizeof v);
}

// A socket whose peer is gone: what a stored tenant connection that hung up reads as.
int hung_up_socket() {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        return -1;
    }
    close(pair[1]);
    return pair[0];
}

bool read_sealed_memfd(int fd, std::size_t max_bytes, std::vector<std::byte>& out,
                       std::string& error) {
    // Sealed against change, so that what is checked is what is used.
    const int seals = fcntl(fd, F_GET_SEALS);
    constexpr int needed = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;
    if (seals < 0 || (seals & needed) != needed) {
        error = "'" + std::string(state_fd_name) + "' is not a sealed memfd";
        return false;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size < 0 || static_cast<uint64_t>(st.st_size) > max_bytes) {
        error = "'" + std::string(state_fd_name) + "' holds " + std::to_string(st.st_size) +
                " bytes, more than " + std::to_string(max_bytes);
        return false;
    }
    out.resize(static_cast<std::size_t>(st.st_size));
    std::size_t at = 0;
    while (at < out.size()) {
        const ssize_t n = pread(fd, out.data() + at, out.size() - at, static_cast<off_t>(at));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            error = n < 0 ? errno_text("reading the stored state") : "the stored state ends early";
            return false;
        }
        at += static_cast<std::size_t>(n);
    }
    return true;
}

}  // namespace

std::string stored_fd_name(std::size_t slot) {
    return std::string(stored_fd_prefix) + std::to_string(slot);
}

bool valid_fd_name(std::string_view name) {
    if (name.empty() || name.size() > 255) {
        return false;
    }
    for (const char c : name) {
        if (c < 0x20 || c > 0x7e || c == ':') {
            return false;
        }
    }
    return true;
}

std::string store_message(std::string_view name) {
    return "FDSTORE=1\nFDNAME=" + std::string(name);
}

std::string remove_message(std::string_view name) {
    return "FDSTOREREMOVE=1\nFDNAME=" + std::string(name);
}

bool notify_with_fds(const std::string& notify_socket, std::string_view text,
                     std::span<const int> fds, std::string& error) {
    notify_connection to(notify_socket, error);
    return to.ok() && to.send(text, fds, error);
}

bool notify_barrier(const std::string& notify_socket, std::chrono::milliseconds timeout,
                    std::string& error) {
    notify_connection to(notify_socket, error);
    return to.ok() && barrier(to, timeout, error);
}

store_plan plan_store(std::span<const int> fds) {
    store_plan plan;
    // Candidates share an inode; only those are compared further.
    std::map<std::pair<dev_t, ino_t>, std::vector<uint32_t>> by_inode;
    for (const int fd : fds) {
        struct stat st {};
        std::vector<uint32_t>* candidates = nullptr;
        if (fstat(fd, &st) == 0) {
            candidates = &by_inode[{st.st_dev, st.st_ino}];
        }
        std::optional<uint32_t> slot;
        if (candidates != nullptr) {
            for (const uint32_t s : *candidates) {
                if (same_open_file(plan.slots[s], fd)) {
                    slot = s;
                    break;
                }
            }
        }
        if (!slot) {
            slot = static_cast<uint32_t>(plan.slots.size());
            plan.slots.push_back(fd);
            if (candidates != nullptr) {
                candidates->push_back(*slot);
            }
        }
        plan.slot_of.push_back(*slot);
    }
    return plan;
}

std::vector<std::byte> envelope(const image_writer& image, const store_plan& plan) {
    std::vector<std::byte> out;
    const auto* m = reinterpret_cast<const std::byte*>(magic);
    out.insert(out.end(), m, m + sizeof magic);
    put(out, envelope_format);
    put(out, static_cast<uint32_t>(image.written().size()));
    for (const auto& [kind, version] : image.written()) {
        const auto req = image.required().find(kind);
        put(out, kind);
        put(out, version);
        put(out, static_cast<uint8_t>(req != image.required().end() && req->second ? 1 : 0));
    }
    put(out, static_cast<uint32_t>(plan.slots.size()));
    put(out, static_cast<uint32_t>(plan.slot_of.size()));
    for (const uint32_t slot : plan.slot_of) {
        put(out, slot);
    }
    put(out, static_cast<uint64_t>(image.data().size()));
    out.insert(out.end(), image.data().begin(), image.data().end());
    return out;
}

std::optional<stored_state> parse_envelope(std::span<const std::byte> bytes, std::string& error) {
    cursor in(bytes);
    char m[sizeof magic];
    uint32_t format = 0;
    if (!in.get(m) || std::memcmp(m, magic, sizeof magic) != 0) {
        error = "the stored state is not a jakirod state";
        return std::nullopt;
    }
    if (!in.get(format) || format != envelope_format) {
        error = "the stored state is format " + std::to_string(format) +
                "; this binary reads format " + std::to_string(envelope_format);
        return std::nullopt;
    }
    stored_state s;
    uint32_t sections = 0;
    if (!in.get(sections) || sections > max_sections) {
        error = "the stored state's section table is cut short or too long";
        return std::nullopt;
    }
    for (uint32_t i = 0; i < sections; ++i) {
        uint16_t kind = 0, version = 0;
        uint8_t required = 0;
        if (!in.get(kind) || !in.get(version) || !in.get(required)) {
            error = "the stored state ends inside its section table";
            return std::nullopt;
        }
        s.written[kind] = version;
        s.required[kind] = required != 0;
    }
    uint32_t indexes = 0;
    if (!in.get(s.slots) || !in.get(indexes) || indexes > max_indexes || s.slots > max_listen_fds ||
        indexes > in.left() / sizeof(uint32_t)) {
        error = "the stored state's descriptor table is cut short or too long";
        return std::nullopt;
    }
    s.slot_of.resize(indexes);
    for (auto& slot : s.slot_of) {
        in.get(slot);
        if (slot >= s.slots) {
            error = "the stored state names descriptor slot " + std::to_string(slot) + " of " +
                    std::to_string(s.slots);
            return std::nullopt;
        }
    }
    uint64_t length = 0;
    if (!in.get(length) || length != in.left()) {
        error = "the stored state's image is cut short (" + std::to_string(in.left()) +
                " bytes of " + std::to_string(length) + ")";
        return std::nullopt;
    }
    s.image.assign(in.rest().begin(), in.rest().end());
    return s;
}

bool save_to_store(const std::string& notify_socket, const image_writer& image,
                   std::size_t store_max, std::string& error) {
    const store_plan plan = plan_store(image.fds());
    if (plan.slots.size() + 1 > store_max) {
        error = "the state needs " + std::to_string(plan.slots.size() + 1) +
                " stored descriptors; the store holds " + std::to_string(store_max) +
                " (FileDescriptorStoreMax=)";
        return false;
    }
    const std::vector<std::byte> bytes = envelope(image, plan);
    const int memfd = memfd_create("jakiro-state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0) {
        error = errno_text("memfd_create");
        return false;
    }
    struct closer {
        int fd;
        ~closer() { close(fd); }
    } close_memfd{memfd};
    std::size_t at = 0;
    while (at < bytes.size()) {
        const ssize_t n = write(memfd, bytes.data() + at, bytes.size() - at);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            error = errno_text("writing the state memfd");
            return false;
        }
        at += static_cast<std::size_t>(n);
    }
    if (fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        error = errno_text("sealing the state memfd");
        return false;
    }
    notify_connection to(notify_socket, error);
    if (!to.ok()) {
        return false;
    }
    // Whatever a predecessor left under these names (a start that could not remove them) must
    // not come back beside them.
    if (!to.send(remove_message(state_fd_name), {}, error)) {
        return false;
    }
    for (std::size_t slot = 0; slot < plan.slots.size(); ++slot) {
        if (!to.send(remove_message(stored_fd_name(slot)), {}, error)) {
            return false;
        }
    }
    for (std::size_t slot = 0; slot < plan.slots.size(); ++slot) {
        if (!to.send(store_message(stored_fd_name(slot)),
                     std::span<const int>(&plan.slots[slot], 1), error)) {
            return false;
        }
    }
    // Last: a store without it is an incomplete one, which the next start discards.
    return to.send(store_message(state_fd_name), std::span<const int>(&memfd, 1), error) &&
           barrier(to, barrier_timeout, error);
}

void close_fds(std::vector<int>& fds) {
    for (const int fd : fds) {
        if (fd >= 0) {
            close(fd);
        }
    }
    fds.clear();
}

restored_state take_stored_state(const std::vector<passed_fd>& passed, std::size_t max_bytes) {
    restored_state out;
    int state_fd = -1;
    std::map<uint32_t, int> slots;
    std::vector<int> unused;
    auto note = [&out](const std::string& name) {
        if (std::find(out.names.begin(), out.names.end(), name) == out.names.end()) {
            out.names.push_back(name);
        }
    };
    for (const auto& p : passed) {
        if (p.name == state_fd_name) {
            note(p.name);
            (state_fd < 0 ? state_fd : unused.emplace_back()) = p.fd;
            continue;
        }
        if (p.name.starts_with(stored_fd_prefix)) {
            note(p.name);
            const std::string_view digits =
                std::string_view(p.name).substr(stored_fd_prefix.size());
            uint32_t slot = 0;
            const auto [end, ec] =
                std::from_chars(digits.data(), digits.data() + digits.size(), slot);
            if (ec == std::errc() && end == digits.data() + digits.size() &&
                !slots.contains(slot)) {
                slots[slot] = p.fd;
                continue;
            }
        }
        // Not ours (or a repeated slot): nothing of this process uses it.
        unused.push_back(p.fd);
    }
    close_fds(unused);
    auto give_up = [&](const std::string& why) {
        out.error = why;
        out.state.reset();
        for (auto& [slot, fd] : slots) {
            close(fd);
        }
        close_fds(out.fds);
        if (state_fd >= 0) {
            close(state_fd);
        }
        return out;
    };
    if (state_fd < 0) {
        return slots.empty() ? out
                             : give_up(std::to_string(slots.size()) +
                                       " stored descriptors without the state they belong to");
    }
    std::vector<std::byte> bytes;
    std::string error;
    if (!read_sealed_memfd(state_fd, max_bytes, bytes, error)) {
        return give_up(error);
    }
    close(state_fd);
    state_fd = -1;
    out.state = parse_envelope(bytes, error);
    if (!out.state) {
        return give_up(error);
    }
    // A slot's descriptor goes to its first index; later indexes of the same slot get copies.
    std::map<uint32_t, int> taken;
    for (const uint32_t slot : out.state->slot_of) {
        int fd = -1;
        if (const auto t = taken.find(slot); t != taken.end()) {
            fd = fcntl(t->second, F_DUPFD_CLOEXEC, listen_fds_start);
        } else if (const auto it = slots.find(slot); it != slots.end()) {
            fd = it->second;
            slots.erase(it);
            taken[slot] = fd;
        } else {
            fd = hung_up_socket();
            ++out.missing;
        }
        if (fd < 0) {
            return give_up(errno_text("putting the stored descriptors back"));
        }
        out.fds.push_back(fd);
    }
    for (auto& [slot, fd] : slots) {
        close(fd);  // a slot no index names
    }
    return out;
}

bool remove_from_store(const std::string& notify_socket, const std::vector<std::string>& names,
                       std::string& error) {
    notify_connection to(notify_socket, error);
    if (!to.ok()) {
        return false;
    }
    for (const auto& name : names) {
        if (!to.send(remove_message(name), {}, error)) {
            return false;
        }
    }
    // Once it returns the manager has closed its copies: a single-queue tap, say, is free to
    // attach again.
    return barrier(to, barrier_timeout, error);
}

}  // namespace jakiro::handover
