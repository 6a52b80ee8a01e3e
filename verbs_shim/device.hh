#pragma once
// The shim's devices: one per vNIC this process can reach (today: its namespace's eth0, or
// JAKIRO_VERBS_SOCKET). A device embeds the public ibv_device, as rdma-core providers embed
// theirs in verbs_device, and is reached back through to_device().
//
// Lifetime: devices are never freed. libibverbs also keeps a device alive for as long as a
// context opened on it exists, and a few hundred bytes per vNIC seen are not worth the race.

#include <infiniband/verbs.h>

#include <cstdint>
#include <string_view>

#include "verbs_abi/protocol.hh"

namespace jakiro::verbs_shim {

constexpr uint32_t device_magic = 0x4a4b'4456;         // "VDKJ": a device we made
constexpr const char* device_name_prefix = "jakiro_";  // ibv_get_device_name: jakiro_<vNIC>

struct shim_device {
    ibv_device dev;  // what the application holds; first member (standard layout)
    uint32_t magic;
    int index;  // position in this process's registry: ibv_get_device_index()
    char socket_path[108];
    verbs_proto::hello_reply hello;  // identity at scan time (name, MAC, GUID)
};

// The shim device behind `device`, or nullptr if it is not one of ours.
shim_device* to_device(ibv_device* device);

ibv_device** get_device_list(int* num_devices);
void free_device_list(ibv_device** list);
const char* device_name(ibv_device* device);
uint64_t device_guid(ibv_device* device);  // big-endian, as ibv_get_device_guid returns it
int device_index(ibv_device* device);
// The device named `name` (ibv_get_device_name) among those this process has listed, or nullptr.
const shim_device* find_device(std::string_view name);

}  // namespace jakiro::verbs_shim
