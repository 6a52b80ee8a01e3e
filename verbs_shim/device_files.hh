#pragma once
// The device nodes a program under jakiro-run looks for in /dev/infiniband, answered as the
// kernel's would be: librdmacm's rdma_cm (fstat must say character device) and, for UCX
// (for UCX), each verbs device's /dev/infiniband/<dev_name> (stat: a character device;
// access R_OK|W_OK: allowed). Only while this namespace has a vNIC, and only where the real
// file does not exist, so a host with real RDMA devices is never overridden.

#include <sys/stat.h>

namespace jakiro::verbs_shim::device_files {

// The character device numbers Linux gives rdma_cm (misc 10:58 on most systems, reported
// for information only) and the first uverbs device (231:192).
constexpr unsigned rdma_cm_major = 10, rdma_cm_minor = 58;
constexpr unsigned uverbs_major = 231, uverbs_minor = 192;

// True if `path` is one of the emulated nodes (whether or not a vNIC is reachable).
bool is_emulated_path(const char* path);
// Fills `st` as stat(2) of that node would; false if `path` is not emulated or there is no
// vNIC in this namespace.
bool stat_node(const char* path, struct stat* st);
// What fstat(2) of an emulated rdma_cm descriptor reports.
void ucma_stat(struct stat* st);

}  // namespace jakiro::verbs_shim::device_files
