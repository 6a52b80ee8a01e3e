// The libc functions libjakiro_verbs.so interposes (LD_PRELOAD) so that unmodified programs
// find the emulated device nodes (device_files.hh) and drive the emulated rdma_cm device
// (ucma_device.hh): open/openat of /dev/infiniband/rdma_cm, fstat of its descriptor,
// stat/access of the nodes, write() of ucma commands, close(); and read the emulated sysfs
// attributes (sysfs_files.hh) through open/openat/fopen, and stat or list the emulated sysfs
// directories above them (stat family, access, opendir/readdir/closedir). Everything else goes to
// the next definition (libc's) untouched; a program that never opens the device pays one relaxed
// load per write() and close().
// Declared with their own names, not the LFS aliases the build's _FILE_OFFSET_BITS=64 would
// redirect them to: open64/fstat64/stat64 are defined separately below.
#undef _FILE_OFFSET_BITS
#undef _FORTIFY_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "verbs_shim/device_files.hh"
#include "verbs_shim/sysfs_files.hh"
#include "verbs_shim/ucma_device.hh"

#define JAKIRO_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace jakiro::verbs_shim;

template <typename F>
F next(const char* name) {
    return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

#define NEXT(name, type)                       \
    static const auto real = next<type>(name); \
    if (real == nullptr) {                     \
        errno = ENOSYS;                        \
        return -1;                             \
    }

// open's third argument exists only with O_CREAT or O_TMPFILE: read it then, as libc does.
#define JAKIRO_MODE_ARGUMENT(flags, mode)                             \
    mode_t mode = 0;                                                  \
    if (((flags)&O_CREAT) != 0 || ((flags)&O_TMPFILE) == O_TMPFILE) { \
        va_list ap;                                                   \
        va_start(ap, flags);                                          \
        (mode) = va_arg(ap, mode_t);                                  \
        va_end(ap);                                                   \
    }

int real_stat(const char* path, struct stat* st) {
    using stat_fn = int (*)(const char*, struct stat*);
    static const auto real = next<stat_fn>("stat");
    return real != nullptr ? real(path, st) : -1;
}

// open() of an emulated file: the rdma_cm node or a device's sysfs attribute. `handled` false
// means the call is not ours and goes to libc.
int open_emulated(const char* path, int flags, bool& handled) {
    handled = false;
    if (path == nullptr) {
        return -1;
    }
    const bool ucma_node = std::strcmp(path, ucma::device_path) == 0;
    std::string attribute;
    if (!ucma_node && !sysfs_files::attribute_text(path, attribute)) {
        return -1;
    }
    // Only where the real file does not exist: a host with kernel RDMA keeps its own.
    struct stat st;
    if (real_stat(path, &st) == 0) {
        return -1;
    }
    handled = true;
    return ucma_node ? ucma::open_device(flags) : sysfs_files::open_attribute(attribute, flags);
}

// fopen() of an emulated sysfs attribute (libc's fopen opens without going through the PLT).
FILE* fopen_emulated(const char* path, const char* mode, bool& handled) {
    handled = false;
    std::string attribute;
    if (path == nullptr || mode == nullptr || !sysfs_files::attribute_text(path, attribute)) {
        return nullptr;
    }
    struct stat st;
    if (real_stat(path, &st) == 0) {
        return nullptr;
    }
    handled = true;
    const bool read_only = mode[0] == 'r' && std::strchr(mode, '+') == nullptr;
    const int flags =
        (read_only ? O_RDONLY : O_RDWR) | (std::strchr(mode, 'e') != nullptr ? O_CLOEXEC : 0);
    const int fd = sysfs_files::open_attribute(attribute, flags);
    if (fd < 0) {
        return nullptr;
    }
    FILE* f = fdopen(fd, mode);
    if (f == nullptr) {
        const int error = errno;
        close(fd);
        errno = error;
    }
    return f;
}

// `path` with "." and ".." segments and repeated slashes taken out, as the kernel resolves
// them (an emulated directory has no links to follow).
std::string lexically_normal(const char* path) {
    std::vector<std::string> parts;
    for (const char* p = path; *p != '\0';) {
        const char* end = std::strchr(p, '/');
        const std::string part(p, end != nullptr ? end : p + std::strlen(p));
        if (part == "..") {
            if (!parts.empty()) {
                parts.pop_back();
            }
        } else if (!part.empty() && part != ".") {
            parts.push_back(part);
        }
        if (end == nullptr) {
            break;
        }
        p = end + 1;
    }
    std::string out;
    for (const auto& part : parts) {
        out += "/" + part;
    }
    return out.empty() ? "/" : out;
}

// stat of an emulated sysfs directory or attribute (sysfs_files.hh) where the real one does
// not exist: read-only, as sysfs's are (an attribute reports sysfs's 4096 bytes). False if
// `path` is neither. Only absolute paths: the emulated tree is under /sys.
bool emulated_stat(const char* path, struct stat* st) {
    if (path[0] != '/') {
        return false;
    }
    const std::string normal = lexically_normal(path);
    std::vector<sysfs_files::dir_entry> entries;
    std::string text;
    const bool directory = sysfs_files::directory_entries(normal.c_str(), entries);
    if (!directory && !sysfs_files::attribute_text(normal.c_str(), text)) {
        return false;
    }
    struct stat real;
    if (real_stat(normal.c_str(), &real) == 0) {
        return false;
    }
    std::memset(st, 0, sizeof(*st));
    st->st_mode = directory ? (S_IFDIR | 0555) : (S_IFREG | 0444);
    st->st_nlink = directory ? 2 : 1;
    st->st_size = directory ? 0 : 4096;
    st->st_blksize = 4096;
    return true;
}

// What opendir returned for an emulated directory: readdir and closedir know it by address
// (a program never looks inside a DIR).
struct emulated_dir {
    std::vector<sysfs_files::dir_entry> entries;  // ".", "..", then the directory's
    std::size_t next = 0;
    struct dirent entry {};
};
std::mutex dirs_mutex;
std::unordered_set<const void*> open_dirs;  // under dirs_mutex
std::atomic<unsigned> open_dir_count{0};    // lets every other readdir skip the lock

emulated_dir* ours(DIR* d) {
    if (open_dir_count.load(std::memory_order_acquire) == 0) {
        return nullptr;
    }
    const std::lock_guard lock(dirs_mutex);
    return open_dirs.count(d) != 0 ? reinterpret_cast<emulated_dir*>(d) : nullptr;
}

struct dirent* next_entry(emulated_dir* d) {
    if (d->next >= d->entries.size()) {
        return nullptr;  // the end; errno unchanged, as readdir leaves it
    }
    const auto& e = d->entries[d->next++];
    d->entry = {};
    d->entry.d_ino = d->next;
    d->entry.d_off = static_cast<off_t>(d->next);
    d->entry.d_reclen = sizeof(d->entry);
    d->entry.d_type = e.directory ? DT_DIR : DT_REG;
    std::strncpy(d->entry.d_name, e.name.c_str(), sizeof(d->entry.d_name) - 1);
    return &d->entry;
}

}  // namespace

JAKIRO_EXPORT DIR* opendir(const char* path) {
    static const auto real = next<DIR* (*)(const char*)>("opendir");
    DIR* d = real != nullptr ? real(path) : nullptr;
    if (d != nullptr || errno != ENOENT) {
        return d;
    }
    std::vector<sysfs_files::dir_entry> entries;
    if (path[0] != '/' ||
        !sysfs_files::directory_entries(lexically_normal(path).c_str(), entries)) {
        errno = ENOENT;
        return nullptr;
    }
    auto* e = new emulated_dir;
    e->entries = {{".", true}, {"..", true}};
    e->entries.insert(e->entries.end(), entries.begin(), entries.end());
    {
        const std::lock_guard lock(dirs_mutex);
        open_dirs.insert(e);
    }
    open_dir_count.fetch_add(1, std::memory_order_release);
    return reinterpret_cast<DIR*>(e);
}

JAKIRO_EXPORT struct dirent* readdir(DIR* d) {
    if (emulated_dir* e = ours(d)) {
        return next_entry(e);
    }
    static const auto real = next<struct dirent* (*)(DIR*)>("readdir");
    return real != nullptr ? real(d) : nullptr;
}

// x86-64: struct dirent64 is struct dirent.
static_assert(sizeof(struct dirent) == sizeof(struct dirent64));
JAKIRO_EXPORT struct dirent64* readdir64(DIR* d) {
    if (emulated_dir* e = ours(d)) {
        return reinterpret_cast<struct dirent64*>(next_entry(e));
    }
    static const auto real = next<struct dirent64* (*)(DIR*)>("readdir64");
    return real != nullptr ? real(d) : nullptr;
}

JAKIRO_EXPORT int closedir(DIR* d) {
    if (emulated_dir* e = ours(d)) {
        {
            const std::lock_guard lock(dirs_mutex);
            open_dirs.erase(e);
        }
        open_dir_count.fetch_sub(1, std::memory_order_release);
        delete e;
        return 0;
    }
    NEXT("closedir", int (*)(DIR*));
    return real(d);
}

JAKIRO_EXPORT void rewinddir(DIR* d) {
    if (emulated_dir* e = ours(d)) {
        e->next = 0;
        return;
    }
    static const auto real = next<void (*)(DIR*)>("rewinddir");
    if (real != nullptr) {
        real(d);
    }
}

// The rest of <dirent.h> that takes a DIR: libc's would read an emulated one as its own.
JAKIRO_EXPORT int readdir_r(DIR* d, struct dirent* entry, struct dirent** result) {
    if (emulated_dir* e = ours(d)) {
        struct dirent* next = next_entry(e);
        if (next != nullptr) {
            *entry = *next;
        }
        *result = next != nullptr ? entry : nullptr;
        return 0;
    }
    NEXT("readdir_r", int (*)(DIR*, struct dirent*, struct dirent**));
    return real(d, entry, result);
}

JAKIRO_EXPORT int readdir64_r(DIR* d, struct dirent64* entry, struct dirent64** result) {
    if (emulated_dir* e = ours(d)) {
        struct dirent* next = next_entry(e);
        if (next != nullptr) {
            std::memcpy(entry, next, sizeof(*next));  // x86-64: the same layout
        }
        *result = next != nullptr ? entry : nullptr;
        return 0;
    }
    NEXT("readdir64_r", int (*)(DIR*, struct dirent64*, struct dirent64**));
    return real(d, entry, result);
}

JAKIRO_EXPORT long telldir(DIR* d) {
    if (emulated_dir* e = ours(d)) {
        return static_cast<long>(e->next);
    }
    NEXT("telldir", long (*)(DIR*));
    return real(d);
}

JAKIRO_EXPORT void seekdir(DIR* d, long at) {
    if (emulated_dir* e = ours(d)) {
        e->next = at >= 0 ? static_cast<std::size_t>(at) : 0;
        return;
    }
    static const auto real = next<void (*)(DIR*, long)>("seekdir");
    if (real != nullptr) {
        real(d, at);
    }
}

// An emulated directory has no descriptor (fstatat on one would find nothing).
JAKIRO_EXPORT int dirfd(DIR* d) {
    if (ours(d) != nullptr) {
        errno = ENOTSUP;
        return -1;
    }
    NEXT("dirfd", int (*)(DIR*));
    return real(d);
}

JAKIRO_EXPORT int open(const char* path, int flags, ...) {
    JAKIRO_MODE_ARGUMENT(flags, mode);
    bool handled;
    const int fd = open_emulated(path, flags, handled);
    if (handled) {
        return fd;
    }
    NEXT("open", int (*)(const char*, int, ...));
    return real(path, flags, mode);
}

JAKIRO_EXPORT int open64(const char* path, int flags, ...) {
    JAKIRO_MODE_ARGUMENT(flags, mode);
    bool handled;
    const int fd = open_emulated(path, flags, handled);
    if (handled) {
        return fd;
    }
    NEXT("open64", int (*)(const char*, int, ...));
    return real(path, flags, mode);
}

JAKIRO_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
    JAKIRO_MODE_ARGUMENT(flags, mode);
    bool handled;
    const int fd = open_emulated(path, flags, handled);
    if (handled) {
        return fd;
    }
    NEXT("openat", int (*)(int, const char*, int, ...));
    return real(dirfd, path, flags, mode);
}

// glibc's name for open() under _FORTIFY_SOURCE: programs built with it call this, not open().
// NOLINTNEXTLINE(bugprone-reserved-identifier): the symbol must carry glibc's reserved name
JAKIRO_EXPORT int __open_2(const char* path, int flags) {
    bool handled;
    const int fd = open_emulated(path, flags, handled);
    if (handled) {
        return fd;
    }
    NEXT("__open_2", int (*)(const char*, int));
    return real(path, flags);
}

JAKIRO_EXPORT FILE* fopen(const char* path, const char* mode) {
    bool handled;
    FILE* f = fopen_emulated(path, mode, handled);
    if (handled) {
        return f;
    }
    static const auto real = next<FILE* (*)(const char*, const char*)>("fopen");
    if (real == nullptr) {
        errno = ENOSYS;
        return nullptr;
    }
    return real(path, mode);
}

JAKIRO_EXPORT FILE* fopen64(const char* path, const char* mode) {
    bool handled;
    FILE* f = fopen_emulated(path, mode, handled);
    if (handled) {
        return f;
    }
    static const auto real = next<FILE* (*)(const char*, const char*)>("fopen64");
    if (real == nullptr) {
        errno = ENOSYS;
        return nullptr;
    }
    return real(path, mode);
}

JAKIRO_EXPORT int fstat(int fd, struct stat* st) {
    if (ucma::owns(fd)) {
        device_files::ucma_stat(st);
        return 0;
    }
    NEXT("fstat", int (*)(int, struct stat*));
    return real(fd, st);
}

JAKIRO_EXPORT int fstat64(int fd, struct stat64* st) {
    if (ucma::owns(fd)) {
        static_assert(sizeof(struct stat) == sizeof(struct stat64));
        device_files::ucma_stat(reinterpret_cast<struct stat*>(st));
        return 0;
    }
    NEXT("fstat64", int (*)(int, struct stat64*));
    return real(fd, st);
}

JAKIRO_EXPORT int stat(const char* path, struct stat* st) {
    NEXT("stat", int (*)(const char*, struct stat*));
    const int rc = real(path, st);
    if (rc != 0 && errno == ENOENT && device_files::stat_node(path, st)) {
        return 0;
    }
    if (rc != 0 && errno == ENOENT && emulated_stat(path, st)) {
        return 0;
    }
    return rc;
}

JAKIRO_EXPORT int lstat(const char* path, struct stat* st) {
    NEXT("lstat", int (*)(const char*, struct stat*));
    const int rc = real(path, st);
    if (rc != 0 && errno == ENOENT && emulated_stat(path, st)) {
        return 0;
    }
    return rc;
}

JAKIRO_EXPORT int lstat64(const char* path, struct stat64* st) {
    NEXT("lstat64", int (*)(const char*, struct stat64*));
    const int rc = real(path, st);
    if (rc != 0 && errno == ENOENT && emulated_stat(path, reinterpret_cast<struct stat*>(st))) {
        return 0;
    }
    return rc;
}

// Python's os.stat and os.path.exists come here (with AT_FDCWD and an absolute path).
JAKIRO_EXPORT int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
    NEXT("fstatat64", int (*)(int, const char*, struct stat64*, int));
    const int rc = real(dirfd, path, st, flags);
    // ENOENT: the kernel read `path`, so it is a string.
    if (rc != 0 && errno == ENOENT && emulated_stat(path, reinterpret_cast<struct stat*>(st))) {
        return 0;
    }
    return rc;
}

JAKIRO_EXPORT int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
    return fstatat64(dirfd, path, reinterpret_cast<struct stat64*>(st), flags);
}

// coreutils (ls) asks statx.
JAKIRO_EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* st) {
    NEXT("statx", int (*)(int, const char*, int, unsigned, struct statx*));
    const int rc = real(dirfd, path, flags, mask, st);
    struct stat emulated;
    if (rc != 0 && errno == ENOENT && emulated_stat(path, &emulated)) {
        std::memset(st, 0, sizeof(*st));
        st->stx_mask = STATX_TYPE | STATX_MODE | STATX_NLINK | STATX_SIZE;
        st->stx_mode = static_cast<uint16_t>(emulated.st_mode);
        st->stx_nlink = static_cast<uint32_t>(emulated.st_nlink);
        st->stx_size = static_cast<uint64_t>(emulated.st_size);
        st->stx_blksize = 4096;
        return 0;
    }
    return rc;
}

JAKIRO_EXPORT int stat64(const char* path, struct stat64* st) {
    NEXT("stat64", int (*)(const char*, struct stat64*));
    const int rc = real(path, st);
    if (rc != 0 && errno == ENOENT &&
        device_files::stat_node(path, reinterpret_cast<struct stat*>(st))) {
        return 0;
    }
    if (rc != 0 && errno == ENOENT && emulated_stat(path, reinterpret_cast<struct stat*>(st))) {
        return 0;
    }
    return rc;
}

JAKIRO_EXPORT int access(const char* path, int mode) {
    NEXT("access", int (*)(const char*, int));
    const int rc = real(path, mode);
    struct stat st;
    if (rc != 0 && errno == ENOENT && device_files::stat_node(path, &st)) {
        return (mode & X_OK) != 0 ? (errno = EACCES, -1) : 0;
    }
    if (rc != 0 && errno == ENOENT && emulated_stat(path, &st)) {
        // Read-only, as sysfs is; a directory may be searched.
        const bool refused = (mode & W_OK) != 0 || ((mode & X_OK) != 0 && !S_ISDIR(st.st_mode));
        return refused ? (errno = EACCES, -1) : 0;
    }
    return rc;
}

JAKIRO_EXPORT ssize_t write(int fd, const void* buf, size_t len) {
    if (ucma::owns(fd)) {
        return ucma::write_command(fd, buf, len);
    }
    static const auto real = next<ssize_t (*)(int, const void*, size_t)>("write");
    if (real == nullptr) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd, buf, len);
}

JAKIRO_EXPORT int close(int fd) {
    ucma::forget(fd);
    NEXT("close", int (*)(int));
    return real(fd);
}
