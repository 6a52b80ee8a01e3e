#pragma once
// What the parts of vnic_endpoint (vnic_endpoint.cc, client_session.cc, cm_relay.cc) share.
// Private to those files; nothing else includes it.

#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "rnic/rdmacm/cm_agent.hh"
#include "rnic/verbs/quota.hh"
#include "verbs_abi/fd_passing.hh"

namespace jakiro::verbs::vnic_endpoint_parts {

inline bool send_with_fd(int fd, const void* data, std::size_t size, int passed_fd) {
    // Never block on a client that does not read, never die of SIGPIPE for one that left.
    return verbs_proto::send_with_fd(fd, data, size, passed_fd, MSG_NOSIGNAL | MSG_DONTWAIT) ==
           static_cast<ssize_t>(size);
}

// The rdma_cm agent's bounds from the vNIC's quota.
inline rdmacm::agent_limits cm_limits_of(const vnic_quota& q) {
    rdmacm::agent_limits limits;
    limits.max_ids = q.max_cm_ids;
    limits.max_channels = std::max<uint32_t>(1, q.max_contexts);
    limits.max_backlog = q.max_cm_backlog;
    limits.max_held_reqs = q.max_cm_held_reqs;
    return limits;
}

}  // namespace jakiro::verbs::vnic_endpoint_parts
