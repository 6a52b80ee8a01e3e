#pragma once
// Endpoints for tests that run a channel_server: vNICs served in the test's own network
// namespace, under an abstract-name prefix no other test (they run in parallel, in one
// namespace) or jakirod uses.

#include <unistd.h>

#include <cstdint>
#include <string>

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

}  // namespace jakiro::verbs::test
