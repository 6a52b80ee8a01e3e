#pragma once
// What jakirod answers to each shim request: message (and the descriptors that came with it)
// in, reply out. The channel server does the sockets; tests drive this directly with good,
// truncated and hostile bytes. Resource requests go to the vNIC's vnic_resources.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/resources.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::verbs {

// Per-connection protocol state. Owned by the thread of the vNIC's endpoint.
struct session {
    uint64_t client_id = 0;
    bool hello_done = false;
};

// What the server serves a vNIC's clients from.
struct device_context {
    const vnic_identity* vnic = nullptr;
    std::string host_name;
    uint32_t tenant_mtu = 0;
    vnic_resources* resources = nullptr;  // null: resource verbs answer EOPNOTSUPP
};

struct outcome {
    enum class action {
        reply,        // send `reply`, keep the connection
        reply_close,  // send `reply`, then drop the client (it speaks another version)
        drop,         // not our protocol: drop the client without a word
    };
    action what = action::drop;
    bool with_async_channel = false;  // the reply must carry the client's async channel fd
    int reply_fd = -1;   // a descriptor to send with the reply; the server closes it afterwards
    int reply_fd2 = -1;  // a second one (create_qp: the doorbell), sent after reply_fd
    std::array<std::byte, verbs_proto::max_message_size> reply{};
    std::size_t reply_size = 0;
    verbs_proto::parse_error error = verbs_proto::parse_error::none;  // for the counters
};

// `truncated`: the kernel cut the message (MSG_TRUNC), i.e. it was larger than the buffer.
// `fds`: descriptors that came with it. A handler that keeps one sets its entry to -1; the
// caller closes whatever is left, so a descriptor a request did not ask for is never kept.
outcome handle_request(std::span<const std::byte> message, bool truncated, std::span<int> fds,
                       session& s, const device_context& device);

// A request that came without descriptors.
inline outcome handle_request(std::span<const std::byte> message, bool truncated, session& s,
                              const device_context& device) {
    return handle_request(message, truncated, std::span<int>(), s, device);
}

}  // namespace jakiro::verbs
