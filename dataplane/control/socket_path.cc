#include "dataplane/control/socket_path.hh"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace jakiro {

std::optional<socket_file> socket_file_at(const std::string& path) {
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) {
        return std::nullopt;
    }
    return socket_file{st.st_dev, st.st_ino};
}

int bind_unix_listener(const std::string& path, int type, int backlog, int mask,
                       std::string& error) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) {
        error = "socket path too long: " + path;
        return -1;
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        error = path + ": " + std::strerror(errno);
        return -1;
    }
    unlink(path.c_str());
    const mode_t old_mask = mask != process_umask ? umask(static_cast<mode_t>(mask)) : 0;
    const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (mask != process_umask) {
        umask(old_mask);
    }
    if (!bound || listen(fd, backlog) != 0) {
        error = "cannot listen on " + path + ": " + std::strerror(errno);
        close(fd);
        return -1;
    }
    return fd;
}

}  // namespace jakiro
