#pragma once
// A CNI error (spec 1.0.0, "Error"): the code a runtime acts on, a one-line message, details.
// Codes below 100 are the spec's; 100 and up are this plugin's own (README.md in this folder).

#include <string>

namespace jakiro::cni {

enum class error_code : unsigned {
    incompatible_version = 1,
    unsupported_field = 2,
    unknown_container = 3,
    invalid_environment = 4,
    io_failure = 5,
    undecodable = 6,
    invalid_config = 7,
    try_again_later = 11,
    jakirod_refused = 100,  // jakirod or etcd refused the vNIC, or could not be reached
    drift = 101,            // CHECK: what ADD made is no longer as it made it
    subnet_exhausted = 102,
    not_forwarding = 103,    // the vNIC did not forward within ready_timeout_ms
    already_attached = 104,  // ADD for a container and interface that have a vNIC already
};

struct cni_error {
    error_code code = error_code::io_failure;
    std::string msg;
    std::string details;
};

// {"cniVersion": ..., "code": N, "msg": ..., "details": ...}
std::string error_json(const cni_error& error, const std::string& cni_version);

}  // namespace jakiro::cni
