#include "rnic/verbs/tenant_namespace.hh"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "rnic/verbs/link_netns.hh"
#include "verbs_abi/endpoint_address.hh"

namespace jakiro::verbs {

namespace {

constexpr const char* named_dir = "/run/netns";  // where `ip netns add` pins namespaces

// Runs `fn` on a thread of its own that first joins namespace `fd`: setns(CLONE_NEWNET) moves
// only the calling thread, and a fresh thread leaves every other one (the workers, the
// control thread) where it was. Sockets it creates stay in that namespace for good.
template <typename Fn>
auto inside(int fd, Fn fn) -> decltype(fn()) {
    decltype(fn()) result{};
    int join_error = 0;
    std::thread t([&] {
        if (setns(fd, CLONE_NEWNET) != 0) {
            join_error = errno;
            return;
        }
        result = fn();
    });
    t.join();
    if (join_error != 0) {
        errno = join_error;
        return decltype(fn()){};
    }
    return result;
}

std::string devarg(const std::string& devargs, const std::string& key) {
    const std::string needle = key + "=";
    // "net_af_packet1,iface=t1" (DPDK vdev) or "vnet:iface=t1" (vnet face).
    for (std::size_t pos = devargs.find_first_of(",:"); pos != std::string::npos;
         pos = devargs.find_first_of(",:", pos + 1)) {
        if (devargs.compare(pos + 1, needle.size(), needle) == 0) {
            const std::size_t start = pos + 1 + needle.size();
            return devargs.substr(start, devargs.find(',', start) - start);
        }
    }
    return {};
}

// Calls `fn(fd, description)` with a descriptor of every network namespace jakirod can find,
// each once, until it returns true (it then owns the descriptor): the named ones first
// (/run/netns, `ip netns`), then those of running processes (a container's), which need no
// name. Returns whether `fn` took one.
template <typename Fn>
bool find_namespace(Fn fn) {
    std::vector<std::pair<dev_t, ino_t>> seen;
    auto offer = [&](const std::string& path, const std::string& description) {
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st {};
        if (fd < 0) {
            return false;
        }
        if (fstat(fd, &st) != 0 ||
            std::find(seen.begin(), seen.end(), std::pair{st.st_dev, st.st_ino}) != seen.end()) {
            close(fd);
            return false;
        }
        seen.emplace_back(st.st_dev, st.st_ino);
        if (fn(fd, description)) {
            return true;
        }
        close(fd);
        return false;
    };
    auto each_entry = [&](const char* dir, auto visit) {
        DIR* d = opendir(dir);
        if (d == nullptr) {
            return false;
        }
        bool taken = false;
        while (const dirent* e = readdir(d)) {
            if (e->d_name[0] != '.' && visit(std::string(e->d_name))) {
                taken = true;
                break;
            }
        }
        closedir(d);
        return taken;
    };
    return each_entry(named_dir,
                      [&](const std::string& name) {
                          const std::string path = std::string(named_dir) + "/" + name;
                          return offer(path, path);
                      }) ||
           each_entry("/proc", [&](const std::string& pid) {
               return pid.find_first_not_of("0123456789") == std::string::npos &&
                      offer("/proc/" + pid + "/ns/net", "the namespace of pid " + pid);
           });
}

}  // namespace

tenant_namespace::~tenant_namespace() {
    if (_fd >= 0) {
        close(_fd);
    }
}

tenant_namespace::tenant_namespace(tenant_namespace&& other) noexcept {
    *this = std::move(other);
}

tenant_namespace& tenant_namespace::operator=(tenant_namespace&& other) noexcept {
    if (this != &other) {
        if (_fd >= 0) {
            close(_fd);
        }
        _fd = std::exchange(other._fd, -1);
        _dev = other._dev;
        _ino = other._ino;
        _description = std::move(other._description);
    }
    return *this;
}

bool tenant_namespace::adopt(int fd, std::string description, std::string& error) {
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0) {
        error = description + ": " + std::strerror(errno);
        if (fd >= 0) {
            close(fd);
        }
        return false;
    }
    if (_fd >= 0) {
        close(_fd);
    }
    _fd = fd;
    _dev = st.st_dev;
    _ino = st.st_ino;
    _description = std::move(description);
    return true;
}

bool tenant_namespace::own(tenant_namespace& out, std::string& error) {
    return out.adopt(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC),
                     "jakirod's own namespace", error);
}

bool tenant_namespace::named(const std::string& name, tenant_namespace& out, std::string& error) {
    const std::string path = std::string(named_dir) + "/" + name;
    return out.adopt(open(path.c_str(), O_RDONLY | O_CLOEXEC), path, error);
}

bool tenant_namespace::veth_peer(const std::string& port_devargs, tenant_namespace& out,
                                 std::string& error) {
    const std::string iface = devarg(port_devargs, "iface");
    rtnl_socket rtnl;
    int32_t nsid = -1;
    std::string why;
    if (iface.empty() || !rtnl.veth_peer_nsid(iface, nsid, why)) {
        error = "port '" + port_devargs + "': " + (iface.empty() ? "no veth named" : why) +
                "; set the vNIC's netns";
        return false;
    }
    const bool found = find_namespace([&](int fd, const std::string& description) {
        if (rtnl.nsid_of(fd) != nsid) {
            return false;
        }
        std::string adopt_error;
        out.adopt(fd, description + " (peer of veth " + iface + ")", adopt_error);
        return true;
    });
    if (!found || !out.valid()) {
        error = "the peer of veth " + iface + " (namespace id " + std::to_string(nsid) +
                ") is in no namespace jakirod can open; set the vNIC's netns";
        return false;
    }
    return true;
}

int tenant_namespace::listen_inside(const std::string& address, int backlog,
                                    std::string& error) const {
    sockaddr_un addr{};
    socklen_t len = 0;
    if (!verbs_endpoint::to_sockaddr(address, addr, len)) {
        error = "endpoint address too long: " + address;
        return -1;
    }
    struct result {
        int fd = -1;
        int error = 0;
    };
    const result r = inside(_fd, [&] {
        result out;
        out.fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (out.fd < 0 || bind(out.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
            listen(out.fd, backlog) != 0) {
            out.error = errno;
            if (out.fd >= 0) {
                close(out.fd);
            }
            out.fd = -1;
        }
        return out;
    });
    if (r.fd < 0) {
        const int e = r.error != 0 ? r.error : errno;
        error = "cannot listen on " + address + " in " + _description + ": " +
                (e == EADDRINUSE ? "another process serves it" : std::strerror(e));
    }
    return r.fd;
}

bool tenant_namespace::holds_process(pid_t pid) const {
    if (pid <= 0) {
        return false;
    }
    struct stat st {};
    const std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
    return stat(path.c_str(), &st) == 0 && st.st_dev == _dev && st.st_ino == _ino;
}

}  // namespace jakiro::verbs
