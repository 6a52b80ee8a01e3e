#pragma once
// The shim's end of one connection to jakirod's verbs socket (protocol.hh). One per device
// scan and one per open verbs context; closing it is how jakirod learns the context is gone.
//
// Thread-safety: call() serialises on a mutex, so a context may be used from many threads;
// control verbs are rare and never on the data path.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>

#include "verbs_abi/protocol.hh"

namespace jakiro::verbs_shim {

// How long a control verb waits for jakirod before failing with ETIMEDOUT: long enough for a
// daemon busy in a table rebuild, short enough that a hung one does not hang the program.
constexpr int reply_timeout_ms = 5000;

class channel {
  public:
    channel() = default;
    ~channel();
    channel(const channel&) = delete;
    channel& operator=(const channel&) = delete;

    // Connects to `where`; 0 or an errno (ENOENT: no vNIC listens there).
    int open(const char* where);  // "@abstract" or a path (endpoint_address.hh)
    void close();
    int fd() const { return _fd; }

    // Sends `request` (a message from make_message; its request id is assigned here), with
    // `fd_in` as SCM_RIGHTS unless it is -1, and waits for the reply. 0 or an errno: the
    // transport's, EIO when jakirod is gone, EPROTO for a malformed reply (or one with fewer
    // descriptors than `fds_out` has room for), or the status jakirod answered. On 0, `reply`
    // holds exactly `reply_size` bytes and `fds_out` the descriptors that came with it, in
    // the order they were sent (the caller owns them). Descriptors nobody asked for, and all
    // of them when the verb fails, are closed here: a reply can never leak one into the
    // program.
    int call_with_fds(void* request, std::size_t request_size, void* reply, std::size_t reply_size,
                      std::span<int> fds_out, int fd_in = -1);
    // The same with at most one descriptor out (`fd_out`, unless nullptr).
    int call(void* request, std::size_t request_size, void* reply, std::size_t reply_size,
             int* fd_out = nullptr, int fd_in = -1) {
        return call_with_fds(request, request_size, reply, reply_size,
                             fd_out != nullptr ? std::span<int>(fd_out, 1) : std::span<int>(),
                             fd_in);
    }

    // HELLO: the vNIC's identity; `async_fd` gets the async event channel.
    int hello(verbs_proto::hello_reply& out, int& async_fd);
    // QUERY port 1: device and port attributes as jakirod sees them now.
    int query(verbs_proto::query_reply& out);

  private:
    int _fd = -1;
    uint32_t _next_id = 1;
    std::mutex _mutex;
};

}  // namespace jakiro::verbs_shim
