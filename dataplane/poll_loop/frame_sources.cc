#include "dataplane/poll_loop/frame_sources.hh"

#include <dirent.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace jakiro {

namespace {

constexpr auto rescan_period = std::chrono::seconds(1);

// Written by the workers, read before each of their waits; a change is rare (a vNIC running
// out of its allowance), the generation says when.
std::mutex ignored_mutex;
std::vector<int> ignored_fds;
std::atomic<uint64_t> ignored_changes{0};

bool is_tun(const std::string& target) {
    return target == "/dev/net/tun";
}

bool is_packet_socket(int fd) {
    int domain = 0;
    socklen_t len = sizeof(domain);
    return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_PACKET;
}

std::string link_of(int fd) {
    char target[64] = {};
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    return n > 0 ? std::string(target, static_cast<std::size_t>(n)) : std::string();
}

}  // namespace

namespace frame_sources {

bool is_frame_source(int fd) {
    return is_packet_socket(fd) || is_tun(link_of(fd));
}

void ignore(int fd, bool ignored) {
    {
        const std::lock_guard lock(ignored_mutex);
        const auto at = std::find(ignored_fds.begin(), ignored_fds.end(), fd);
        if (ignored && at == ignored_fds.end()) {
            ignored_fds.push_back(fd);
        } else if (!ignored && at != ignored_fds.end()) {
            ignored_fds.erase(at);
        } else {
            return;
        }
    }
    ignored_changes.fetch_add(1, std::memory_order_release);
}

bool is_ignored(int fd) {
    const std::lock_guard lock(ignored_mutex);
    return std::find(ignored_fds.begin(), ignored_fds.end(), fd) != ignored_fds.end();
}

void copy_ignored(std::vector<int>& fds) {
    const std::lock_guard lock(ignored_mutex);
    fds.assign(ignored_fds.begin(), ignored_fds.end());
}

uint64_t ignored_generation() {
    return ignored_changes.load(std::memory_order_acquire);
}

}  // namespace frame_sources

frame_source_set::frame_source_set() : _epoll_fd(epoll_create1(EPOLL_CLOEXEC)) {}

frame_source_set::~frame_source_set() {
    if (_epoll_fd >= 0) {
        close(_epoll_fd);
    }
}

void frame_source_set::refresh(uint64_t publication, const std::vector<int>& others) {
    if (_epoll_fd < 0) {
        return;
    }
    if (publication != _publication ||
        std::chrono::steady_clock::now() - _scanned >= rescan_period) {
        _publication = publication;
        scan(others);
    } else if (frame_sources::ignored_generation() != _ignored_generation) {
        apply_ignored();
    }
}

void frame_source_set::scan(const std::vector<int>& others) {
    _scanned = std::chrono::steady_clock::now();
    std::unordered_map<int, source> found;
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) {
        return;
    }
    while (const dirent* e = readdir(dir)) {
        char* end = nullptr;
        const long n = std::strtol(e->d_name, &end, 10);
        const int fd = static_cast<int>(n);
        if (end == e->d_name || *end != '\0' || fd == dirfd(dir) || fd == _epoll_fd ||
            std::find(others.begin(), others.end(), fd) != others.end()) {
            continue;
        }
        std::string link = link_of(fd);
        const auto known = _watched.find(fd);
        if (known != _watched.end() && known->second.link == link) {
            found.emplace(fd, known->second);  // the same file: asked about once
            continue;
        }
        const bool frames = link.starts_with("socket:") ? is_packet_socket(fd) : is_tun(link);
        if (!frames) {
            continue;
        }
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        // A reused number: the closed file left the set by itself, the new one joins it.
        if (epoll_ctl(_epoll_fd, EPOLL_CTL_ADD, fd, &ev) == 0 ||
            (errno == EEXIST && epoll_ctl(_epoll_fd, EPOLL_CTL_MOD, fd, &ev) == 0)) {
            found.emplace(fd, source{std::move(link), false});
        }
    }
    closedir(dir);
    for (const auto& [fd, watched] : _watched) {
        if (!found.contains(fd)) {
            epoll_ctl(_epoll_fd, EPOLL_CTL_DEL, fd, nullptr);  // ENOENT/EBADF if it was closed
        }
    }
    _watched = std::move(found);
    apply_ignored();
}

void frame_source_set::apply_ignored() {
    // The generation first: a change after the copy moves it again and is applied next time.
    _ignored_generation = frame_sources::ignored_generation();
    frame_sources::copy_ignored(_ignored);
    for (auto& [fd, watched] : _watched) {
        const bool ignored = std::find(_ignored.begin(), _ignored.end(), fd) != _ignored.end();
        if (ignored == watched.ignored) {
            continue;
        }
        epoll_event ev{};
        ev.events = ignored ? 0u : static_cast<uint32_t>(EPOLLIN);
        ev.data.fd = fd;
        if (epoll_ctl(_epoll_fd, EPOLL_CTL_MOD, fd, &ev) == 0) {
            watched.ignored = ignored;
            ++_ignore_changes;
        }
    }
}

}  // namespace jakiro
