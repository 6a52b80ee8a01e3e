#pragma once
// Where a vNIC's RDMA face listens (docs/architecture.md §1, docs/threat-model.md): abstract Unix
// socket names, bound by jakirod *inside the tenant's network namespace*. Abstract names are
// private to a network namespace, so a process can only ever reach the vNICs whose endpoints live
// in its own namespace; there is no file a process elsewhere could open. Each vNIC has two names:
//   @jakiro/verbs/mac/<aa:bb:cc:dd:ee:ff>   how the shim finds the vNIC behind eth0
//   @jakiro/verbs/name/<vnic>                what `jakiro-run --vnic NAME` asks for
// An address string starting with '@' is abstract (as ss(8) prints them); anything else is a
// filesystem path (tests that hand jakirod a socket pair need neither).
//
// Shared by jakirod and the shim: std and POSIX only.

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace jakiro::verbs_endpoint {

constexpr std::string_view prefix = "@jakiro/verbs/";

inline std::string by_mac(const uint8_t mac[6]) {
    char text[18];
    std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2],
                  mac[3], mac[4], mac[5]);
    return std::string(prefix) + "mac/" + text;
}

// A vNIC name is a YAML identifier; one that could not be a socket name has no by-name
// endpoint (the MAC one still works).
inline bool valid_name(std::string_view name) {
    if (name.empty() || name.size() > 64) {
        return false;
    }
    for (const char c : name) {
        if (!(c == '-' || c == '_' || c == '.' || (c >= '0' && c <= '9') ||
              (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
            return false;
        }
    }
    return true;
}

inline std::string by_name(std::string_view vnic) {
    return std::string(prefix) + "name/" + std::string(vnic);
}

// Fills `addr` for `where` ("@abstract" or a path); false if it does not fit.
inline bool to_sockaddr(std::string_view where, sockaddr_un& addr, socklen_t& len) {
    addr = {};
    addr.sun_family = AF_UNIX;
    const bool abstract = !where.empty() && where[0] == '@';
    // Abstract: a NUL, then the name without terminator. Path: the path and its NUL.
    const std::size_t bytes = abstract ? where.size() : where.size() + 1;
    if (where.empty() || bytes > sizeof(addr.sun_path)) {
        return false;
    }
    if (abstract) {
        addr.sun_path[0] = '\0';
        std::memcpy(addr.sun_path + 1, where.data() + 1, where.size() - 1);
    } else {
        std::memcpy(addr.sun_path, where.data(), where.size());
    }
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + bytes);
    return true;
}

}  // namespace jakiro::verbs_endpoint
