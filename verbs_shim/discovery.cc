#include "verbs_shim/discovery.hh"

#include "verbs_abi/endpoint_address.hh"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace jakiro::verbs_shim {

bool netdev_mac(const char* ifname, uint8_t mac[6]) {
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return false;
    }
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
    const bool ok = ioctl(fd, SIOCGIFHWADDR, &ifr) == 0;
    close(fd);
    if (ok) {
        std::memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
    }
    return ok;
}

int netdev_with_mac(const uint8_t mac[6]) {
    struct if_nameindex* names = if_nameindex();
    if (names == nullptr) {
        return 0;
    }
    int found = 0;
    for (const struct if_nameindex* n = names; n->if_index != 0 && found == 0; ++n) {
        uint8_t m[6];
        if (netdev_mac(n->if_name, m) && std::memcmp(m, mac, 6) == 0) {
            found = static_cast<int>(n->if_index);
        }
    }
    if_freenameindex(names);
    return found;
}

bool find_vnic_socket(vnic_socket& out) {
    if (const char* path = std::getenv("JAKIRO_VERBS_SOCKET"); path != nullptr && *path != '\0') {
        out.path = path;
        out.explicit_path = true;
        return true;
    }
    uint8_t mac[6];
    if (!netdev_mac(tenant_netdev, mac)) {
        return false;
    }
    out.path = verbs_endpoint::by_mac(mac);
    out.explicit_path = false;
    return true;
}

}  // namespace jakiro::verbs_shim
