#pragma once
// shim ⇄ jakirod messages for rdma_cm: a message family of its own ("JKCM") on a
// verbs connection that said HELLO, so it never collides with the verbs opcodes.
//
// The shim emulates the rdma_cm character device: every write() librdmacm makes on it is one
// `ucma` request carrying the ucma ABI v4 command exactly as librdmacm wrote it (header
// {cmd, in, out} and the command struct, rdma/rdma_user_cm.h), plus, for SET_OPTION, the
// option value the shim copied from the caller's memory. jakirod reads the command's fields and
// never dereferences a pointer in it (response, optval: those are the tenant's addresses); it
// answers with the response struct, which the shim copies to the caller's response pointer.
// GET_EVENT never travels: each event jakirod queues is one `event` message on the channel's
// event socket (the descriptor the application holds as the rdma_cm fd), so poll, epoll,
// O_NONBLOCK and close behave as on the kernel's device.
//
// Shared by jakirod and the shim: std only.

#include <cstddef>
#include <cstdint>

namespace jakiro::cm_proto {

constexpr uint32_t magic = 0x4d43'4b4a;  // "JKCM" in memory on little-endian hosts
// 2: MIGRATE_ID proves the source channel by its event socket instead of naming a token.
constexpr uint16_t version = 2;
constexpr std::size_t max_message_size = 1024;
// The largest ucma command (header + struct) librdmacm writes: rdma_ucm_join_mcast and
// rdma_ucm_resolve_addr are under 300 bytes; rdma_ucm_accept/connect carry 56 + 196.
constexpr std::size_t max_command_bytes = 512;
// SET_OPTION values are small (u8, int, or an ibv_path_data array capped here).
constexpr std::size_t max_option_bytes = 256;

// Request opcodes 48..63, events 64.
enum class opcode : uint16_t {
    open_channel = 48,  // reply: status; fd: the event socket
    ucma = 49,          // a ucma command; reply: status + the response struct
    event = 64,         // jakirod → shim on the event socket
};
constexpr uint16_t reply_flag = 0x8000;

struct header {
    uint32_t magic;
    uint16_t version;
    uint16_t opcode;
    uint32_t length;  // whole message, header included
    uint32_t request_id;
};
static_assert(sizeof(header) == 16);

struct reply_header {
    header hdr;
    int32_t status;  // 0 or a positive errno
    uint32_t reserved;
};
static_assert(sizeof(reply_header) == 24);

// The channel's event socket comes with it (SCM_RIGHTS). It is also the channel's proof of
// possession: MIGRATE_ID carries the source channel's event socket (SCM_RIGHTS), as the kernel's
// ucma takes the source channel by descriptor, and jakirod moves the id only if that socket is
// the one it handed out for the channel (its SO_COOKIE, never reused while the system runs).
// A command without it, or with another socket, is ENOENT: nothing a process could guess (a
// number, an id) names another process's channel.
struct open_channel_reply {
    reply_header r;
};
static_assert(sizeof(open_channel_reply) == 24);

// Followed by `command_bytes` of the ucma command, then `option_bytes` of SET_OPTION's value.
// MIGRATE_ID alone comes with one descriptor: the source channel's event socket.
struct ucma_request {
    header hdr;
    uint32_t command_bytes;
    uint32_t option_bytes;
};
static_assert(sizeof(ucma_request) == 24);

// Followed by the response struct (at most the command's `out`).
struct ucma_reply {
    reply_header r;
    uint32_t response_bytes;
    uint32_t reserved;
};
static_assert(sizeof(ucma_reply) == 32);

// On the event socket: the ucma event response (struct rdma_ucm_event_resp) for GET_EVENT.
// `charged_handle`: the id whose events_reported counts this event (a CONNECT_REQUEST is
// charged to its listener, as the kernel does).
struct event_header {
    header hdr;
    uint32_t charged_handle;
    uint32_t response_bytes;
};
static_assert(sizeof(event_header) == 24);

}  // namespace jakiro::cm_proto
