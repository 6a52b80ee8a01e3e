#include "verbs_shim/device_files.hh"

#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include "verbs_shim/discovery.hh"
#include "verbs_shim/ucma_device.hh"

namespace jakiro::verbs_shim::device_files {

namespace {

constexpr const char* uverbs_prefix = "/dev/infiniband/uverbs_jakiro_";

void character_device(struct stat* st, unsigned major, unsigned minor) {
    std::memset(st, 0, sizeof(*st));
    st->st_mode = S_IFCHR | 0666;
    st->st_nlink = 1;
    st->st_rdev = makedev(major, minor);
    st->st_blksize = 4096;
    const time_t now = time(nullptr);
    st->st_atime = st->st_mtime = st->st_ctime = now;
}

}  // namespace

bool is_emulated_path(const char* path) {
    return path != nullptr && (std::strcmp(path, ucma::device_path) == 0 ||
                               std::strncmp(path, uverbs_prefix, std::strlen(uverbs_prefix)) == 0);
}

bool stat_node(const char* path, struct stat* st) {
    if (!is_emulated_path(path) || st == nullptr) {
        return false;
    }
    vnic_socket where;
    if (!find_vnic_socket(where)) {
        return false;
    }
    if (std::strcmp(path, ucma::device_path) == 0) {
        character_device(st, rdma_cm_major, rdma_cm_minor);
    } else {
        character_device(st, uverbs_major, uverbs_minor);
    }
    return true;
}

void ucma_stat(struct stat* st) {
    character_device(st, rdma_cm_major, rdma_cm_minor);
}

}  // namespace jakiro::verbs_shim::device_files
