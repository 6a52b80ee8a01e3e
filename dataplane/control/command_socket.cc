#include "dataplane/control/command_socket.hh"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
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
constexpr const char* http_busy_reply =
    "HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

using clock = std::chrono::steady_clock;

std::string directory_of(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

struct connection {
    int fd = -1;
    bool http = false;  // came through the HTTP listener
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

void command_socket::reclaim_path() {
    post([this] {
        if (_listen_fd < 0 || socket_file_at(_path) == _bound) {
            return;
        }
        std::string error;
        const int fd = bind_unix_listener(_path, SOCK_STREAM, 16, process_umask, error);
        if (fd < 0) {
            return;  // the old socket serves on, unreachable by name; nothing better to do
        }
        // A client still in the old socket's queue is dropped (it connected as the take-over
        // failed) and may ask again.
        close(_listen_fd);
        _listen_fd = fd;
        _bound = socket_file_at(_path);
    });
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
    // A successor taking over replaces its predecessor's (docs/restart.md).
    const int probe = _replace ? -1 : socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    _bound = socket_file_at(_path);
    _wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    _stopping = false;
    _thread = std::thread([this] { serve(); });
    return true;
}

int command_socket::open_tcp_listener(uint32_t ip, uint16_t port, std::string& error) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        error = std::string("socket: ") + std::strerror(errno);
        return -1;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(ip);
    addr.sin_port = htons(port);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0) {
        char text[INET_ADDRSTRLEN] = "";
        inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
        error = "cannot listen on " + std::string(text) + ":" + std::to_string(port) + ": " +
                std::strerror(errno);
        close(fd);
        return -1;
    }
    return fd;
}

void command_socket::set_http_listener(int fd, http_handler on_request) {
    if (_http_fd >= 0) {
        close(_http_fd);
    }
    _http_fd = fd;
    _on_http = std::move(on_request);
}

uint16_t command_socket::http_port() const {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    if (_http_fd < 0 || getsockname(_http_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        return 0;
    }
    return ntohs(addr.sin_port);
}

void command_socket::set_tick(std::function<void()> fn, int interval_ms) {
    _tick = std::move(fn);
    _tick_interval_ms = interval_ms;
}

void command_socket::post(std::function<void()> fn) {
    {
        std::lock_guard lock(_posted_mutex);
        _posted.push_back(std::move(fn));
    }
    if (_wake_fd >= 0) {
        const uint64_t one = 1;
        (void)!write(_wake_fd, &one, sizeof(one));
    }
}

void command_socket::run_posted() {
    uint64_t count = 0;
    (void)!read(_wake_fd, &count, sizeof(count));
    std::vector<std::function<void()>> posted;
    {
        std::lock_guard lock(_posted_mutex);
        posted.swap(_posted);
    }
    for (auto& fn : posted) {
        fn();
    }
}

void command_socket::stop() {
    _stopping = true;
    if (_thread.joinable()) {
        _thread.join();
    }
    if (_listen_fd >= 0) {
        close(_listen_fd);
        if (socket_file_at(_path) == _bound) {
            unlink(_path.c_str());  // not a path another process has bound since
        }
        _listen_fd = -1;
    }
    if (_http_fd >= 0) {
        close(_http_fd);
        _http_fd = -1;
    }
    if (_wake_fd >= 0) {
        close(_wake_fd);
        _wake_fd = -1;
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
        if (c.http) {
            c.out = _on_http ? _on_http(c.in) : std::string("HTTP/1.0 503 Unavailable\r\n\r\n");
        } else {
            c.out = _on_line(c.in.substr(0, c.in.find('\n')));
        }
        c.in.clear();
        c.replying = true;
        c.deadline = clock::now() + write_deadline;
        return flush(c);
    };

    // An HTTP request is complete at its blank line (the head is all GET needs).
    auto complete = [&](const connection& c) {
        if (!c.http) {
            return c.in.find('\n') != std::string::npos || c.in.size() >= _limits.max_command;
        }
        return c.in.find("\r\n\r\n") != std::string::npos ||
               c.in.find("\n\n") != std::string::npos || c.in.size() >= _limits.max_http_request;
    };
    auto next_tick = clock::now();
    constexpr std::size_t fixed = 3;  // the Unix listener, the HTTP listener, the eventfd

    while (!_stopping) {
        if (_tick && clock::now() >= next_tick) {
            _tick();
            next_tick = clock::now() + std::chrono::milliseconds(_tick_interval_ms);
        }
        fds.clear();
        fds.push_back({_listen_fd, POLLIN, 0});
        fds.push_back({_http_fd, POLLIN, 0});  // -1 is ignored by poll()
        fds.push_back({_wake_fd, POLLIN, 0});
        auto wake = clock::now() + std::chrono::milliseconds(poll_interval_ms);
        if (_tick) {
            wake = std::min(wake, next_tick);
        }
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
        if ((fds[2].revents & POLLIN) != 0) {
            run_posted();
        }
        // Clients first (their pollfds follow the fixed ones, in order), then new ones.
        std::vector<bool> done(clients.size(), false);
        const auto now = clock::now();
        for (std::size_t i = 0; i < clients.size(); ++i) {
            connection& c = clients[i];
            const short events = fds[i + fixed].revents;
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
                if (complete(c) || n == 0) {
                    c.in.resize(std::min(c.in.size(),
                                         c.http ? _limits.max_http_request : _limits.max_command));
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
        for (const bool http : {false, true}) {
            // A handler may have replaced the HTTP listener: accept only from the current one.
            const int listener = http ? _http_fd : _listen_fd;
            if ((fds[http ? 1 : 0].revents & POLLIN) == 0 || listener != fds[http ? 1 : 0].fd) {
                continue;
            }
            for (;;) {
                const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                    break;
                }
                if (clients.size() >= _limits.max_clients) {
                    (void)!send(fd, http ? http_busy_reply : busy_reply,
                                std::strlen(http ? http_busy_reply : busy_reply),
                                MSG_NOSIGNAL | MSG_DONTWAIT);
                    close(fd);
                    continue;
                }
                connection c;
                c.fd = fd;
                c.http = http;
                c.deadline = clock::now() + read_deadline;
                clients.push_back(std::move(c));
            }
        }
    }
    for (auto& c : clients) {
        close(c.fd);
    }
}

}  // namespace jakiro
