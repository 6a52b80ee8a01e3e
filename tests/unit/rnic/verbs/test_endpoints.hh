#pragma once
// Endpoints for tests that run a channel_server: vNICs served in the test's own network
// namespace, under an abstract-name prefix no other test (they run in parallel, in one
// namespace) or jakirod uses.

#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rnic/verbs/channel_server.hh"

namespace jakiro::verbs::test {

inline endpoint_config own_vnic(const char* name, uint8_t last, uint16_t slot) {
    endpoint_config e;
    e.identity = {name, {0x02, 0x00, 0xc6, 0x13, 0x01, last}, 0xc6130100u | last, slot};
    e.own_namespace = true;
    return e;
}

inline std::string unique_prefix() {
    static int serial = 0;
    return "@jakiro-test-" + std::to_string(getpid()) + "-" + std::to_string(++serial) + "/";
}

// A host "h1" (tenant MTU 1450) serving `vnics` under a prefix of the test's own.
inline channel_config test_host(std::vector<endpoint_config> vnics) {
    channel_config config;
    config.endpoint_prefix = unique_prefix();
    config.host_name = "h1";
    config.tenant_mtu = 1450;
    config.vnics = std::move(vnics);
    return config;
}

}  // namespace jakiro::verbs::test
