#pragma once
// The old side of a take-over (docs/restart.md): a root-only Unix socket beside the control
// socket on which a successor asks to take over. One conversation at a time, on a thread of its
// own, so that the control thread stays free to run the steps it is asked to (freeze, write).
//
// The conversation (handover/transfer.hh): the successor's credentials are checked (same user,
// same network namespace: a tenant can neither start nor feed a take-over), its offer is
// compared with what this binary writes, and a refusal leaves everything untouched. Accepted,
// the daemon freezes (its workers stop), writes its state image, sends it with its descriptors
// and waits for the outcome: running, and this process exits at once without tearing anything
// down (the successor holds the same sockets and devices); failed, or silent past the deadline,
// and this process resumes serving.
//
// Thread-safety: start() and stop() from main; the hooks run on the server's thread.

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "handover/image.hh"
#include "handover/transfer.hh"

#include "dataplane/control/socket_path.hh"

namespace jakiro {

class handover_server {
  public:
    struct hooks {
        // Stops forwarding and whatever must not change during the image; false if that could
        // not be done (then resume() runs).
        std::function<bool(const handover::offer&)> freeze;
        // False (with why): the image could not be written whole; resume() runs.
        std::function<bool(handover::image_writer&, std::string& why)> write;
        std::function<void(const std::string& why)> resume;
        // The successor runs: end this process now (never returns).
        std::function<void()> exit;
    };

    handover_server(std::string path, hooks h);
    ~handover_server();
    handover_server(const handover_server&) = delete;
    handover_server& operator=(const handover_server&) = delete;

    // Binds `path` (mode 0600); false with `error` set.
    bool start(std::string& error);
    void stop();
    // A conversation is under way.
    bool busy() const { return _busy.load(); }

  private:
    void serve();
    void converse(int sock);
    void reclaim_path();

    std::string _path;
    hooks _hooks;
    int _listen_fd = -1;
    std::optional<socket_file> _bound;  // the file our bind made at _path
    int _wake_fd = -1;
    std::atomic<bool> _stopping{false};
    std::atomic<bool> _busy{false};
    std::thread _thread;
};

// The version string a state image names its writer by (jakirod's version and commit).
std::string writer_version();

}  // namespace jakiro
