#include "cni/lease_store.hh"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "dataplane/config/host_config.hh"

namespace jakiro::cni {

bool make_directories(const std::string& path, std::string& error) {
    std::size_t pos = 1;
    while (pos <= path.size()) {
        pos = std::min(path.find('/', pos), path.size());
        const auto part = path.substr(0, pos);
        if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
            error = "cannot create " + part + ": " + std::strerror(errno);
            return false;
        }
        ++pos;
    }
    return true;
}

host_lock::host_lock(const std::string& data_dir, unsigned timeout_ms) {
    if (!make_directories(data_dir, _error)) {
        return;
    }
    const auto path = data_dir + "/lock";
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        _error = "cannot open " + path + ": " + std::strerror(errno);
        return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) {
            _error = "cannot lock " + path + " within " + std::to_string(timeout_ms) + " ms";
            close(fd);
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    _fd = fd;
}

host_lock::~host_lock() {
    if (_fd >= 0) {
        close(_fd);  // releases the flock
    }
}

lease_store::lease_store(std::string data_dir, std::string network)
    : _dir(std::move(data_dir) + "/" + std::move(network)) {}

std::vector<lease> lease_store::all() const {
    std::vector<lease> out;
    DIR* dir = opendir(_dir.c_str());
    if (dir == nullptr) {
        return out;
    }
    while (dirent* entry = readdir(dir)) {
        const auto ip = parse_ipv4(entry->d_name);
        if (!ip) {
            continue;
        }
        std::ifstream in(_dir + "/" + entry->d_name);
        lease l;
        l.ip = *ip;
        if (in >> l.container_id >> l.ifname >> l.vnic) {
            out.push_back(std::move(l));
        }
    }
    closedir(dir);
    return out;
}

std::optional<lease> lease_store::find(const std::string& container_id,
                                       const std::string& ifname) const {
    for (auto& l : all()) {
        if (l.container_id == container_id && l.ifname == ifname) {
            return l;
        }
    }
    return std::nullopt;
}

bool lease_store::put(const lease& l, std::string& error) const {
    if (!make_directories(_dir, error)) {
        return false;
    }
    const auto path = _dir + "/" + format_ipv4(l.ip);
    const auto temp = path + ".new";
    const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        error = "cannot write " + temp + ": " + std::strerror(errno);
        return false;
    }
    const std::string text = l.container_id + " " + l.ifname + " " + l.vnic + "\n";
    const bool written =
        write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
    close(fd);
    if (!written || rename(temp.c_str(), path.c_str()) != 0) {
        error = "cannot write " + path + ": " + std::strerror(errno);
        unlink(temp.c_str());
        return false;
    }
    return true;
}

bool lease_store::erase(uint32_t ip, std::string& error) const {
    const auto path = _dir + "/" + format_ipv4(ip);
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
        error = "cannot remove " + path + ": " + std::strerror(errno);
        return false;
    }
    // The network's last lease takes its directory with it: a removed container leaves
    // nothing behind. Other leases keep it (ENOTEMPTY); put() makes it again under the lock.
    rmdir(_dir.c_str());
    return true;
}

std::optional<uint32_t> pick_address(uint32_t first, uint32_t last, const std::set<uint32_t>& taken,
                                     std::optional<uint32_t> wanted) {
    if (wanted) {
        return taken.count(*wanted) ? std::nullopt : wanted;
    }
    for (uint64_t ip = first; ip <= last; ++ip) {
        if (!taken.count(static_cast<uint32_t>(ip))) {
            return static_cast<uint32_t>(ip);
        }
    }
    return std::nullopt;
}

}  // namespace jakiro::cni
