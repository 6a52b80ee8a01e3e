#include "dataplane/control/rdma_host_limits.hh"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace jakiro {

kernel_limits read_kernel_limits(uint64_t descriptors_wanted) {
    kernel_limits k;
    if (std::ifstream f("/proc/sys/vm/max_map_count"); f) {
        f >> k.max_map_count;
    }
    if (std::ifstream maps("/proc/self/maps"); maps) {
        std::string line;
        while (std::getline(maps, line)) {
            ++k.mappings_now;
        }
    }
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
        if (lim.rlim_cur < descriptors_wanted) {
            // The hard limit too when jakirod may raise it (CAP_SYS_RESOURCE, up to
            // fs.nr_open); otherwise as far as the hard limit goes.
            rlimit raised{descriptors_wanted, std::max<rlim_t>(lim.rlim_max, descriptors_wanted)};
            if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
                raised = {std::min<rlim_t>(lim.rlim_max, descriptors_wanted), lim.rlim_max};
                setrlimit(RLIMIT_NOFILE, &raised);
            }
            getrlimit(RLIMIT_NOFILE, &lim);
        }
        k.nofile = lim.rlim_cur;
    }
    return k;
}

verbs::host_amounts tenant_capacity(const kernel_limits& kernel, verbs::host_amounts tenants_hold,
                                    const rdma_host_limits& configured) {
    const uint64_t own_mappings = kernel.mappings_now -
                                  std::min(kernel.mappings_now, tenants_hold.mappings) +
                                  own_mappings_margin;
    verbs::host_amounts c{kernel.max_map_count - std::min(kernel.max_map_count, own_mappings),
                          kernel.nofile - std::min<uint64_t>(kernel.nofile, own_descriptors)};
    if (configured.mappings) {
        c.mappings = std::min<uint64_t>(c.mappings, *configured.mappings);
    }
    if (configured.descriptors) {
        c.descriptors = std::min<uint64_t>(c.descriptors, *configured.descriptors);
    }
    return c;
}

std::string size_rdma_reserve(verbs::host_reserve& reserve, const host_config& config) {
    const verbs::host_amounts demand = reserve.demand();
    const kernel_limits kernel = read_kernel_limits(demand.descriptors + own_descriptors);
    const verbs::host_amounts capacity =
        tenant_capacity(kernel, reserve.held(), config.rdma_limits);
    reserve.set_capacity(capacity);
    std::ostringstream warning;
    if (demand.mappings > capacity.mappings) {
        warning << "rdma: the vNICs' quotas allow " << demand.mappings << " mappings in jakirod, "
                << "the host has " << capacity.mappings << " for them (vm.max_map_count "
                << kernel.max_map_count
                << (config.rdma_limits.mappings ? ", host.rdma_limits.mappings" : "")
                << "): each vNIC is guaranteed its quota's part of them only; raise "
                   "vm.max_map_count or lower rdma.max_mrs, max_cqs, max_qps, max_srqs\n";
    }
    if (demand.descriptors > capacity.descriptors) {
        warning << "rdma: the vNICs' quotas allow " << demand.descriptors
                << " descriptors in jakirod, the host has " << capacity.descriptors
                << " for them (RLIMIT_NOFILE " << kernel.nofile
                << (config.rdma_limits.descriptors ? ", host.rdma_limits.descriptors" : "")
                << "): each vNIC is guaranteed its quota's part of them only; raise LimitNOFILE "
                   "or lower rdma.max_contexts, max_cqs\n";
    }
    return warning.str();
}

}  // namespace jakiro
