#pragma once
// Sending one message with a few file descriptors over a SOCK_SEQPACKET socket
// (SCM_RIGHTS): the shim and jakirod both need it, with their own send flags.

#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <span>

#include "verbs_abi/protocol.hh"

namespace jakiro::verbs_proto {

// Sends `size` bytes and the descriptors in `fds` (at most max_fds_per_message) with them.
// Returns what sendmsg returns.
inline ssize_t send_with_fds(int sock, const void* data, std::size_t size, std::span<const int> fds,
                             int flags) {
    iovec iov{const_cast<void*>(data), size};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * max_fds_per_message)];
    if (fds.size() > max_fds_per_message) {
        errno = EINVAL;
        return -1;
    }
    if (!fds.empty()) {
        std::memset(control, 0, sizeof(control));
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
    }
    return sendmsg(sock, &msg, flags);
}

// Sends `size` bytes and, when `passed_fd` >= 0, that descriptor with them.
inline ssize_t send_with_fd(int sock, const void* data, std::size_t size, int passed_fd,
                            int flags) {
    if (passed_fd < 0) {
        return send_with_fds(sock, data, size, {}, flags);
    }
    return send_with_fds(sock, data, size, std::span<const int>(&passed_fd, 1), flags);
}

}  // namespace jakiro::verbs_proto
