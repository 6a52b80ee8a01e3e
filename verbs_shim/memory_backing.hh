#pragma once
// Zero-copy memory registration (docs/architecture.md §5). jakirod must read and write an MR's
// pages without a copy on the hot path, and it is another process, so the pages must be shared
// memory it can map. At ibv_reg_mr the shim therefore moves the pages of the region onto a
// memfd: it copies their current contents into the memfd and maps the memfd MAP_SHARED |
// MAP_FIXED over the same virtual range, so the application keeps its pointer and its data.
// The memfd then travels to jakirod, which maps the same pages.
//
// One memfd per process, sparse, in which the page at virtual address A lives at file offset
// A. Any two registrations that overlap therefore share their pages with no bookkeeping, an
// MR is always one contiguous (fd, offset, length), and registering pages that are already on
// the memfd (again, or in another MR) copies nothing. The memfd is sealed against shrinking,
// so jakirod's mappings can never be truncated under it.
//
// What can be moved: private anonymous memory (malloc, brk, mmap(MAP_PRIVATE|MAP_ANONYMOUS),
// .bss), writable private file memory (a program's .data: copy-on-write pages that are
// already the process's own) and pages another backing of this process moved before. What cannot
// fails with a clear errno, never a silent copy (docs/style.md): memory that is not mapped (EFAULT,
// as the kernel's ib_umem_get), read-only memory asked to be writable (EFAULT), and shared memory
// of any kind, read-only file mappings (whose later file changes the program may expect to see),
// hugetlbfs and stacks (EOPNOTSUPP; JAKIRO_VERBS_DEBUG says what the range was).
//
// Lifetime: each registered page is counted. When no MR covers a page any more it stays on
// the memfd (it is the application's memory now); once the application unmaps it too, the
// next registration, deregistration or context close gives the page back (hole punch).
//
// fork(): moved pages are MAP_SHARED, so a child would share them with its parent, and glibc
// itself writes into the child's heap before any fork handler runs. So the child never
// inherits a moved mapping: the prepare handler marks each MADV_DONTFORK and leaves the child
// a second view, from which the child makes private copies at the original addresses, on the
// first touch or in its handler, while the parent's forking thread waits (memory_backing.cc).
// Pages already MADV_DONTFORK (ibv_fork_init()) stay absent in the child, as with libibverbs.
//
// Known limits: another thread that writes into a page while it is being moved (between the
// copy and the remap, microseconds) loses that write, so register memory before handing it
// to other threads (the usual order). Likewise a parent's other threads writing moved pages
// while a forked child copies them may leave that child a torn copy.
//
// Thread-safety: every member takes the backing's mutex (and the process-wide registration
// lock that fork() also takes); registration is not a data path.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "verbs_shim/interval_counts.hh"
#include "verbs_shim/proc_maps.hh"

namespace jakiro::verbs_shim {

// Where a registered range lives on the memfd.
struct backing_span {
    int fd = -1;               // the memfd: the backing's own descriptor, send it, never close it
    uint64_t fd_offset = 0;    // page-aligned offset of the first page (== its address)
    uint64_t length = 0;       // whole pages
    uint32_t page_offset = 0;  // the region's first byte within the first page
};

class memory_backing {
  public:
    // Page size the remapping works in (x86-64); anything else refuses to register.
    static constexpr uint64_t page = 4096;

    memory_backing();
    ~memory_backing();
    memory_backing(const memory_backing&) = delete;
    memory_backing& operator=(const memory_backing&) = delete;

    // The process's backing: one memfd for all contexts. Never destroyed (mappings and
    // jakirod's view of them outlive static destruction order).
    static memory_backing& process();

    // Makes [addr, addr + length) memfd-backed (see above) and counts its pages as
    // registered. `writable`: the MR may be written (local write, remote write or atomic).
    // 0 or an errno; on 0, `out` says where the range is.
    int acquire(const void* addr, std::size_t length, bool writable, backing_span& out);

    // The registration of [addr, addr + length) is gone (jakirod has unmapped it).
    void release(const void* addr, std::size_t length);

    // Gives back memfd pages that no MR covers and no mapping of this process shows.
    void collect();

    // ibv_fork_init(): registered pages are MADV_DONTFORK from now on (and until released).
    void set_fork_protection(bool on);

    // For tests: the memfd (-1 before the first registration), the number of registered
    // page runs, and whether a page is counted as registered.
    int fd() const;
    std::size_t registered_runs() const;
    uint32_t registrations_at(const void* addr) const;

    // In a child of fork(), once its copies of the memfd's pages are private: start over
    // with no memfd and nothing registered (the fork handler calls it).
    void forget_after_fork();

  private:
    int open_memfd(uint64_t needed_size);
    void collect_locked(const std::vector<vma>& maps);
    bool ours(const vma& v) const;

    mutable std::mutex _mutex;
    int _fd = -1;
    dev_t _dev = 0;
    ino_t _ino = 0;
    uint64_t _size = 0;
    interval_counts _registered;  // address (== file offset) ranges and how many MRs cover them
    interval_counts _populated;   // file ranges that may hold pages (1 where they may)
    bool _fork_protection = false;
};

}  // namespace jakiro::verbs_shim
