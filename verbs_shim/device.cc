#include "verbs_shim/device.hh"

#include <endian.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "verbs_shim/channel.hh"
#include "verbs_shim/discovery.hh"

namespace jakiro::verbs_shim {

static_assert(std::is_standard_layout_v<shim_device>);
static_assert(offsetof(shim_device, dev) == 0);

namespace {

std::mutex registry_mutex;
// Leaked on purpose (see device.hh): destructors at exit could race threads still using them.
std::vector<shim_device*>& registry() {
    static auto* devices = new std::vector<shim_device*>;
    return *devices;
}

// The registry entry for this socket and identity, made on first sight.
shim_device* intern(const std::string& path, const verbs_proto::hello_reply& hello) {
    const std::lock_guard lock(registry_mutex);
    for (shim_device* d : registry()) {
        if (path == d->socket_path && std::strcmp(d->hello.vnic_name, hello.vnic_name) == 0 &&
            std::memcmp(d->hello.mac, hello.mac, sizeof(hello.mac)) == 0) {
            return d;
        }
    }
    auto* d = new (std::nothrow) shim_device{};
    if (d == nullptr) {
        return nullptr;
    }
    d->magic = device_magic;
    d->index = static_cast<int>(registry().size());
    d->hello = hello;
    std::snprintf(d->socket_path, sizeof(d->socket_path), "%s", path.c_str());
    // A RoCE HCA as the tools expect one: channel adapter, IB transport (link layer Ethernet
    // is a port attribute). The sysfs paths follow the kernel's naming but do not exist;
    // reads of them fail cleanly (ibv_read_sysfs_file returns -1).
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;
    std::snprintf(d->dev.name, sizeof(d->dev.name), "%s%s", device_name_prefix, hello.vnic_name);
    std::snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs_jakiro_%s", hello.vnic_name);
    std::snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/%s",
                  d->dev.dev_name);
    std::snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s",
                  d->dev.name);
    registry().push_back(d);
    return d;
}

}  // namespace

shim_device* to_device(ibv_device* device) {
    if (device == nullptr) {
        return nullptr;
    }
    auto* d = reinterpret_cast<shim_device*>(device);
    return d->magic == device_magic ? d : nullptr;
}

ibv_device** get_device_list(int* num_devices) {
    // At most one device today; the array of device pointers is NULL-terminated and freed with
    // free() by ibv_free_device_list, as the API requires.
    // NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers is what is asked for
    auto** list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
    if (list == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    int count = 0;
    vnic_socket where;
    if (find_vnic_socket(where)) {
        // A scan is a HELLO on a connection of its own, closed again: jakirod keeps no state
        // for programs that only list devices.
        channel ch;
        verbs_proto::hello_reply hello{};
        int async_fd = -1;
        int error = ch.open(where.path.c_str());
        if (error == 0) {
            error = ch.hello(hello, async_fd);
        }
        if (async_fd >= 0) {
            close(async_fd);
        }
        if (error == 0) {
            if (shim_device* d = intern(where.path, hello)) {
                list[count++] = &d->dev;
            }
        } else if (where.explicit_path || error != ENOENT) {
            // eth0 without a socket is simply not a Jakiro vNIC; anything else is a problem
            // the user wants to hear about, since the program will say "no devices".
            std::fprintf(stderr, "libjakiro_verbs: %s: %s\n", where.path.c_str(),
                         std::strerror(error));
        }
    }
    if (num_devices != nullptr) {
        *num_devices = count;
    }
    return list;
}

void free_device_list(ibv_device** list) {
    std::free(list);
}

const char* device_name(ibv_device* device) {
    shim_device* d = to_device(device);
    if (d == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    return d->dev.name;
}

uint64_t device_guid(ibv_device* device) {
    shim_device* d = to_device(device);
    if (d == nullptr) {
        errno = EINVAL;
        return 0;
    }
    return htobe64(d->hello.node_guid);
}

int device_index(ibv_device* device) {
    shim_device* d = to_device(device);
    if (d == nullptr) {
        errno = EINVAL;
        return -1;
    }
    return d->index;
}

const shim_device* find_device(std::string_view name) {
    const std::lock_guard lock(registry_mutex);
    for (const shim_device* d : registry()) {
        if (name == d->dev.name) {
            return d;
        }
    }
    return nullptr;
}

}  // namespace jakiro::verbs_shim
