#include "verbs_shim/memory_backing.hh"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <string_view>

#include "verbs_shim/debug.hh"
#include "verbs_shim/raw_syscall.hh"

// Moving pages reads them whole, including bytes no allocation owns (under valgrind, its
// malloc's redzones): tell memcheck that is intended, as rdma-core's providers tell it about
// memory the hardware writes. A no-op without valgrind.
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define JAKIRO_WHOLE_PAGES_BEGIN(p, n) VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(p, n)
#define JAKIRO_WHOLE_PAGES_END(p, n) VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(p, n)
#else
#define JAKIRO_WHOLE_PAGES_BEGIN(p, n) ((void)0)
#define JAKIRO_WHOLE_PAGES_END(p, n) ((void)0)
#endif

namespace jakiro::verbs_shim {

namespace {

// The memfd's name, and how /proc/self/maps shows its mappings ("/memfd:jakiro-mr (deleted)").
constexpr const char* memfd_name = "jakiro-mr";
constexpr std::string_view memfd_maps_path = "/memfd:jakiro-mr";

// The memfd's initial size: every user address of a 4-level x86-64 page table (128 TiB).
// Sparse, so it costs nothing; it grows (sealing allows that) for a 5-level address space.
constexpr uint64_t initial_memfd_size = uint64_t{1} << 47;

// A run of the registered range that needs one treatment.
struct piece {
    uintptr_t start;
    uintptr_t end;
    int prot;
    bool in_place;  // already on the memfd at offset == address: nothing to move
};

// This thread's stack, which must never be moved: the copy and the remap run on it.
bool current_stack(uintptr_t& lo, uintptr_t& hi) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) {
        return false;
    }
    void* base = nullptr;
    std::size_t size = 0;
    const bool ok = pthread_attr_getstack(&attr, &base, &size) == 0;
    pthread_attr_destroy(&attr);
    lo = reinterpret_cast<uintptr_t>(base);
    hi = lo + size;
    return ok;
}

const char* describe(const vma& v) {
    if (v.path == "[stack]") {
        return "a stack";
    }
    if (v.shared) {
        return "shared memory";
    }
    if (v.path.starts_with("/anon_hugepage") || v.path.starts_with("/SYSV")) {
        return "hugetlb or System V shared memory";
    }
    if (!v.path.empty() && v.path[0] == '[') {
        return "a special mapping";
    }
    return "a read-only file mapping";
}

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer (tools/test-all's build-asan) the whole-page copy reads freed or
// unallocated heap bytes on purpose: copied word by word, uninstrumented and past the memcpy
// interceptor, as Valgrind is told above. Sizes are whole pages.
__attribute__((no_sanitize_address, optimize("no-tree-loop-distribute-patterns"))) void
copy_whole_pages(void* to, const void* from, std::size_t size) {
    auto* out = static_cast<uint64_t*>(to);
    const auto* in = static_cast<const uint64_t*>(from);
    for (std::size_t i = 0; i < size / sizeof(uint64_t); ++i) {
        out[i] = in[i];
    }
}
#else
void copy_whole_pages(void* to, const void* from, std::size_t size) {
    std::memcpy(to, from, size);
}
#endif

// Copies whole pages, which may include bytes no allocation owns.
void copy_pages(void* to, const void* from, std::size_t size) {
    JAKIRO_WHOLE_PAGES_BEGIN(from, size);
    copy_whole_pages(to, from, size);
    JAKIRO_WHOLE_PAGES_END(from, size);
}

// Copies the pages at [start, start + size) into the memfd at offset `start`, through a
// scratch mapping of the memfd: one copy, as a pwrite would make, in user space.
int copy_into_memfd(int fd, uintptr_t start, std::size_t size) {
    void* scratch =
        mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
    if (scratch == MAP_FAILED) {
        return errno;
    }
    copy_pages(scratch, reinterpret_cast<const void*>(start), size);
    munmap(scratch, size);
    return 0;
}

// ---------------------------------------------------------------- fork()
//
// Moved pages are MAP_SHARED, so after a plain fork() parent and child would share them: a
// child's malloc on a moved heap page would corrupt the parent's heap. Worse, glibc itself
// writes into the heap in the child before any fork handler runs (it resets every malloc
// arena's lock and count of attached threads, and clears the other threads' pthread keys),
// and a thread's arena header shares the first page of its heap with its first chunks. So
// the child never inherits a moved mapping itself: just before fork() the parent marks each
// one MADV_DONTFORK and makes a second, inheritable view of its pages (mremap with old size
// 0). In the child, a private copy is made at the original address from that view, on the
// first touch (a SIGSEGV handler: glibc's own writes come first) or in the child handler,
// with no malloc; the parent's forking thread waits for that, so a single-threaded parent
// cannot change the pages meanwhile. Pages ibv_fork_init() keeps out of children
// (MADV_DONTFORK already) stay out. The child then starts with a fresh backing: its own
// registrations must never write into the parent's memfd. Every backing operation holds
// the registration lock, and so does fork(), so no backing is caught half-changed.
// posix_spawn()/vfork() copy nothing and need none of this.

std::mutex& registration_lock() {
    static auto* m = new std::mutex;
    return *m;
}

std::vector<memory_backing*>& live_backings() {  // guarded by registration_lock()
    static auto* v = new std::vector<memory_backing*>;
    return *v;
}

int fork_done[2] = {-1, -1};  // child -> parent: "your pages are yours again"

// One moved run as a fork sees it.
struct fork_copy {
    uintptr_t start;
    uintptr_t end;
    int prot;
    char* view;  // the inheritable second view of its pages; null: none (any more)
};

// Everything the child's fault handler reads, on a page of its own (no registration of
// neighbouring static memory can move it); the table itself is an anonymous mapping.
struct alignas(4096) fork_state_page {
    fork_copy* copies = nullptr;
    std::size_t count = 0;
    std::size_t table_bytes = 0;
    long parent = 0;
    bool handler_set = false;
    struct sigaction before {};
};
static_assert(sizeof(fork_state_page) == memory_backing::page);
fork_state_page fork_state;

// The copy into the child's private pages: whole words, no call (not even to memcpy, which
// the compiler would otherwise make of the loop; each compiler has its own way to forbid it).
#if defined(__clang__)
#define JAKIRO_NO_CALL_TO_MEMCPY no_builtin("memcpy")
#else
#define JAKIRO_NO_CALL_TO_MEMCPY optimize("no-tree-loop-distribute-patterns")
#endif
__attribute__((no_sanitize_address, JAKIRO_NO_CALL_TO_MEMCPY)) void copy_words(uintptr_t to,
                                                                               const char* from,
                                                                               std::size_t size) {
    auto* out = reinterpret_cast<uint64_t*>(to);
    const auto* in = reinterpret_cast<const uint64_t*>(from);
    for (std::size_t i = 0; i < size / sizeof(uint64_t); ++i) {
        out[i] = in[i];
    }
}

bool failed(long syscall_result) {
    return static_cast<unsigned long>(syscall_result) > static_cast<unsigned long>(-4096L);
}

// In the child: private memory at the run's address with the view's contents. No libc at
// all (raw_syscall.hh): async-signal-safe, and safe before the child's pages are its own.
bool make_private_copy(fork_copy& c) {
    if (c.view == nullptr) {
        return false;  // copied already, or inherited the old way
    }
    const std::size_t len = c.end - c.start;
    if (failed(raw_syscall(SYS_mmap, static_cast<long>(c.start), static_cast<long>(len),
                           PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                           0))) {
        return false;
    }
    copy_words(c.start, c.view, len);
    if (c.prot != (PROT_READ | PROT_WRITE)) {
        raw_syscall(SYS_mprotect, static_cast<long>(c.start), static_cast<long>(len), c.prot);
    }
    raw_syscall(SYS_munmap, reinterpret_cast<long>(c.view), static_cast<long>(len));
    c.view = nullptr;
    return true;
}

// Installed from just before fork() until the handlers are done. In the child, a touch of a
// run it has no copy of yet makes the copy and retries; anything else goes where it would
// have gone without this handler.
void fault_in_fork_child(int sig, siginfo_t* info, void* context) {
    if (raw_syscall(SYS_getpid) != fork_state.parent) {
        const auto at = reinterpret_cast<uintptr_t>(info->si_addr);
        for (std::size_t i = 0; i < fork_state.count; ++i) {
            fork_copy& c = fork_state.copies[i];
            if (c.start <= at && at < c.end && make_private_copy(c)) {
                return;
            }
        }
    }
    const struct sigaction& before = fork_state.before;
    if ((before.sa_flags & SA_SIGINFO) != 0 && before.sa_sigaction != nullptr) {
        before.sa_sigaction(sig, info, context);
    } else if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
        before.sa_handler(sig);
    } else {
        // The default action: the faulting instruction runs again and the process dies of it.
        struct {
            void* handler;
            unsigned long flags;
            void* restorer;
            uint64_t mask;
        } dfl{nullptr, 0, nullptr, 0};  // SIG_DFL, in the kernel's own layout
        raw_syscall(SYS_rt_sigaction, SIGSEGV, reinterpret_cast<long>(&dfl), 0, sizeof dfl.mask);
    }
}

// Turns one shared mapping of a memfd into private anonymous memory with the same contents
// and protection, in place. No malloc. For runs that have no view (mremap refused one).
void privatize(const vma& v) {
    const std::size_t len = v.end - v.start;
    void* tmp = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tmp == MAP_FAILED) {
        return;  // out of memory: the pages stay shared (README, "fork")
    }
    auto* target = reinterpret_cast<void*>(v.start);
    if (!v.read) {
        mprotect(target, len, PROT_READ);
    }
    copy_pages(tmp, target, len);
    const int prot =
        (v.read ? PROT_READ : 0) | (v.write ? PROT_WRITE : 0) | (v.exec ? PROT_EXEC : 0);
    if (prot != (PROT_READ | PROT_WRITE)) {
        mprotect(tmp, len, prot);
    }
    if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, target) == MAP_FAILED) {
        munmap(tmp, len);
    }
}

// Every mapping of a jakiro-mr memfd this (child) process still shares, made private. No
// malloc: the maps text goes to an mmap()ed buffer and is parsed in place.
void privatize_memfd_mappings() {
    std::size_t cap = std::size_t{1} << 20, len = 0;
    void* mem = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (mem == MAP_FAILED || fd < 0) {
        if (mem != MAP_FAILED) {
            munmap(mem, cap);
        }
        if (fd >= 0) {
            close(fd);
        }
        return;
    }
    auto* buf = static_cast<char*>(mem);
    for (;;) {
        if (len == cap) {
            void* bigger = mremap(buf, cap, 2 * cap, MREMAP_MAYMOVE);
            if (bigger == MAP_FAILED) {
                break;
            }
            buf = static_cast<char*>(bigger);
            cap *= 2;
        }
        const ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        len += static_cast<std::size_t>(n);
    }
    close(fd);
    std::string_view rest(buf, len);
    while (!rest.empty()) {
        const auto eol = rest.find('\n');
        const std::string_view line = rest.substr(0, eol);
        rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
        vma v;
        std::string_view path;
        if (parse_maps_line(line, v, path) && v.shared && path.starts_with(memfd_maps_path)) {
            privatize(v);
        }
    }
    munmap(buf, cap);
}

// The parent, before fork(), with the registration lock held (malloc is still allowed):
// every moved run that children inherit gets its view and MADV_DONTFORK. What is already
// MADV_DONTFORK (ibv_fork_init()'s registrations, or the application's) stays as it is.
void keep_moved_pages_from_the_child() {
    std::vector<vma> maps;
    std::vector<fork_copy> runs;
    try {
        if (!read_smaps(maps)) {
            return;
        }
        for (const vma& v : maps) {
            // A view another copy of this library made is MADV_DONTDUMP (tests load two).
            if (v.shared && !v.dont_fork && !v.dont_dump && v.path.starts_with(memfd_maps_path)) {
                runs.push_back({v.start, v.end,
                                (v.read ? PROT_READ : 0) | (v.write ? PROT_WRITE : 0) |
                                    (v.exec ? PROT_EXEC : 0),
                                nullptr});
            }
        }
    } catch (const std::bad_alloc&) {
        return;  // the child then privatizes what it shares, the old way
    }
    if (runs.empty()) {
        return;
    }
    const std::size_t bytes =
        (runs.size() * sizeof(fork_copy) + memory_backing::page - 1) & ~(memory_backing::page - 1);
    void* table = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (table == MAP_FAILED) {
        return;
    }
    fork_state.copies = static_cast<fork_copy*>(table);
    fork_state.table_bytes = bytes;
    fork_state.count = runs.size();
    bool any_view = false;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        fork_copy c = runs[i];
        auto* start = reinterpret_cast<void*>(c.start);
        const std::size_t len = c.end - c.start;
        void* view = mremap(start, 0, len, MREMAP_MAYMOVE);
        if (view != MAP_FAILED) {
            if ((c.prot & PROT_READ) == 0) {
                mprotect(view, len, PROT_READ);
            }
            madvise(view, len, MADV_DONTDUMP);  // a duplicate, and not a run of its own
            if (madvise(start, len, MADV_DONTFORK) == 0) {
                c.view = static_cast<char*>(view);
                any_view = true;
            } else {
                munmap(view, len);
            }
        }
        fork_state.copies[i] = c;
    }
    if (any_view) {
        struct sigaction on_fault {};
        on_fault.sa_sigaction = fault_in_fork_child;
        on_fault.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&on_fault.sa_mask);
        fork_state.handler_set = sigaction(SIGSEGV, &on_fault, &fork_state.before) == 0;
    }
}

// Both sides, after fork(): the views and the table go; the handler goes back.
void end_fork_copies(bool in_parent) {
    for (std::size_t i = 0; i < fork_state.count; ++i) {
        fork_copy& c = fork_state.copies[i];
        if (c.view == nullptr) {
            continue;
        }
        munmap(c.view, c.end - c.start);
        if (in_parent) {
            madvise(reinterpret_cast<void*>(c.start), c.end - c.start, MADV_DOFORK);
        }
    }
    if (fork_state.handler_set) {
        sigaction(SIGSEGV, &fork_state.before, nullptr);
        fork_state.handler_set = false;
    }
    if (fork_state.copies != nullptr) {
        munmap(fork_state.copies, fork_state.table_bytes);
    }
    fork_state.copies = nullptr;
    fork_state.count = 0;
    fork_state.table_bytes = 0;
}

void fork_prepare() {
    registration_lock().lock();
    if (pipe2(fork_done, O_CLOEXEC) != 0) {
        fork_done[0] = fork_done[1] = -1;
    }
    fork_state.parent = getpid();
    keep_moved_pages_from_the_child();
}

void fork_parent() {
    if (fork_done[0] >= 0) {
        close(fork_done[1]);
        char byte;
        while (read(fork_done[0], &byte, 1) < 0 && errno == EINTR) {
        }
        close(fork_done[0]);
    }
    fork_done[0] = fork_done[1] = -1;
    end_fork_copies(true);
    registration_lock().unlock();
}

void fork_child() {
    for (std::size_t i = 0; i < fork_state.count; ++i) {
        make_private_copy(fork_state.copies[i]);
    }
    privatize_memfd_mappings();  // runs that got no view
    end_fork_copies(false);
    if (fork_done[1] >= 0) {
        close(fork_done[0]);
        [[maybe_unused]] const ssize_t n = write(fork_done[1], "k", 1);
        close(fork_done[1]);
    }
    fork_done[0] = fork_done[1] = -1;
    // The heap is private again: now the backings may free what they held.
    for (memory_backing* b : live_backings()) {
        b->forget_after_fork();
    }
    registration_lock().unlock();
}

}  // namespace

memory_backing::memory_backing() {
    static std::once_flag handlers;
    std::call_once(handlers, [] { pthread_atfork(fork_prepare, fork_parent, fork_child); });
    const std::lock_guard lock(registration_lock());
    live_backings().push_back(this);
}

memory_backing::~memory_backing() {
    {
        const std::lock_guard lock(registration_lock());
        auto& live = live_backings();
        live.erase(std::remove(live.begin(), live.end(), this), live.end());
    }
    if (_fd >= 0) {
        close(_fd);
    }
}

void memory_backing::forget_after_fork() {
    if (_fd >= 0) {
        close(_fd);  // the parent's memfd: this process must never write into it
    }
    _fd = -1;
    _dev = 0;
    _ino = 0;
    _size = 0;
    _registered = interval_counts();
    _populated = interval_counts();
}

memory_backing& memory_backing::process() {
    static memory_backing* instance = new memory_backing;
    return *instance;
}

int memory_backing::fd() const {
    const std::lock_guard lock(_mutex);
    return _fd;
}

std::size_t memory_backing::registered_runs() const {
    const std::lock_guard lock(_mutex);
    return _registered.runs();
}

uint32_t memory_backing::registrations_at(const void* addr) const {
    const std::lock_guard lock(_mutex);
    return _registered.at(reinterpret_cast<uintptr_t>(addr));
}

void memory_backing::set_fork_protection(bool on) {
    const std::lock_guard lock(_mutex);
    _fork_protection = on;
}

bool memory_backing::ours(const vma& v) const {
    return _fd >= 0 && v.inode == _ino && makedev(v.dev_major, v.dev_minor) == _dev;
}

int memory_backing::open_memfd(uint64_t needed_size) {
    const uint64_t wanted = needed_size > initial_memfd_size ? needed_size : initial_memfd_size;
    if (_fd >= 0 && wanted <= _size) {
        return 0;
    }
    // A finite file size limit would turn the ftruncate below into SIGXFSZ.
    rlimit fsize{};
    if (getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY &&
        fsize.rlim_cur < wanted) {
        debug("memory registration needs RLIMIT_FSIZE unlimited (the MR memfd is sparse)");
        return EFBIG;
    }
    if (_fd < 0) {
        const int fd = memfd_create(memfd_name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0) {
            return errno;
        }
        struct stat st {};
        if (ftruncate(fd, static_cast<off_t>(wanted)) != 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 || fstat(fd, &st) != 0) {
            const int error = errno;
            close(fd);
            return error;
        }
        _fd = fd;
        _dev = st.st_dev;
        _ino = st.st_ino;
        _size = wanted;
        return 0;
    }
    if (ftruncate(_fd, static_cast<off_t>(wanted)) != 0) {
        return errno;
    }
    _size = wanted;
    return 0;
}

int memory_backing::acquire(const void* addr, std::size_t length, bool writable,
                            backing_span& out) {
    if (sysconf(_SC_PAGESIZE) != static_cast<long>(page)) {
        debug("memory registration needs %llu-byte pages", static_cast<unsigned long long>(page));
        return EOPNOTSUPP;
    }
    const auto first = reinterpret_cast<uintptr_t>(addr);
    if (length == 0 || first + length < first || first + length > UINTPTR_MAX - page) {
        return EINVAL;
    }
    const uintptr_t start = first & ~(page - 1);
    const uintptr_t end = (first + length + page - 1) & ~(page - 1);

    try {
        const std::scoped_lock lock(registration_lock(), _mutex);
        if (const int error = open_memfd(end); error != 0) {
            debug("cannot create the MR memfd: %s", std::strerror(error));
            return error;
        }
        std::vector<vma> maps;
        if (!read_maps(maps)) {
            return errno != 0 ? errno : EIO;
        }
        collect_locked(maps);

        uintptr_t stack_lo = 0, stack_hi = 0;
        const bool know_stack = current_stack(stack_lo, stack_hi);

        // Classify every page first: nothing moves unless the whole range can be registered.
        std::vector<piece> pieces;
        uintptr_t cursor = start;
        for (const vma& v : maps) {
            if (v.end <= cursor || cursor >= end) {
                continue;
            }
            if (v.start > cursor) {
                break;  // a hole: reported below
            }
            const piece p{
                cursor, v.end < end ? v.end : end,
                (v.read ? PROT_READ : 0) | (v.write ? PROT_WRITE : 0) | (v.exec ? PROT_EXEC : 0),
                ours(v) && v.offset_of(cursor) == cursor};
            if (!v.read || (writable && !v.write)) {
                debug("ibv_reg_mr(%p, %zu): [%#lx, %#lx) is %s", addr, length,
                      static_cast<unsigned long>(p.start), static_cast<unsigned long>(p.end),
                      v.read ? "read-only but the MR asks for write access" : "not readable");
                return EFAULT;
            }
            const bool on_stack =
                v.path == "[stack]" || (know_stack && p.start < stack_hi && stack_lo < p.end);
            // Pages another backing of this process moved earlier (a test's, say) are the
            // process's own memory as much as anonymous pages are.
            const bool movable = ours(v) || v.anonymous_private() || v.private_file_copy() ||
                                 (v.shared && v.path.starts_with(memfd_maps_path));
            if (!p.in_place && (on_stack || !movable)) {
                debug(
                    "ibv_reg_mr(%p, %zu): [%#lx, %#lx) is %s%s%s, which cannot be shared "
                    "with jakirod without a copy; register heap or mmap(MAP_PRIVATE | "
                    "MAP_ANONYMOUS) memory instead",
                    addr, length, static_cast<unsigned long>(p.start),
                    static_cast<unsigned long>(p.end), on_stack ? "a stack" : describe(v),
                    v.path.empty() || on_stack ? "" : " ", on_stack ? "" : v.path.c_str());
                return EOPNOTSUPP;
            }
            pieces.push_back(p);
            cursor = p.end;
        }
        if (cursor < end) {
            debug("ibv_reg_mr(%p, %zu): [%#lx, %#lx) is not mapped", addr, length,
                  static_cast<unsigned long>(cursor), static_cast<unsigned long>(end));
            return EFAULT;
        }
        // A moved page lands at file offset == its address. If those file pages are mapped
        // somewhere else (the application mremap()ed registered memory away), writing them
        // would change that other memory: refuse.
        for (const piece& p : pieces) {
            if (p.in_place) {
                continue;
            }
            for (const vma& w : maps) {
                if (!ours(w) || w.offset == w.start) {
                    continue;
                }
                const uint64_t f_start = w.offset;
                const uint64_t f_end = w.offset + (w.end - w.start);
                if (f_start < p.end && p.start < f_end) {
                    debug(
                        "ibv_reg_mr(%p, %zu): its pages' place on the MR memfd is in use at "
                        "%#lx (memory moved with mremap)",
                        addr, length, static_cast<unsigned long>(w.start));
                    return EINVAL;
                }
            }
        }

        // Move the pages: copy, then map the memfd over them. Signals are held off so that a
        // handler of this thread cannot write into a page between the two.
        sigset_t all, previous;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &previous);
        int error = 0;
        std::size_t touched = 0;  // pieces whose file range may now hold data
        for (const piece& p : pieces) {
            ++touched;
            if (p.in_place) {
                continue;
            }
            const std::size_t size = p.end - p.start;
            error = copy_into_memfd(_fd, p.start, size);
            if (error == 0 &&
                mmap(reinterpret_cast<void*>(p.start), size, p.prot, MAP_SHARED | MAP_FIXED, _fd,
                     static_cast<off_t>(p.start)) == MAP_FAILED) {
                error = errno;
            }
            if (error != 0) {
                break;
            }
        }
        pthread_sigmask(SIG_SETMASK, &previous, nullptr);
        for (std::size_t i = 0; i < touched; ++i) {
            _populated.set(pieces[i].start, pieces[i].end, 1);
        }
        if (error != 0) {
            debug("ibv_reg_mr(%p, %zu): moving the pages onto the MR memfd failed: %s", addr,
                  length, std::strerror(error));
            return error;
        }
        if (_fork_protection) {
            madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTFORK);
        }
        _registered.add(start, end, 1);
        out.fd = _fd;
        out.fd_offset = start;
        out.length = end - start;
        out.page_offset = static_cast<uint32_t>(first - start);
        return 0;
    } catch (const std::bad_alloc&) {
        return ENOMEM;
    }
}

void memory_backing::release(const void* addr, std::size_t length) {
    const auto first = reinterpret_cast<uintptr_t>(addr);
    if (length == 0 || first + length < first) {
        return;
    }
    const uintptr_t start = first & ~(page - 1);
    const uintptr_t end = (first + length + page - 1) & ~(page - 1);
    try {
        const std::scoped_lock lock(registration_lock(), _mutex);
        _registered.add(start, end, -1);
        if (_fork_protection) {
            // Pages no MR covers any more may be inherited again.
            uintptr_t cursor = start;
            _registered.for_each(start, end, [&](uint64_t s, uint64_t e, uint32_t) {
                if (cursor < s) {
                    madvise(reinterpret_cast<void*>(cursor), s - cursor, MADV_DOFORK);
                }
                cursor = e;
            });
            if (cursor < end) {
                madvise(reinterpret_cast<void*>(cursor), end - cursor, MADV_DOFORK);
            }
        }
        std::vector<vma> maps;
        if (read_maps(maps)) {
            collect_locked(maps);
        }
    } catch (const std::bad_alloc&) {
        // The pages stay on the memfd until a later collection: a leak, not a fault.
    }
}

void memory_backing::collect() {
    try {
        const std::scoped_lock lock(registration_lock(), _mutex);
        std::vector<vma> maps;
        if (_fd >= 0 && read_maps(maps)) {
            collect_locked(maps);
        }
    } catch (const std::bad_alloc&) {
    }
}

void memory_backing::collect_locked(const std::vector<vma>& maps) {
    if (_fd < 0 || _populated.empty()) {
        return;
    }
    // Candidates: populated file ranges that no MR covers and no mapping of ours shows.
    interval_counts idle = _populated;
    _registered.for_each([&](uint64_t s, uint64_t e, uint32_t) { idle.set(s, e, 0); });
    for (const vma& v : maps) {
        if (ours(v)) {
            idle.set(v.offset, v.offset + (v.end - v.start), 0);
        }
    }
    idle.for_each([&](uint64_t s, uint64_t e, uint32_t) {
        if (fallocate(_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(s),
                      static_cast<off_t>(e - s)) == 0) {
            _populated.set(s, e, 0);
        }
    });
}

}  // namespace jakiro::verbs_shim
