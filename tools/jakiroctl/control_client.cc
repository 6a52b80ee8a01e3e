#include "tools/jakiroctl/control_client.hh"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

namespace {
constexpr int reply_timeout_ms = 5000;
}  // namespace

int ask(const std::string& path, const std::string& command, std::string& body) {
    std::string error;
    const int status = ask(path, command, body, error);
    if (status != 0) {
        std::cerr << "jakiroctl: " << error.substr(0, error.find('\n')) << "\n";
    }
    return status;
}

int ask(const std::string& path, const std::string& command, std::string& body,
        std::string& error) {
    sockaddr_un addr{};
    if (path.size() >= sizeof(addr.sun_path)) {
        error = "socket path too long";
        return 2;
    }
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        error = "cannot reach jakirod at " + path + ": " + std::strerror(errno);
        close(fd);
        return 2;
    }
    const std::string line = command + "\n";
    if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
        error = "cannot send to " + path;
        close(fd);
        return 2;
    }
    std::string reply;
    char buffer[4096];
    for (;;) {
        pollfd in{fd, POLLIN, 0};
        if (poll(&in, 1, reply_timeout_ms) <= 0) {
            error = "no reply from " + path + " within 5 s";
            close(fd);
            return 2;
        }
        const ssize_t n = read(fd, buffer, sizeof(buffer));
        if (n <= 0) {
            break;
        }
        reply.append(buffer, static_cast<std::size_t>(n));
    }
    close(fd);
    const auto newline = reply.find('\n');
    const std::string head = reply.substr(0, newline);
    if (head == "OK") {
        body = newline == std::string::npos ? "" : reply.substr(newline + 1);
        return 0;
    }
    // The whole refusal: an apply's errors follow its first line, one per line.
    error = head.rfind("ERR ", 0) == 0 ? reply.substr(4) : reply;
    while (!error.empty() && error.back() == '\n') {
        error.pop_back();
    }
    return 1;
}
