#pragma once
// Whether the path a process bound a Unix socket to still leads to that socket. A successor
// that takes over binds the same paths (the control socket, the hand-over socket); if it then
// fails, it removes them on its way out, or (killed) leaves files nobody accepts on, and the
// predecessor, serving on, would be unreachable by name. The predecessor compares the file at
// the path with the one its own bind made, and binds again if they differ (docs/restart.md).
//
// Thread-safety: plain functions; the caller owns the descriptors.

#include <sys/types.h>

#include <optional>
#include <string>

namespace jakiro {

struct socket_file {
    dev_t dev = 0;
    ino_t ino = 0;
    bool operator==(const socket_file&) const = default;
};

// The file at `path` now (nullopt: none).
std::optional<socket_file> socket_file_at(const std::string& path);

// The process's umask, for bind_unix_listener.
constexpr int process_umask = -1;

// A new listening Unix socket of `type` (SOCK_STREAM or SOCK_SEQPACKET; close-on-exec and
// non-blocking) bound at `path`, whatever file was there, with `mask` as the umask of the bind
// (0077: root only, whatever the process's); -1 with `error` set.
int bind_unix_listener(const std::string& path, int type, int backlog, int mask,
                       std::string& error);

}  // namespace jakiro
