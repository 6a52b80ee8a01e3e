#pragma once
// Whether jakirod forwards for a vNIC: `status --json` over its control socket lists the vNIC
// and its port with the link up.

#include <string>

namespace jakiro::cni {

enum class forwarding { yes, no, unreachable };

forwarding vnic_forwarding(const std::string& socket, const std::string& vnic, std::string& why);

// Polls until the vNIC forwards or `timeout_ms` passes; false with what was last seen.
bool wait_forwarding(const std::string& socket, const std::string& vnic, unsigned timeout_ms,
                     std::string& why);

}  // namespace jakiro::cni
