#pragma once
// The rdma_cm character device, emulated. librdmacm opens /dev/infiniband/rdma_cm,
// checks with fstat that it is a character device, and then drives everything with write()s
// of ucma ABI v4 commands whose responses go through a pointer in the command. Here, an open
// of that path connects to the vNIC's verbs endpoint, says HELLO and opens an rdma_cm channel
// (cm_protocol.hh); the descriptor the program gets is the channel's event socket, so poll,
// epoll, O_NONBLOCK and close behave natively. write() on it forwards the command to jakirod
// and copies the response to the caller's pointer (EFAULT, as the kernel, for a bad one);
// GET_EVENT receives the next event from the socket itself.
//
// Thread-safety: any thread; commands on one descriptor are serialised.

#include <sys/types.h>

#include <cstddef>

namespace jakiro::verbs_shim::ucma {

constexpr const char* device_path = "/dev/infiniband/rdma_cm";

// A new emulated device descriptor, or -1 with errno (ENODEV: no vNIC in this namespace).
int open_device(int flags);
// Is `fd` an emulated device? Cheap when none is open.
bool owns(int fd);
// write() on an emulated device: `len` on success, -1 with errno otherwise.
ssize_t write_command(int fd, const void* buf, std::size_t len);
// The program closes `fd` (before the descriptor itself is closed).
void forget(int fd);

}  // namespace jakiro::verbs_shim::ucma
