// The libc functions libjakiro_verbs.so interposes (LD_PRELOAD) so that unmodified programs
// find the emulated device nodes (device_files.hh) and drive the emulated rdma_cm device
// (ucma_device.hh): open/openat of /dev/infiniband/rdma_cm, fstat of its descriptor,
// stat/access of the nodes, write() of ucma commands, close(); and read the emulated sysfs
// attributes (sysfs_files.hh) through open/openat/fopen. Everything else goes to the
// next definition (libc's) untouched; a program that never opens the device pays one relaxed
// load per write() and close().
// Declared with their own names, not the LFS aliases the build's _FILE_OFFSET_BITS=64 would
// redirect them to: open64/fstat64/stat64 are defined separately below.
#undef _FILE_OFFSET_BITS
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "device_files.hh"
#include "sysfs_files.hh"
#include "ucma_device.hh"

#define JAKIRO_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace jakiro::shim;

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

}  // namespace

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
    return rc;
}

JAKIRO_EXPORT int stat64(const char* path, struct stat64* st) {
    NEXT("stat64", int (*)(const char*, struct stat64*));
    const int rc = real(path, st);
    if (rc != 0 && errno == ENOENT &&
        device_files::stat_node(path, reinterpret_cast<struct stat*>(st))) {
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
