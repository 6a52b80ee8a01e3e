#include "dataplane/service/notify.hh"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace jakiro::service {

bool notify(const std::string& state) {
    const char* path = std::getenv("NOTIFY_SOCKET");
    if (path == nullptr || (path[0] != '/' && path[0] != '@')) {
        return false;
    }
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::size_t length = std::strlen(path);
    if (length >= sizeof(addr.sun_path)) {
        return false;
    }
    std::memcpy(addr.sun_path, path, length);
    if (path[0] == '@') {
        addr.sun_path[0] = '\0';  // abstract namespace; the name is not NUL-terminated
    }
    const socklen_t size =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length + (path[0] == '/'));
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return false;
    }
    const ssize_t sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                                reinterpret_cast<const sockaddr*>(&addr), size);
    close(fd);
    return sent == static_cast<ssize_t>(state.size());
}

std::chrono::microseconds watchdog_period() {
    const char* usec = std::getenv("WATCHDOG_USEC");
    if (usec == nullptr) {
        return std::chrono::microseconds(0);
    }
    if (const char* pid = std::getenv("WATCHDOG_PID");
        pid != nullptr && std::strtol(pid, nullptr, 10) != getpid()) {
        return std::chrono::microseconds(0);
    }
    char* end = nullptr;
    const unsigned long long value = std::strtoull(usec, &end, 10);
    if (end == usec || *end != '\0') {
        return std::chrono::microseconds(0);
    }
    return std::chrono::microseconds(value);
}

}  // namespace jakiro::service
