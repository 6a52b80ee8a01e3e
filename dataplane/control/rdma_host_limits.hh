#pragma once
// The kernel's per-process limits as they bound the RDMA objects of every tenant together
// (rnic/queues/host_reserve.hh): jakirod is one process, and every MR, ring and verbs
// connection of every vNIC is a mapping or a descriptor of it. At startup and on every `apply`,
// size_rdma_reserve() raises RLIMIT_NOFILE towards what the vNICs' quotas may need, reads
// vm.max_map_count, keeps what jakirod needs for itself, lowers the rest to YAML
// host.rdma_limits, and gives that to the host reserve; the vNICs' shares follow.
//
// Control thread.

#include <cstdint>
#include <string>

#include "dataplane/config/host_config.hh"
#include "rnic/queues/host_reserve.hh"

namespace jakiro {

// Mappings and descriptors jakirod keeps for itself, whatever tenants hold: DPDK's memory and
// ports, threads' stacks, libraries, the control and metrics clients (64 each), the listeners.
// The mappings it holds when sized count too, plus this margin for what it may map later.
// Measured: a test-bed jakirod maps ~1 300 areas and holds ~40 descriptors before any tenant.
constexpr uint64_t own_mappings_margin = 4096;
constexpr uint64_t own_descriptors = 1024;

struct kernel_limits {
    uint64_t max_map_count = 65530;  // /proc/sys/vm/max_map_count
    uint64_t mappings_now = 0;       // lines of /proc/self/maps
    uint64_t nofile = 1024;          // RLIMIT_NOFILE (soft), after raising it
};

// Raises RLIMIT_NOFILE's soft limit (and its hard one, where jakirod may) towards
// `descriptors_wanted` and reads the rest.
kernel_limits read_kernel_limits(uint64_t descriptors_wanted);

// What the tenants may hold, from the kernel's limits less jakirod's own (the mappings it holds
// now less those `tenants_hold`), lowered to `configured`.
verbs::host_amounts tenant_capacity(const kernel_limits& kernel, verbs::host_amounts tenants_hold,
                                    const rdma_host_limits& configured);

// Sizes `reserve` for `config`; returns a warning for the operator when the vNICs' quotas
// together need more than the host has (their shares are then scaled down), else "".
std::string size_rdma_reserve(verbs::host_reserve& reserve, const host_config& config);

}  // namespace jakiro
