#include "handover/listen_fds.hh"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>

namespace jakiro::handover {

namespace {

// A decimal number and nothing else (strtol accepts signs, spaces and trailing text).
bool parse_number(const char* text, long max, long& out) {
    if (text == nullptr || *text == '\0') {
        return false;
    }
    long value = 0;
    for (const char* p = text; *p != '\0'; ++p) {
        if (*p < '0' || *p > '9') {
            return false;
        }
        value = value * 10 + (*p - '0');
        if (value > max) {
            return false;
        }
    }
    out = value;
    return true;
}

}  // namespace

listen_fds parse_listen_fds(const char* listen_pid, const char* listen_fds_text,
                            const char* listen_fdnames, pid_t self) {
    listen_fds out;
    if (listen_pid == nullptr && listen_fds_text == nullptr) {
        return out;
    }
    long pid = 0;
    if (!parse_number(listen_pid, 1L << 30, pid)) {
        out.ignored = listen_pid == nullptr
                          ? "LISTEN_FDS without LISTEN_PID"
                          : "LISTEN_PID '" + std::string(listen_pid) + "' is not a process id";
        return out;
    }
    if (pid != self) {
        out.ignored = "LISTEN_PID " + std::to_string(pid) + " is another process (this is " +
                      std::to_string(self) + ")";
        return out;
    }
    long count = 0;
    if (!parse_number(listen_fds_text, max_listen_fds, count)) {
        out.ignored = listen_fds_text == nullptr ? "LISTEN_PID without LISTEN_FDS"
                                                 : "LISTEN_FDS '" + std::string(listen_fds_text) +
                                                       "' is not a number of descriptors (0.." +
                                                       std::to_string(max_listen_fds) + ")";
        return out;
    }
    std::vector<std::string> names;
    if (listen_fdnames != nullptr) {
        std::string_view rest = listen_fdnames;
        for (;;) {
            const std::size_t colon = rest.find(':');
            names.emplace_back(rest.substr(0, colon));
            if (colon == std::string_view::npos) {
                break;
            }
            rest.remove_prefix(colon + 1);
        }
        if (count == 0 && names.size() == 1 && names[0].empty()) {
            names.clear();
        }
        if (names.size() != static_cast<std::size_t>(count)) {
            out.ignored = "LISTEN_FDNAMES names " + std::to_string(names.size()) +
                          " descriptors, LISTEN_FDS says " + std::to_string(count);
            return out;
        }
    } else {
        names.assign(static_cast<std::size_t>(count), "unknown");
    }
    for (long i = 0; i < count; ++i) {
        out.fds.push_back({listen_fds_start + static_cast<int>(i),
                           std::move(names[static_cast<std::size_t>(i)])});
    }
    return out;
}

listen_fds take_listen_fds() {
    listen_fds out = parse_listen_fds(std::getenv("LISTEN_PID"), std::getenv("LISTEN_FDS"),
                                      std::getenv("LISTEN_FDNAMES"), getpid());
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    std::vector<passed_fd> open;
    for (auto& p : out.fds) {
        const int flags = fcntl(p.fd, F_GETFD);
        if (flags < 0) {
            out.ignored += (out.ignored.empty() ? "" : "; ") + std::string("descriptor ") +
                           std::to_string(p.fd) + " ('" + p.name + "') is not open";
            continue;
        }
        fcntl(p.fd, F_SETFD, flags | FD_CLOEXEC);
        open.push_back(std::move(p));
    }
    out.fds = std::move(open);
    return out;
}

}  // namespace jakiro::handover
