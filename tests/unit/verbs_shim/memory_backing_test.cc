// Zero-copy registration: pages move onto the MR memfd with their contents and stay at their
// address; overlapping registrations share pages; what cannot be shared is refused, not
// copied; pages go back once nothing uses them. Each test has its own backing (own memfd).

#include "verbs_shim/memory_backing.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace jakiro::verbs_shim {
namespace {

constexpr std::size_t page = memory_backing::page;

// The mapping that holds `p`, from /proc/self/maps.
vma mapping_of(const void* p) {
    std::vector<vma> maps;
    EXPECT_TRUE(read_maps(maps));
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const vma& v : maps) {
        if (v.start <= a && a < v.end) {
            return v;
        }
    }
    return {};
}

bool on_memfd(const void* p, const memory_backing& b) {
    struct stat st {};
    if (fstat(b.fd(), &st) != 0) {
        return false;
    }
    const vma v = mapping_of(p);
    return v.inode == st.st_ino && v.shared &&
           v.offset_of(reinterpret_cast<uintptr_t>(p)) == reinterpret_cast<uintptr_t>(p);
}

long allocated_blocks(int fd) {
    struct stat st {};
    return fstat(fd, &st) == 0 ? static_cast<long>(st.st_blocks) : -1;
}

// Anonymous private pages filled with a pattern.
char* anon_pages(std::size_t n, int prot = PROT_READ | PROT_WRITE) {
    void* p = mmap(nullptr, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return nullptr;
    }
    auto* c = static_cast<char*>(p);
    for (std::size_t i = 0; i < n * page; ++i) {
        c[i] = static_cast<char>(i * 7 + 3);
    }
    if (prot != (PROT_READ | PROT_WRITE)) {
        mprotect(p, n * page, prot);
    }
    return c;
}

bool has_pattern(const char* c, std::size_t n_bytes) {
    for (std::size_t i = 0; i < n_bytes; ++i) {
        if (c[i] != static_cast<char>(i * 7 + 3)) {
            return false;
        }
    }
    return true;
}

TEST(MemoryBacking, MovesAnonymousPagesOntoTheMemfdKeepingContentsAndAddress) {
    memory_backing b;
    char* p = anon_pages(3);
    ASSERT_NE(p, nullptr);
    backing_span span;
    ASSERT_EQ(b.acquire(p + 100, 2 * page, true, span), 0);
    EXPECT_GE(span.fd, 0);
    EXPECT_EQ(span.fd_offset, reinterpret_cast<uintptr_t>(p)) << "offset == address";
    EXPECT_EQ(span.length, 3 * page) << "100 + 8192 bytes touch three pages";
    EXPECT_EQ(span.page_offset, 100u);
    EXPECT_TRUE(has_pattern(p, 3 * page)) << "contents survive the move";
    EXPECT_TRUE(on_memfd(p, b));
    EXPECT_TRUE(on_memfd(p + 2 * page, b));

    // Zero copy: the program's pointer and the memfd are the same memory, both ways.
    p[page + 5] = 'A';
    char c = 0;
    ASSERT_EQ(pread(span.fd, &c, 1, static_cast<off_t>(span.fd_offset + page + 5)), 1);
    EXPECT_EQ(c, 'A');
    ASSERT_EQ(pwrite(span.fd, "Z", 1, static_cast<off_t>(span.fd_offset + 7)), 1);
    EXPECT_EQ(p[7], 'Z');
    // And a second mapping of the fd (what jakirod does) sees it too.
    void* other = mmap(nullptr, span.length, PROT_READ, MAP_SHARED, span.fd,
                       static_cast<off_t>(span.fd_offset));
    ASSERT_NE(other, MAP_FAILED);
    EXPECT_EQ(static_cast<char*>(other)[page + 5], 'A');
    munmap(other, span.length);

    b.release(p + 100, 2 * page);
    munmap(p, 3 * page);
}

TEST(MemoryBacking, OverlappingRegistrationsSharePagesAndCountThem) {
    memory_backing b;
    char* p = anon_pages(4);
    ASSERT_NE(p, nullptr);
    backing_span first, second;
    ASSERT_EQ(b.acquire(p, 2 * page, true, first), 0);
    p[page] = 'X';  // written after the first registration: must not be copied over again
    ASSERT_EQ(b.acquire(p + page, 3 * page, true, second), 0);
    EXPECT_EQ(first.fd, second.fd);
    EXPECT_EQ(second.fd_offset, first.fd_offset + page) << "one file, offsets follow addresses";
    EXPECT_EQ(p[page], 'X');
    EXPECT_TRUE(has_pattern(p + 2 * page, 2 * page));
    EXPECT_EQ(b.registrations_at(p), 1u);
    EXPECT_EQ(b.registrations_at(p + page), 2u);
    EXPECT_EQ(b.registrations_at(p + 3 * page), 1u);
    b.release(p, 2 * page);
    EXPECT_EQ(b.registrations_at(p), 0u);
    EXPECT_EQ(b.registrations_at(p + page), 1u);
    EXPECT_TRUE(on_memfd(p, b)) << "unregistered pages stay where they are";
    b.release(p + page, 3 * page);
    EXPECT_EQ(b.registered_runs(), 0u);
    munmap(p, 4 * page);
}

TEST(MemoryBacking, RegisteringTheSamePagesAgainCopiesNothing) {
    memory_backing b;
    char* p = anon_pages(2);
    ASSERT_NE(p, nullptr);
    backing_span span;
    ASSERT_EQ(b.acquire(p, 2 * page, true, span), 0);
    b.release(p, 2 * page);
    // Still on the memfd: a write through the file is what the program sees, so a second
    // registration that copied would be visible as lost data. It must not copy.
    ASSERT_EQ(pwrite(span.fd, "Q", 1, static_cast<off_t>(span.fd_offset)), 1);
    ASSERT_EQ(b.acquire(p, 2 * page, false, span), 0);
    EXPECT_EQ(p[0], 'Q');
    b.release(p, 2 * page);
    munmap(p, 2 * page);
}

TEST(MemoryBacking, RegistersHeapAndStaticMemory) {
    memory_backing b;
    static char bss_buffer[3 * 4096];
    std::memset(bss_buffer, 0x5a, sizeof(bss_buffer));
    backing_span span;
    ASSERT_EQ(b.acquire(bss_buffer + 10, 5000, true, span), 0);
    EXPECT_EQ(bss_buffer[4000], 0x5a);
    EXPECT_TRUE(on_memfd(bss_buffer + 10, b));
    b.release(bss_buffer + 10, 5000);

    auto* heap = static_cast<char*>(std::malloc(200));
    ASSERT_NE(heap, nullptr);
    std::memset(heap, 0x33, 200);
    ASSERT_EQ(b.acquire(heap, 200, true, span), 0);
    EXPECT_EQ(heap[199], 0x33);
    EXPECT_TRUE(on_memfd(heap, b));
    b.release(heap, 200);
    std::free(heap);  // the allocator keeps working on the moved page
    void* more = std::malloc(100);
    EXPECT_NE(more, nullptr);
    std::free(more);
}

TEST(MemoryBacking, TakesOverPagesAnotherBackingMoved) {
    char* p = anon_pages(2);
    ASSERT_NE(p, nullptr);
    backing_span span;
    {
        memory_backing earlier;
        ASSERT_EQ(earlier.acquire(p, 2 * page, true, span), 0);
        earlier.release(p, 2 * page);
    }  // gone; its pages stay on its memfd, mapped here
    memory_backing b;
    ASSERT_EQ(b.acquire(p, 2 * page, true, span), 0);
    EXPECT_TRUE(on_memfd(p, b));
    EXPECT_TRUE(has_pattern(p, 2 * page));
    b.release(p, 2 * page);
    munmap(p, 2 * page);
}

TEST(MemoryBacking, RefusesSharedAndReadOnlyFileMappings) {
    memory_backing b;
    char path[] = "/tmp/jakiro-backing-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    ASSERT_EQ(ftruncate(fd, 2 * page), 0);
    backing_span span;
    struct {
        int flags, prot;
        bool writable;
    } const cases[] = {{MAP_SHARED, PROT_READ | PROT_WRITE, true},
                       {MAP_SHARED, PROT_READ, false},
                       {MAP_PRIVATE, PROT_READ, false}};
    for (const auto& c : cases) {
        void* f = mmap(nullptr, 2 * page, c.prot, c.flags, fd, 0);
        ASSERT_NE(f, MAP_FAILED);
        EXPECT_EQ(b.acquire(f, page, c.writable, span), EOPNOTSUPP) << c.flags << " " << c.prot;
        EXPECT_NE(mapping_of(f).inode, 0u) << "left as it was";
        munmap(f, 2 * page);
    }
    close(fd);
    void* shared = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(shared, MAP_FAILED);
    EXPECT_EQ(b.acquire(shared, page, true, span), EOPNOTSUPP);
    munmap(shared, page);
}

TEST(MemoryBacking, MovesWritablePrivateFileMemoryAsTheProcesssOwn) {
    memory_backing b;
    char path[] = "/tmp/jakiro-backing-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    ASSERT_EQ(pwrite(fd, "file", 4, 0), 4);
    ASSERT_EQ(ftruncate(fd, 2 * page), 0);
    auto* f =
        static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0));
    ASSERT_NE(f, MAP_FAILED);
    f[5] = 'x';
    backing_span span;
    ASSERT_EQ(b.acquire(f, 2 * page, true, span), 0);
    EXPECT_EQ(std::memcmp(f, "file", 4), 0);
    EXPECT_EQ(f[5], 'x');
    EXPECT_TRUE(on_memfd(f, b));
    char back[6] = {};
    ASSERT_EQ(pread(fd, back, 6, 0), 6);
    EXPECT_EQ(back[5], 0) << "private: the file never sees the program's writes";
    b.release(f, 2 * page);
    munmap(f, 2 * page);
    close(fd);
}

TEST(MemoryBacking, RefusesTheStack) {
    memory_backing b;
    char on_stack[256];
    std::memset(on_stack, 1, sizeof(on_stack));
    backing_span span;
    EXPECT_EQ(b.acquire(on_stack, sizeof(on_stack), true, span), EOPNOTSUPP);
    EXPECT_EQ(on_stack[255], 1);
}

TEST(MemoryBacking, RefusesUnmappedMemoryAndMovesNothing) {
    memory_backing b;
    char* p = anon_pages(3);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(munmap(p + page, page), 0);  // a hole in the middle
    backing_span span;
    EXPECT_EQ(b.acquire(p, 3 * page, true, span), EFAULT);
    EXPECT_EQ(mapping_of(p).inode, 0u) << "the first page was not moved";
    EXPECT_TRUE(has_pattern(p, page));
    EXPECT_EQ(b.acquire(nullptr, 16, false, span), EFAULT);
    munmap(p, page);
    munmap(p + 2 * page, page);
}

TEST(MemoryBacking, ReadOnlyMemoryRegistersOnlyWithoutWriteAccess) {
    memory_backing b;
    char* p = anon_pages(2, PROT_READ);
    ASSERT_NE(p, nullptr);
    backing_span span;
    EXPECT_EQ(b.acquire(p, 2 * page, true, span), EFAULT) << "as the kernel: no writable pin";
    ASSERT_EQ(b.acquire(p, 2 * page, false, span), 0);
    const vma v = mapping_of(p);
    EXPECT_TRUE(v.read);
    EXPECT_FALSE(v.write) << "the moved pages keep their protection";
    EXPECT_TRUE(has_pattern(p, 2 * page));
    b.release(p, 2 * page);
    munmap(p, 2 * page);
}

TEST(MemoryBacking, RefusesEmptyAndWrappingRanges) {
    memory_backing b;
    backing_span span;
    char c = 0;
    EXPECT_EQ(b.acquire(&c, 0, false, span), EINVAL);
    EXPECT_EQ(b.acquire(reinterpret_cast<void*>(~uintptr_t{0} - 10), 100, false, span), EINVAL);
}

TEST(MemoryBacking, GivesPagesBackOnceUnregisteredAndUnmapped) {
    memory_backing b;
    char* p = anon_pages(16);
    ASSERT_NE(p, nullptr);
    backing_span span;
    ASSERT_EQ(b.acquire(p, 16 * page, true, span), 0);
    EXPECT_GE(allocated_blocks(span.fd), 16 * page / 512);
    b.release(p, 16 * page);
    EXPECT_GE(allocated_blocks(span.fd), 16 * page / 512) << "still the program's memory";
    munmap(p, 16 * page);
    b.collect();
    EXPECT_EQ(allocated_blocks(span.fd), 0) << "unmapped and unregistered: given back";
}

TEST(MemoryBacking, KeepsPagesThatAnMrStillCoversEvenIfUnmapped) {
    memory_backing b;
    char* p = anon_pages(2);
    ASSERT_NE(p, nullptr);
    backing_span span;
    ASSERT_EQ(b.acquire(p, 2 * page, true, span), 0);
    munmap(p, 2 * page);  // a program bug, but jakirod may still be writing there
    b.collect();
    EXPECT_GE(allocated_blocks(span.fd), 2 * page / 512);
    b.release(p, 2 * page);
    EXPECT_EQ(allocated_blocks(span.fd), 0);
}

TEST(MemoryBacking, RefusesPagesWhosePlaceOnTheMemfdWasMovedElsewhere) {
    memory_backing b;
    char* p = anon_pages(2);
    ASSERT_NE(p, nullptr);
    backing_span span;
    ASSERT_EQ(b.acquire(p, 2 * page, true, span), 0);
    b.release(p, 2 * page);
    // The program mremap()s the (now unregistered) pages away and reuses the address.
    void* moved = mremap(p, 2 * page, 2 * page, MREMAP_MAYMOVE | MREMAP_FIXED,
                         static_cast<void*>(anon_pages(2)));
    ASSERT_NE(moved, MAP_FAILED);
    void* again =
        mmap(p, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ASSERT_EQ(again, p);
    EXPECT_EQ(b.acquire(p, 2 * page, true, span), EINVAL)
        << "writing the file at offset p would change the memory now at " << moved;
    EXPECT_TRUE(has_pattern(static_cast<char*>(moved), 2 * page));
    // The moved memory itself registers fine: it is copied to its own place.
    ASSERT_EQ(b.acquire(moved, 2 * page, true, span), 0);
    EXPECT_TRUE(on_memfd(moved, b));
    EXPECT_TRUE(has_pattern(static_cast<char*>(moved), 2 * page));
    b.release(moved, 2 * page);
    munmap(moved, 2 * page);
    munmap(p, 2 * page);
}

TEST(MemoryBacking, AForkedChildGetsPrivateCopiesAndAFreshBacking) {
    memory_backing b;
    char* p = anon_pages(2);
    ASSERT_NE(p, nullptr);
    auto* heap = static_cast<char*>(std::malloc(64));  // a moved heap page, malloc metadata and all
    ASSERT_NE(heap, nullptr);
    backing_span span;
    ASSERT_EQ(b.acquire(p, 2 * page, true, span), 0);
    ASSERT_EQ(b.acquire(heap, 64, true, span), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        int bad = 0;
        bad |= has_pattern(p, 2 * page) ? 0 : 1;  // same contents...
        bad |= mapping_of(p).shared ? 2 : 0;      // ...but private memory now
        p[0] = 'c';                               // invisible to the parent
        for (int i = 0; i < 1000; ++i) {          // the child's heap is its own
            std::free(std::malloc(static_cast<std::size_t>(i) * 8 + 1));
        }
        bad |= b.fd() == -1 ? 0 : 4;  // no writing into the parent's memfd from here on
        _exit(bad);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(p[0], static_cast<char>(3)) << "the child's write stayed in the child";
    EXPECT_TRUE(on_memfd(p, b)) << "the parent's pages are still registered";
    for (int i = 0; i < 100; ++i) {
        std::free(std::malloc(static_cast<std::size_t>(i) * 16 + 1));
    }
    b.release(heap, 64);
    b.release(p, 2 * page);
    std::free(heap);
    munmap(p, 2 * page);
}

// A child of fork() writes before the backing's handler has made its pages private: glibc
// resets every malloc arena's lock and count of attached threads, and any fork handler
// registered earlier runs first. Those writes must stay in the child. Each scenario runs in a
// freshly executed copy of this test program, before gtest starts there (a static
// initializer, below): no other test's threads or fork handlers, so it can register its own
// handler first and compare whole pages. Exit 0: the parent's pages are unchanged.

char* early_writer_target = nullptr;

int writes_of_an_earlier_fork_handler() {
    pthread_atfork(nullptr, nullptr, [] { early_writer_target[0] = 'X'; });  // before ours
    memory_backing b;
    char* p = anon_pages(1);
    backing_span span;
    if (p == nullptr || b.acquire(p, page, true, span) != 0) {
        return 3;
    }
    early_writer_target = p;
    const pid_t child = fork();
    if (child == 0) {
        _exit(p[0] == 'X' ? 0 : 1);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "the child did not see its own write\n");
        return 4;
    }
    if (!has_pattern(p, page)) {
        std::fprintf(stderr, "the child's write reached the parent\n");
        return 1;
    }
    return 0;
}

// glibc's malloc only: AddressSanitizer's allocator (tools/test-all's build-asan) has no
// arenas; the ordinary build runs this.
#if !defined(__SANITIZE_ADDRESS__)
int glibcs_arena_reset_in_the_child() {
    int park[2];
    if (pipe2(park, O_CLOEXEC) != 0) {
        return 3;
    }
    std::atomic<char*> chunk{nullptr};
    std::thread owner([&] {
        char* mine = static_cast<char*>(std::malloc(64));  // from this thread's arena
        chunk = mine;
        char byte;
        [[maybe_unused]] const ssize_t n = read(park[0], &byte, 1);  // attached until told
        std::free(mine);
    });
    while (chunk.load() == nullptr) {
        usleep(1000);  // the death test's own timeout bounds this
    }
    // A glibc thread heap is aligned to its maximum size (64 MiB here) and starts with a
    // heap_info whose first field points at the arena header that follows it.
    constexpr uintptr_t heap_max = uintptr_t{64} << 20;
    auto* heap =
        reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(chunk.load()) & ~(heap_max - 1));
    uintptr_t arena = 0;
    std::memcpy(&arena, heap, sizeof(arena));
    if (arena <= reinterpret_cast<uintptr_t>(heap) ||
        arena >= reinterpret_cast<uintptr_t>(heap) + page) {
        std::fprintf(stderr, "a thread's heap no longer starts with its arena\n");
        return 2;
    }
    memory_backing b;
    backing_span span;
    if (b.acquire(heap, page, true, span) != 0) {
        return 3;
    }
    static char before[page];
    std::memcpy(before, heap, page);
    const pid_t child = fork();
    if (child == 0) {
        _exit(0);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child) {
        return 3;
    }
    const bool same = std::memcmp(before, heap, page) == 0;
    if (!same) {
        std::fprintf(stderr, "the child's reset of the arena header reached the parent\n");
        std::memcpy(heap, before, page);  // so that the thread's exit does not abort
    }
    [[maybe_unused]] const ssize_t n = write(park[1], "x", 1);
    owner.join();
    return same ? 0 : 1;
}

#endif

constexpr const char* scenario_variable = "JAKIRO_TEST_FORK_SCENARIO";

// In the fresh copy: run the scenario the environment names and exit with its result.
[[maybe_unused]] const bool scenario_ran = [] {
    const char* name = std::getenv(scenario_variable);
    if (name == nullptr) {
        return false;
    }
    int result = 5;  // unknown scenario
    if (std::strcmp(name, "earlier_handler") == 0) {
        result = writes_of_an_earlier_fork_handler();
    }
#if !defined(__SANITIZE_ADDRESS__)
    if (std::strcmp(name, "arena_reset") == 0) {
        result = glibcs_arena_reset_in_the_child();
    }
#endif
    _exit(result);
}();

// Runs `scenario` in a freshly executed copy of this program; its exit status (-1: no status).
int in_a_fresh_process(const std::string& scenario) {
    const std::string variable = std::string(scenario_variable) + "=" + scenario;
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e) {
        env.push_back(*e);
    }
    env.push_back(const_cast<char*>(variable.c_str()));
    env.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char* argv[] = {self, nullptr};
    pid_t pid = -1;
    if (posix_spawn(&pid, self, nullptr, nullptr, argv, env.data()) != 0) {
        return -1;
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        return -1;
    }
    return WEXITSTATUS(status);
}

TEST(MemoryBackingFork, WritesOfAnEarlierForkHandlerStayInTheChild) {
    EXPECT_EQ(in_a_fresh_process("earlier_handler"), 0)
        << "1: the child's write reached the parent; 3: setup; 4: the child lost its own write";
}

#if !defined(__SANITIZE_ADDRESS__)
// A thread's arena header shares the first page of its heap with its first chunks, so a
// registered chunk there puts the header on the memfd; in the parent, the count reset to 0
// made that thread's exit abort ("a->attached_threads > 0").
TEST(MemoryBackingFork, GlibcsArenaResetInTheChildNeverReachesTheParent) {
    EXPECT_EQ(in_a_fresh_process("arena_reset"), 0)
        << "1: the child's reset reached the parent; 2: glibc's heap layout changed; 3: setup";
}
#endif

// What a fork sets up in the parent (a second view of each moved run, MADV_DONTFORK) is
// gone once fork() returns there: fork after fork, the parent's mappings stay as they were.
TEST(MemoryBacking, AParentsMappingsAreTheSameAfterEachFork) {
    memory_backing b;
    char* p = anon_pages(3);
    ASSERT_NE(p, nullptr);
    backing_span span;
    ASSERT_EQ(b.acquire(p + page, page, true, span), 0);
    auto memfd_mappings = [] {
        std::vector<vma> maps;
        EXPECT_TRUE(read_maps(maps));
        std::string shown;
        for (const vma& v : maps) {
            if (v.shared && v.path.starts_with("/memfd:jakiro-mr")) {
                shown += std::to_string(v.start) + "-" + std::to_string(v.end) + " ";
            }
        }
        return shown;
    };
    const std::string before = memfd_mappings();
    for (int i = 0; i < 3; ++i) {
        const pid_t child = fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
            _exit(has_pattern(p, 3 * page) && !mapping_of(p + page).shared ? 0 : 1);
        }
        int status = 0;
        ASSERT_EQ(waitpid(child, &status, 0), child);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "fork " << i;
        EXPECT_EQ(memfd_mappings(), before) << "fork " << i;
    }
    const pid_t child = fork();  // and the pages are inherited again after all that
    ASSERT_GE(child, 0);
    if (child == 0) {
        _exit(p[page] == static_cast<char>(page * 7 + 3) ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    b.release(p + page, page);
    munmap(p, 3 * page);
}

TEST(MemoryBacking, ForkProtectionKeepsRegisteredPagesOutOfChildren) {
    memory_backing b;
    b.set_fork_protection(true);
    char* p = anon_pages(1);
    ASSERT_NE(p, nullptr);
    backing_span span;
    ASSERT_EQ(b.acquire(p, page, true, span), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        std::vector<vma> maps;
        bool found = false;
        if (read_maps(maps)) {
            for (const vma& v : maps) {
                found |= v.start <= reinterpret_cast<uintptr_t>(p) &&
                         reinterpret_cast<uintptr_t>(p) < v.end;
            }
        }
        _exit(found ? 1 : 0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "MADV_DONTFORK";
    b.release(p, page);
    munmap(p, page);
}

}  // namespace
}  // namespace jakiro::verbs_shim
