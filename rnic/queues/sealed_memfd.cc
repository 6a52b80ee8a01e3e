#include "rnic/queues/sealed_memfd.hh"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace jakiro::verbs {

int create_sealed_memfd(const char* name, std::size_t bytes, sealed_memfd& out) {
    const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        return errno;
    }
    void* base = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
        (base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        const int error = errno;
        close(fd);
        return error;
    }
    out = sealed_memfd{fd, base};
    return 0;
}

int map_sealed_memfd(int fd, std::size_t bytes, void*& base) {
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        return errno;
    }
    const int seals = fcntl(fd, F_GET_SEALS);
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes || seals < 0 ||
        (seals & F_SEAL_SHRINK) == 0) {
        return EINVAL;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        return errno;
    }
    base = p;
    return 0;
}

void give_back_pages(void* base, std::size_t bytes) {
    if (base != nullptr && bytes > 0) {
        // It fails only for a mapping that is not a shared writable shmem one, which every
        // caller's is; the memory then goes when the last mapping does, as before.
        madvise(base, bytes, MADV_REMOVE);
    }
}

void release_sealed_mapping(void* base, std::size_t bytes) {
    if (base == nullptr) {
        return;
    }
    give_back_pages(base, bytes);
    munmap(base, bytes);
}

}  // namespace jakiro::verbs
