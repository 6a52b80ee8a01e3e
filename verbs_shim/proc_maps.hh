#pragma once
// This process's memory mappings, as /proc/self/maps lists them: what memory registration
// needs to know about a range before it remaps it (is it mapped at all, private anonymous
// memory or something else, already on the MR memfd, part of a stack).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jakiro::verbs_shim {

struct vma {
    uintptr_t start = 0;
    uintptr_t end = 0;
    bool read = false;
    bool write = false;
    bool exec = false;
    bool shared = false;  // 's' (MAP_SHARED), else 'p'
    uint64_t offset = 0;  // in the mapped file
    unsigned dev_major = 0;
    unsigned dev_minor = 0;
    uint64_t inode = 0;
    std::string path;        // "" (anonymous), "[heap]", "[stack]", "/memfd:name (deleted)", a file
    bool dont_fork = false;  // MADV_DONTFORK: fork() leaves it out (read_smaps only)
    bool dont_dump = false;  // MADV_DONTDUMP: not in core dumps (read_smaps only)

    // Private memory not backed by a file: what malloc, the brk heap, mmap(MAP_PRIVATE |
    // MAP_ANONYMOUS) and most of a program's .bss are made of. Stacks are excluded.
    bool anonymous_private() const;
    // Writable MAP_PRIVATE memory of a file (a program's .data and the start of its .bss, or
    // a private file mapping it may write): copy-on-write memory that is the process's own,
    // whose writes never reach the file. Not hugetlbfs.
    bool private_file_copy() const;
    // The file offset that backs address `addr` (inside the mapping).
    uint64_t offset_of(uintptr_t addr) const { return offset + (addr - start); }
};

// One line of /proc/<pid>/maps; false if it does not parse.
bool parse_maps_line(std::string_view line, vma& out);

// The same without allocating (the path stays a view into `line`): for code that runs where
// malloc must not, such as a child process right after fork(). `out.path` is left empty.
bool parse_maps_line(std::string_view line, vma& out, std::string_view& path);

// The mappings of this process, in address order. False (errno set) if /proc/self/maps
// cannot be read.
bool read_maps(std::vector<vma>& out);

// The same from /proc/self/smaps, which also has each mapping's advice flags (`dont_fork`,
// `dont_dump`). Slower: the kernel counts every mapping's pages for it.
bool read_smaps(std::vector<vma>& out);

}  // namespace jakiro::verbs_shim
