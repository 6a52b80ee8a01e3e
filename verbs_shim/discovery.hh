#pragma once
// Where this process's vNIC is: the verbs socket of the network namespace's eth0, found by its
// MAC (jakirod names sockets after vNIC MACs), or the one JAKIRO_VERBS_SOCKET names.

#include <cstdint>
#include <string>

namespace jakiro::shim {

constexpr const char* socket_dir = "/run/jakiro/verbs";
constexpr const char* tenant_netdev = "eth0";  // DESIGN.md §9: a tenant sees one eth0

struct vnic_socket {
    std::string path;
    bool explicit_path = false;  // from JAKIRO_VERBS_SOCKET: failures are worth a warning
};

// False when there is no override and no eth0 (not a tenant namespace).
bool find_vnic_socket(vnic_socket& out);

// "<dir>/aa:bb:cc:dd:ee:ff.sock"
std::string socket_path_for_mac(const uint8_t mac[6], const char* dir = socket_dir);

// The MAC of `ifname` in the caller's network namespace (SIOCGIFHWADDR: unlike /sys, always
// the namespace the process is in).
bool netdev_mac(const char* ifname, uint8_t mac[6]);

// ifindex of the netdev in this namespace that carries `mac`, 0 if none: the GID's netdev.
int netdev_with_mac(const uint8_t mac[6]);

}  // namespace jakiro::shim
