#pragma once
// The sysfs attributes of a shim device that UCX reads, answered as the kernel's
// /sys/class/infiniband/<device>/ would answer them for a RoCE v2 port:
//   ports/1/gid_attrs/types/<i>  "RoCE v2"  (UCX assumes RoCE v1 when the file is missing)
//   ports/1/gid_attrs/ndevs/<i>  the netdev carrying the vNIC's MAC ("eth0")
// for each GID index the port has. Only for devices this process has listed (the registry of
// device.hh), and only where the real file does not exist, so a host with kernel RDMA devices
// is never overridden. Everything else under the device (numa_node, local_cpus) stays absent:
// UCX treats those as optional.

//
// And the directories above and beside those files, which programs list or stat to find a
// device's network interface (rdma-core's tests, ibdev2netdev-style scripts: `ls
// /sys/class/infiniband/<device>/device/net/`), again only where the real directory does not
// exist:
//   /sys/class/infiniband                the devices this process has
//   <device>                             device, ports
//   <device>/device                      net
//   <device>/device/net                  the netdev carrying the vNIC's MAC ("eth0")
//   <device>/device/net/<netdev>         (empty)
//   <device>/ports, ports/1, ports/1/gid_attrs, gid_attrs/types, gid_attrs/ndevs

#include <string>
#include <vector>

namespace jakiro::verbs_shim::sysfs_files {

constexpr const char* infiniband_class = "/sys/class/infiniband/";

// The text of the emulated attribute at `path` (with its trailing newline); false if `path` is
// not one.
bool attribute_text(const char* path, std::string& text);

struct dir_entry {
    std::string name;
    bool directory;
};
// The entries of the emulated directory at `path` (a trailing slash allowed), without "." and
// ".."; false if `path` is not one.
bool directory_entries(const char* path, std::vector<dir_entry>& entries);

// A read-only descriptor positioned at the start of the attribute's text (a sealed memfd), as
// open(2) of the sysfs file would give; -1 with errno set if the text cannot be served.
int open_attribute(const std::string& text, int flags);

}  // namespace jakiro::verbs_shim::sysfs_files
