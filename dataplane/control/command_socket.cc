#include "command_socket.hh"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

namespace jakiro {

namespace {

constexpr int poll_interval_ms = 200;  // how quickly stop() is noticed
constexpr const char* busy_reply = "ERR busy: too many control connections\n";

using clock = std::chrono::steady_clock;

std::string directory_of(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

struct connection {
    int fd = -1;
    std::string in;
    std::string out;
    std::size_t sent = 0;
    bool replying = false;
    clock::time_point deadline;
};

}  // namespace

command_socket::command_socket(std::string path, handler on_line, limits lim)
    : _path(std::move(path)), _on_line(std::move(on_line)), _limits(lim) {}

command_socket::~command_socket() {
    stop();
}

bool command_socket::start(std::string& error) {
    if (_path.size() >= sizeof(sockaddr_un::sun_path)) {
        error = "control socket path too long: " + _path;
        return false;
    }
    mkdir(directory_of(_path).c_str(), 0755);
    _listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, _path.c_str(), sizeof(addr.sun_path) - 1);
    // A socket file left by a crashed daemon is stale if nobody accepts on it. (A blocking
    // probe: a non-blocking connect to a full backlog would look like nobody.)
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool taken =
        probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (probe >= 0) {
        close(probe);
    }
    if (taken) {
        error = "another jakirod is serving " + _path;
        close(_listen_fd);
        _listen_fd = -1;
        return false;
    }
    unlink(_path.c_str());
    if (bind(_listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(_listen_fd, 16) != 0) {
        error = "cannot listen on " + _path + ": " + std::strerror(errno);
        close(_listen_fd);
        _listen_fd = -1;
        return false;
    }
    _stopping = false;
    _thread = std::thread([this] { serve(); });
    return true;
}

void command_socket::stop() {
    _stopping = true;
    if (_thread.joinable()) {
        _thread.join();
    }
    if (_listen_fd >= 0) {
        close(_listen_fd);
        unlink(_path.c_str());
        _listen_fd = -1;
    }
}

void command_socket::serve() {
    std::vector<connection> clients;
    std::vector<pollfd> fds;
    const auto read_deadline = std::chrono::milliseconds(_limits.read_deadline_ms);
    const auto write_deadline = std::chrono::milliseconds(_limits.write_deadline_ms);

    // Sends what the socket takes now; true once the whole reply is gone (or the client is).
    auto flush = [](connection& c) {
        while (c.sent < c.out.size()) {
            const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent,
                                   MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? false : true;
            }
            c.sent += static_cast<std::size_t>(n);
        }
        return true;
    };
    auto answer = [&](connection& c) {
        c.out = _on_line(c.in.substr(0, c.in.find('\n')));
        c.in.clear();
        c.replying = true;
        c.deadline = clock::now() + write_deadline;
        return flush(c);
    };

    while (!_stopping) {
        fds.clear();
        fds.push_back({_listen_fd, POLLIN, 0});
        auto wake = clock::now() + std::chrono::milliseconds(poll_interval_ms);
        for (const auto& c : clients) {
            fds.push_back({c.fd, static_cast<short>(c.replying ? POLLOUT : POLLIN), 0});
            wake = std::min(wake, c.deadline);
        }
        const auto wait =
            std::chrono::duration_cast<std::chrono::milliseconds>(wake - clock::now());
        if (poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait.count(), 0)) + 1) <
            0) {
            continue;  // EINTR
        }
        // Clients first (their pollfds follow the listener's, in order), then new ones.
        std::vector<bool> done(clients.size(), false);
        const auto now = clock::now();
        for (std::size_t i = 0; i < clients.size(); ++i) {
            connection& c = clients[i];
            const short events = fds[i + 1].revents;
            if (c.replying) {
                if ((events & (POLLOUT | POLLERR | POLLHUP)) != 0) {
                    done[i] = flush(c);
                }
            } else if ((events & (POLLIN | POLLERR | POLLHUP)) != 0) {
                char buffer[512];
                const ssize_t n = read(c.fd, buffer, sizeof(buffer));
                if (n > 0) {
                    c.in.append(buffer, static_cast<std::size_t>(n));
                }
                // A line, a full buffer, or the client stopped sending: answer what came.
                if (c.in.find('\n') != std::string::npos || c.in.size() >= _limits.max_command ||
                    n == 0) {
                    c.in.resize(std::min(c.in.size(), _limits.max_command));
                    done[i] = answer(c);
                } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                    done[i] = true;
                }
            }
            if (!done[i] && now >= c.deadline) {
                done[i] = true;  // too slow to ask, or not reading its reply: dropped
                _dropped.fetch_add(1, std::memory_order_relaxed);
            }
        }
        for (std::size_t i = clients.size(); i-- > 0;) {
            if (done[i]) {
                close(clients[i].fd);
                clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
            }
        }
        if ((fds[0].revents & POLLIN) == 0) {
            continue;
        }
        for (;;) {
            const int fd = accept4(_listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) {
                break;
            }
            if (clients.size() >= _limits.max_clients) {
                (void)!send(fd, busy_reply, std::strlen(busy_reply), MSG_NOSIGNAL | MSG_DONTWAIT);
                close(fd);
                continue;
            }
            connection c;
            c.fd = fd;
            c.deadline = clock::now() + read_deadline;
            clients.push_back(std::move(c));
        }
    }
    for (auto& c : clients) {
        close(c.fd);
    }
}

}  // namespace jakiro
