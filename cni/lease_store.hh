#pragma once
// The plugin's IPAM and its record of what ADD made: one file per leased address,
// <data_dir>/<network>/<address>, holding the container, interface and vNIC it belongs to.
// Every read-modify-write of leases (and of the host YAML) happens under host_lock, one
// lock file per data_dir, so two ADDs never take one address.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace jakiro::cni {

// flock(2) on <data_dir>/lock, waited for at most `timeout_ms`; released by the destructor
// (and by the kernel if the plugin dies).
class host_lock {
  public:
    host_lock(const std::string& data_dir, unsigned timeout_ms);
    ~host_lock();
    host_lock(const host_lock&) = delete;
    host_lock& operator=(const host_lock&) = delete;
    bool held() const { return _fd >= 0; }
    const std::string& error() const { return _error; }

  private:
    int _fd = -1;
    std::string _error;
};

struct lease {
    uint32_t ip = 0;  // host order
    std::string container_id;
    std::string ifname;
    std::string vnic;
};

class lease_store {
  public:
    lease_store(std::string data_dir, std::string network);

    // Every lease of the network; files that are no lease are skipped.
    std::vector<lease> all() const;
    std::optional<lease> find(const std::string& container_id, const std::string& ifname) const;
    // Writes the lease file (fsync'd, renamed into place); false with `error`.
    bool put(const lease& l, std::string& error) const;
    // Removes it, and the network's directory with its last lease; an absent file is no error.
    bool erase(uint32_t ip, std::string& error) const;
    std::string directory() const { return _dir; }

  private:
    std::string _dir;
};

// The lowest address of [first, last] not in `taken`; `wanted` if given and free.
std::optional<uint32_t> pick_address(uint32_t first, uint32_t last, const std::set<uint32_t>& taken,
                                     std::optional<uint32_t> wanted);

// mkdir -p with mode 0700 for what it creates.
bool make_directories(const std::string& path, std::string& error);

}  // namespace jakiro::cni
