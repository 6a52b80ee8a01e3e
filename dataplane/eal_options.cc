#include "dataplane/eal_options.hh"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

namespace jakiro {

namespace {
// Memory for --no-huge: mbuf pools (≈40 MB at MTU 1500, ≈90 MB for jumbo frames) plus hash
// tables and DPDK's own heap, with room to spare.
constexpr const char* no_huge_memory_mb = "384";
constexpr const char* no_huge_memory_mb_jumbo = "640";
}  // namespace

static bool prefix_in_use(const std::string& prefix) {
    // A primary process holds a write lock on its runtime config file while it runs.
    const int fd = ::open(("/run/dpdk/" + prefix + "/config").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    struct flock probe {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    const bool locked = fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
    close(fd);
    return locked;
}

std::string file_prefix(const std::string& host_name) {
    const std::string first = "jakiro-" + host_name;
    // While a predecessor still runs (a take-over), its prefix is taken: use the other one.
    return prefix_in_use(first) ? first + ".b" : first;
}

eal_choice make_eal_args(const std::string& host_name, long free_hugepages,
                         const std::string& lcores, uint32_t underlay_mtu) {
    eal_choice choice;
    auto& a = choice.args;
    a = {"jakirod",     "--no-pci", "--lcores", lcores, "--file-prefix", file_prefix(host_name),
         "--log-level", "*:notice"};
    if (free_hugepages > 0) {
        choice.memory_mode = "hugepages";
        // --in-memory keeps hugepage files out of /dev/hugepages so a crash leaves nothing.
        a.push_back("--in-memory");
    } else {
        choice.memory_mode = "no-huge";
        a.insert(a.end(), {"--no-huge", "-m",
                           underlay_mtu > 1500 ? no_huge_memory_mb_jumbo : no_huge_memory_mb});
    }
    return choice;
}

long free_hugepages_now() {
    std::ifstream meminfo("/proc/meminfo");
    std::string line;
    while (std::getline(meminfo, line)) {
        std::istringstream fields(line);
        std::string key;
        long value = 0;
        if (fields >> key >> value && key == "HugePages_Free:") {
            return value;
        }
    }
    return 0;
}

std::vector<unsigned> allowed_cpus() {
    std::vector<unsigned> cpus;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
            if (CPU_ISSET(cpu, &set)) {
                cpus.push_back(cpu);
            }
        }
    }
    if (cpus.empty()) {
        for (unsigned cpu = 0; cpu < std::max(1u, std::thread::hardware_concurrency()); ++cpu) {
            cpus.push_back(cpu);
        }
    }
    return cpus;
}

std::string default_lcores(unsigned workers, const std::vector<unsigned>& cpus) {
    std::string set = "(";
    for (std::size_t i = 0; i < cpus.size(); ++i) {
        set += (i == 0 ? "" : ",") + std::to_string(cpus[i]);
    }
    set += ")";
    std::string lcores;
    for (unsigned w = 0; w < workers; ++w) {
        lcores += (w == 0 ? "" : ",") + std::to_string(w) + "@" + set;
    }
    return lcores;
}

}  // namespace jakiro
