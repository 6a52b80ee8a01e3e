#pragma once
// The EAL command line jakirod builds for itself: virtual devices only, one prefix per host,
// hugepages when some are free and --no-huge otherwise.

#include <string>
#include <vector>

namespace jakiro {

struct eal_choice {
    std::vector<std::string> args;
    std::string memory_mode;  // "hugepages" or "no-huge"
};

// `free_hugepages` is what /proc/meminfo says; `lcores` an EAL --lcores value.
eal_choice make_eal_args(const std::string& host_name, long free_hugepages,
                         const std::string& lcores, uint32_t underlay_mtu);

long free_hugepages_now();

// "jakiro-<host>", or "jakiro-<host>.b" while a running jakirod holds the first (the successor
// of a take-over starts its EAL beside its predecessor's; docs/restart.md).
std::string file_prefix(const std::string& host_name);

}  // namespace jakiro
