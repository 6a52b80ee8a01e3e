#include "verbs_shim/sysfs_files.hh"

#include <fcntl.h>
#include <net/if.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>

#include "verbs_shim/device.hh"
#include "verbs_shim/discovery.hh"

namespace jakiro::verbs_shim::sysfs_files {

namespace {

constexpr std::string_view gid_types_dir = "/ports/1/gid_attrs/types/";
constexpr std::string_view gid_ndevs_dir = "/ports/1/gid_attrs/ndevs/";
// The kernel's name for the GID type of every entry of a vNIC's table (ib_cache_gid_type_str).
constexpr const char* roce_v2_type = "RoCE v2";

// A vNIC's GID table: index 0, its IPv4 address as a RoCE v2 GID, and index 1, its IPv6 address,
// when it has one (jakirod's rnic/verbs/device_model.cc reports gid_tbl_len 1 or 2 in every port
// query, as the hello says).
unsigned vnic_gid_entries(const shim_device& d) {
    static constexpr uint8_t none[sizeof(d.hello.ipv6)] = {};
    return std::memcmp(d.hello.ipv6, none, sizeof(none)) != 0 ? 2 : 1;
}

// `rest` is a decimal GID index inside the table, as the kernel names the files.
bool valid_gid_index(const shim_device& d, std::string_view rest) {
    unsigned index = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), index);
    return !rest.empty() && ec == std::errc{} && end == rest.data() + rest.size() &&
           index < vnic_gid_entries(d);
}

// The netdev carrying device `d`'s vNIC MAC in this namespace, or "" if none does.
std::string netdev_of(const shim_device& d) {
    char name[IF_NAMESIZE] = {};
    const int ifindex = netdev_with_mac(d.hello.mac);
    if (ifindex <= 0 || if_indextoname(static_cast<unsigned>(ifindex), name) == nullptr) {
        return {};
    }
    return name;
}

// The device named `name`, listing this process's devices first if it has not yet.
const shim_device* device_named(std::string_view name) {
    if (!name.starts_with(device_name_prefix)) {
        return nullptr;
    }
    const shim_device* d = find_device(name);
    if (d == nullptr) {
        // A program that reads sysfs before (or without) listing devices, like cat: list them
        // now, so the files agree with ibv_get_device_list.
        free_device_list(get_device_list(nullptr));
        d = find_device(name);
    }
    return d;
}

}  // namespace

bool directory_entries(const char* path, std::vector<dir_entry>& entries) {
    entries.clear();
    if (path == nullptr) {
        return false;
    }
    std::string_view p(path);
    while (p.size() > 1 && p.back() == '/') {
        p.remove_suffix(1);
    }
    const std::string_view root(infiniband_class, std::strlen(infiniband_class) - 1);
    if (p == root) {
        ibv_device** list = get_device_list(nullptr);
        for (ibv_device** d = list; d != nullptr && *d != nullptr; ++d) {
            entries.push_back({device_name(*d), true});
        }
        free_device_list(list);
        return !entries.empty();  // no device: no class directory, as without the module
    }
    if (!p.starts_with(infiniband_class)) {
        return false;
    }
    std::string_view rest = p.substr(std::strlen(infiniband_class));
    const auto slash = rest.find('/');
    const shim_device* d = device_named(rest.substr(0, slash));
    if (d == nullptr) {
        return false;
    }
    const std::string_view below = slash == std::string_view::npos ? "" : rest.substr(slash);
    const std::string netdev = netdev_of(*d);
    if (below.empty()) {
        entries = {{"device", true}, {"ports", true}};
    } else if (below == "/device") {
        entries = {{"net", true}};
    } else if (below == "/device/net") {
        if (!netdev.empty()) {
            entries = {{netdev, true}};
        }
    } else if (!netdev.empty() && below == "/device/net/" + netdev) {
        // the interface's own directory: nothing of it is emulated
    } else if (below == "/ports") {
        entries = {{"1", true}};
    } else if (below == "/ports/1") {
        entries = {{"gid_attrs", true}};
    } else if (below == "/ports/1/gid_attrs") {
        entries = {{"ndevs", true}, {"types", true}};
    } else if (below == "/ports/1/gid_attrs/types" || below == "/ports/1/gid_attrs/ndevs") {
        for (unsigned i = 0; i < vnic_gid_entries(*d); ++i) {
            entries.push_back({std::to_string(i), false});
        }
    } else {
        return false;
    }
    return true;
}

bool attribute_text(const char* path, std::string& text) {
    if (path == nullptr ||
        std::strncmp(path, infiniband_class, std::strlen(infiniband_class)) != 0) {
        return false;
    }
    const std::string_view rest(path + std::strlen(infiniband_class));
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos) {
        return false;
    }
    const shim_device* d = device_named(rest.substr(0, slash));
    if (d == nullptr) {
        return false;
    }
    const std::string_view attribute = rest.substr(slash);
    if (attribute.starts_with(gid_types_dir) &&
        valid_gid_index(*d, attribute.substr(gid_types_dir.size()))) {
        text = std::string(roce_v2_type) + "\n";
        return true;
    }
    if (attribute.starts_with(gid_ndevs_dir) &&
        valid_gid_index(*d, attribute.substr(gid_ndevs_dir.size()))) {
        const std::string netdev = netdev_of(*d);
        if (netdev.empty()) {
            return false;  // no netdev carries the vNIC's MAC here: the kernel has no entry
        }
        text = netdev + "\n";
        return true;
    }
    return false;
}

int open_attribute(const std::string& text, int flags) {
    if ((flags & O_ACCMODE) != O_RDONLY) {
        errno = EACCES;  // sysfs attributes of a GID are read-only (0444)
        return -1;
    }
    const int fd = memfd_create("jakiro-sysfs",
                                ((flags & O_CLOEXEC) != 0 ? MFD_CLOEXEC : 0) | MFD_ALLOW_SEALING);
    if (fd < 0) {
        return -1;
    }
    const bool written =
        pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size());
    if (!written || fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK) != 0) {
        const int error = written ? errno : EIO;
        close(fd);
        errno = error;
        return -1;
    }
    return fd;
}

}  // namespace jakiro::verbs_shim::sysfs_files
