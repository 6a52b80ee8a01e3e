#pragma once
// The file behind one of jakirod's own shared mappings, opened again: what a state image
// (handover/) sends a successor for each MR, ring and doorbell, so that it maps the very pages
// the tenant has mapped. jakirod closes an MR's memfd and a ring's as soon as it has mapped them
// (a descriptor per object would cost the host's RLIMIT_NOFILE for nothing while it serves), so
// at a take-over it finds them again through /proc/self/map_files, which needs CAP_SYS_ADMIN
// (jakirod's unit grants it: docs/operations.md).
//
// Thread-safety: none; one snapshot per caller.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace jakiro::verbs {

class mapped_files {
  public:
    // Reads /proc/self/maps once; the mappings made afterwards are unknown to it.
    mapped_files();

    // A new descriptor (O_RDWR, close-on-exec) of the file mapped at `address`, and the file
    // offset `address` maps; -1 with `error` set when nothing is mapped there or it cannot be
    // opened.
    int open(const void* address, uint64_t& file_offset, std::string& error) const;

  private:
    struct mapping {
        uintptr_t start = 0;
        uintptr_t end = 0;
        uint64_t offset = 0;
    };
    std::vector<mapping> _mappings;  // by start
};

}  // namespace jakiro::verbs
