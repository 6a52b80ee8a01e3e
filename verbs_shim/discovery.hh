#pragma once
// Where this process's vNIC is: the endpoint of the network namespace's eth0, found by its MAC
// (jakirod binds @jakiro/verbs/mac/<mac> inside the tenant's namespace: endpoint_address.hh), or
// the one JAKIRO_VERBS_SOCKET names ("@abstract" or a path).

#include <cstdint>
#include <string>

namespace jakiro::verbs_shim {

constexpr const char* tenant_netdev = "eth0";  // docs/testbed.md: a tenant sees one eth0

struct vnic_socket {
    std::string path;
    bool explicit_path = false;  // from JAKIRO_VERBS_SOCKET: failures are worth a warning
};

// False when there is no override and no eth0 (not a tenant namespace).
bool find_vnic_socket(vnic_socket& out);

// The MAC of `ifname` in the caller's network namespace (SIOCGIFHWADDR: unlike /sys, always
// the namespace the process is in).
bool netdev_mac(const char* ifname, uint8_t mac[6]);

// ifindex of the netdev in this namespace that carries `mac`, 0 if none: the GID's netdev.
int netdev_with_mac(const uint8_t mac[6]);

}  // namespace jakiro::verbs_shim
