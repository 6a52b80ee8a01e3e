#include "rnic/queues/mapped_files.hh"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace jakiro::verbs {

mapped_files::mapped_files() {
    FILE* maps = std::fopen("/proc/self/maps", "re");
    if (maps == nullptr) {
        return;
    }
    char line[512];
    while (std::fgets(line, sizeof line, maps) != nullptr) {
        mapping m;
        unsigned long start = 0, end = 0;
        unsigned long long offset = 0;
        if (std::sscanf(line, "%lx-%lx %*s %llx", &start, &end, &offset) == 3) {
            m.start = start;
            m.end = end;
            m.offset = offset;
            _mappings.push_back(m);
        }
    }
    std::fclose(maps);
    std::sort(_mappings.begin(), _mappings.end(),
              [](const mapping& a, const mapping& b) { return a.start < b.start; });
}

int mapped_files::open(const void* address, uint64_t& file_offset, std::string& error) const {
    const auto at = reinterpret_cast<uintptr_t>(address);
    auto it = std::upper_bound(_mappings.begin(), _mappings.end(), at,
                               [](uintptr_t a, const mapping& m) { return a < m.start; });
    if (it == _mappings.begin() || at >= (it - 1)->end) {
        error = "nothing is mapped at " + std::to_string(at);
        return -1;
    }
    const mapping& m = *(it - 1);
    char path[96];
    std::snprintf(path, sizeof path, "/proc/self/map_files/%" PRIxPTR "-%" PRIxPTR, m.start, m.end);
    const int fd = ::open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        error = std::string(path) + ": " + std::strerror(errno);
        return -1;
    }
    file_offset = m.offset + (at - m.start);
    return fd;
}

}  // namespace jakiro::verbs
