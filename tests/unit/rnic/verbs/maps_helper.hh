#pragma once
// What jakirod has mapped, read from /proc/self/maps (jakirod is this test process): the
// mappings of one file, to check that registrations map and releases unmap.

#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace jakiro::verbs::test {

struct mapping {
    uintptr_t start = 0, end = 0;
    std::string perms;
    unsigned long inode = 0;
};

inline std::vector<mapping> mappings() {
    std::vector<mapping> out;
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
        mapping m;
        char perms[8] = {};
        unsigned long long offset = 0;
        unsigned major = 0, minor = 0;
        if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " %7s %llx %x:%x %lu", &m.start,
                        &m.end, perms, &offset, &major, &minor, &m.inode) == 7) {
            m.perms = perms;
            out.push_back(m);
        }
    }
    return out;
}

// How many mappings of this process show the file behind `fd`.
inline int mappings_of(int fd) {
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        return -1;
    }
    int n = 0;
    for (const auto& m : mappings()) {
        n += m.inode == st.st_ino ? 1 : 0;
    }
    return n;
}

}  // namespace jakiro::verbs::test
