#pragma once
// The EAL command line jakirod builds for itself: virtual devices only, one prefix per host,
// hugepages when some are free and --no-huge otherwise.

#include <cstdint>
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

// The CPUs jakirod was started on (its affinity: the unit's CPUAffinity=, taskset), ascending;
// every CPU the kernel has online if the affinity cannot be read.
std::vector<unsigned> allowed_cpus();

// EAL --lcores without --lcores given: one lcore per worker, each a thread the kernel may run on
// any of `cpus` (the scheduler decides among them; one CPU per worker: pass --lcores). The
// threads jakirod and EAL start besides the workers stay on `cpus` too, so an affinity given
// at start keeps the whole daemon apart from tenants' CPUs.
std::string default_lcores(unsigned workers, const std::vector<unsigned>& cpus);

// "jakiro-<host>", or "jakiro-<host>.b" while a running jakirod holds the first (the successor
// of a take-over starts its EAL beside its predecessor's; docs/restart.md).
std::string file_prefix(const std::string& host_name);

}  // namespace jakiro
