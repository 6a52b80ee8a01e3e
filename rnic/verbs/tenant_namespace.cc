#include "tenant_namespace.hh"

#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

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

bool read_number(const std::string& path, long& out) {
    std::ifstream in(path);
    return static_cast<bool>(in >> out);
}

// In the calling thread's namespace: does interface `ifindex` exist with MAC `mac`?
bool has_interface(int ifindex, const std::array<uint8_t, 6>& mac) {
    char name[IF_NAMESIZE] = {};
    if (if_indextoname(static_cast<unsigned>(ifindex), name) == nullptr) {
        return false;
    }
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return false;
    }
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, name, IF_NAMESIZE);
    const bool ok = ioctl(fd, SIOCGIFHWADDR, &ifr) == 0 &&
                    std::memcmp(ifr.ifr_hwaddr.sa_data, mac.data(), mac.size()) == 0;
    close(fd);
    return ok;
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

bool tenant_namespace::veth_peer(const std::string& port_devargs, const std::array<uint8_t, 6>& mac,
                                 tenant_namespace& out, std::string& error) {
    const std::string iface = devarg(port_devargs, "iface");
    long own_index = 0, peer_index = 0;
    if (iface.empty() || iface.find('/') != std::string::npos ||
        !read_number("/sys/class/net/" + iface + "/ifindex", own_index) ||
        !read_number("/sys/class/net/" + iface + "/iflink", peer_index) ||
        peer_index == own_index) {
        error = "port '" + port_devargs +
                "' is not a veth whose peer jakirod can see; set the vNIC's netns";
        return false;
    }
    DIR* dir = opendir(named_dir);
    if (dir == nullptr) {
        error = std::string("no named network namespaces (") + named_dir + ") to find veth " +
                iface + "'s peer in; set the vNIC's netns";
        return false;
    }
    int found = -1;
    std::string found_name;
    unsigned matches = 0;
    while (const dirent* e = readdir(dir)) {
        if (e->d_name[0] == '.') {
            continue;
        }
        const std::string path = std::string(named_dir) + "/" + e->d_name;
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            continue;
        }
        if (inside(fd, [&] { return has_interface(static_cast<int>(peer_index), mac); })) {
            ++matches;
            if (found >= 0) {
                close(found);
            }
            found = fd;
            found_name = path;
        } else {
            close(fd);
        }
    }
    closedir(dir);
    if (matches != 1) {
        if (found >= 0) {
            close(found);
        }
        error =
            matches == 0
                ? "the peer of veth " + iface + " (ifindex " + std::to_string(peer_index) +
                      ", the vNIC's MAC) is in no named network namespace; set "
                      "the vNIC's netns"
                : "the peer of veth " + iface + " matches several namespaces; set the vNIC's netns";
        return false;
    }
    return out.adopt(found, found_name + " (peer of veth " + iface + ")", error);
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
