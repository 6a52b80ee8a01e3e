#pragma once
// Sending one message with at most one file descriptor over a SOCK_SEQPACKET socket
// (SCM_RIGHTS): the shim and jakirod both need it, with their own send flags.

#include <sys/socket.h>

#include <cstddef>
#include <cstring>

namespace jakiro::verbs_proto {

// Sends `size` bytes and, when `passed_fd` >= 0, that descriptor with them. Returns what
// sendmsg returns.
inline ssize_t send_with_fd(int sock, const void* data, std::size_t size, int passed_fd,
                            int flags) {
    iovec iov{const_cast<void*>(data), size};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (passed_fd >= 0) {
        std::memset(control, 0, sizeof(control));
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(cmsg), &passed_fd, sizeof(int));
    }
    return sendmsg(sock, &msg, flags);
}

}  // namespace jakiro::verbs_proto
