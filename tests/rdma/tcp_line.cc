#include "tests/rdma/tcp_line.hh"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "tests/rdma/deadline.hh"

namespace jakiro::rdma_test {

namespace {

// A line longer than this is a protocol error, not something to buffer forever.
constexpr std::size_t max_line = 64 * 1024;

// Waits until `fd` is ready for `events` or the deadline passes.
void wait_fd(int fd, short events, const char* what) {
    for (;;) {
        pollfd p{fd, events, 0};
        const int n = poll(&p, 1, remaining_ms());
        if (n > 0) {
            return;
        }
        if (n == 0) {
            // The program's deadline bounds this wait, and its alarm ends it naming the phase;
            // poll may return a millisecond before the alarm (rounding): wait on for it rather
            // than fail first with another message. Past it, the alarm was never armed.
            if (std::chrono::steady_clock::now() < deadline() + std::chrono::seconds(1)) {
                continue;
            }
            throw test_error(std::string("TCP side channel: timed out ") + what);
        }
        if (errno != EINTR) {
            throw test_error(errno_text(std::string("poll while ") + what));
        }
    }
}

std::string address_text(const sockaddr_in& a) {
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
    return text;
}

}  // namespace

tcp_line tcp_line::accept_one(uint16_t port) {
    auto one = accept_many(port, 1);
    return std::move(one.front());
}

std::vector<tcp_line> tcp_line::accept_many(uint16_t port, std::size_t n) {
    const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) {
        throw test_error(errno_text("socket"));
    }
    const int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(listener, static_cast<int>(n)) != 0) {
        const std::string error = errno_text("listen on TCP port " + std::to_string(port));
        close(listener);
        throw test_error(error);
    }
    std::vector<tcp_line> lines;
    while (lines.size() < n) {
        set_phase("waiting for the client's TCP connection");
        try {
            wait_fd(listener, POLLIN, "waiting for a client");
        } catch (const test_error&) {
            close(listener);
            throw;
        }
        const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            const int saved = errno;
            close(listener);
            errno = saved;
            throw test_error(errno_text("accept"));
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        lines.push_back(tcp_line(fd));
    }
    close(listener);
    return lines;
}

tcp_line tcp_line::connect_to(const std::string& ip, uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
        throw test_error("not an IPv4 address: " + ip);
    }
    set_phase("connecting to the server over TCP");
    for (;;) {
        const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            throw test_error(errno_text("socket"));
        }
        int error = 0;
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
            error = errno;
            if (error == EINPROGRESS) {
                wait_fd(fd, POLLOUT, "connecting");
                socklen_t len = sizeof(error);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
            }
        }
        if (error == 0) {
            const int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            return tcp_line(fd);
        }
        close(fd);
        if (error != ECONNREFUSED && error != ETIMEDOUT && error != EHOSTUNREACH) {
            errno = error;
            throw test_error(errno_text("connect to " + ip + ":" + std::to_string(port)));
        }
        if (remaining_ms() < 300) {
            errno = error;
            throw test_error(errno_text("connect to " + ip + ":" + std::to_string(port)));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

tcp_line::tcp_line(tcp_line&& other) noexcept : _fd(other._fd), _buffer(std::move(other._buffer)) {
    other._fd = -1;
}

tcp_line::~tcp_line() {
    if (_fd >= 0) {
        close(_fd);
    }
}

void tcp_line::send(const std::string& line) {
    const std::string data = line + "\n";
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n =
            ::send(_fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            wait_fd(_fd, POLLOUT, "sending");
        } else if (n < 0 && errno != EINTR) {
            throw test_error(errno_text("TCP side channel: send"));
        }
    }
}

std::string tcp_line::receive() {
    for (;;) {
        const auto newline = _buffer.find('\n');
        if (newline != std::string::npos) {
            std::string line = _buffer.substr(0, newline);
            _buffer.erase(0, newline + 1);
            return line;
        }
        if (_buffer.size() > max_line) {
            throw test_error("TCP side channel: line longer than 64 KiB");
        }
        wait_fd(_fd, POLLIN, "waiting for the peer's message");
        char chunk[4096];
        const ssize_t n = recv(_fd, chunk, sizeof(chunk), MSG_DONTWAIT);
        if (n == 0) {
            throw test_error("TCP side channel: the peer closed the connection");
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                continue;
            }
            throw test_error(errno_text("TCP side channel: recv"));
        }
        _buffer.append(chunk, static_cast<std::size_t>(n));
    }
}

std::vector<std::string> tcp_line::expect(const std::string& keyword) {
    const std::string line = receive();
    auto words = split_words(line);
    if (words.empty() || words[0] != keyword) {
        if (!words.empty() && words[0] == "ABORT") {
            throw test_error("the peer gave up: " +
                             line.substr(std::min<std::size_t>(6, line.size())));
        }
        throw test_error("TCP side channel: expected " + keyword + ", got \"" + line + "\"");
    }
    return words;
}

std::string tcp_line::local_ip() const {
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    getsockname(_fd, reinterpret_cast<sockaddr*>(&a), &len);
    return address_text(a);
}

std::string tcp_line::peer_ip() const {
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    getpeername(_fd, reinterpret_cast<sockaddr*>(&a), &len);
    return address_text(a);
}

std::vector<std::string> split_words(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) {
        words.push_back(w);
    }
    return words;
}

uint64_t parse_u64(const std::string& word, int base) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(word.c_str(), &end, base);
    if (word.empty() || *end != '\0' || errno != 0 || word[0] == '-') {
        throw test_error("not a number: \"" + word + "\"");
    }
    return v;
}

}  // namespace jakiro::rdma_test
