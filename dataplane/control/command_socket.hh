#pragma once
// The transport under jakirod's control socket: a Unix stream listener whose clients each send
// one command line and get one reply, then the connection closes. Every client is served from
// one thread with poll() and non-blocking descriptors, so a client that is slow to send its
// line or never reads its reply holds only its own connection, never the thread: it is
// dropped when its deadline passes (a few seconds), and meanwhile every other client is
// answered as usual. Beyond max_clients connections at once, new ones get "ERR busy".
//
// Thread-safety: start() and stop() from one thread (main or a test); the handler and
// everything else run on the socket's own thread; dropped() from anywhere.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace jakiro {

class command_socket {
  public:
    using handler = std::function<std::string(const std::string& line)>;

    struct limits {
        // From accept to a complete line (the old server's per-read timeout, now overall).
        int read_deadline_ms = 2000;
        // From a reply being ready to its last byte gone: jakiroctl reads at once, so this
        // only ends clients that do not read.
        int write_deadline_ms = 5000;
        std::size_t max_clients = 64;
        std::size_t max_command = 4096;  // longer lines are cut here and answered
    };

    command_socket(std::string path, handler on_line, limits lim);
    explicit command_socket(std::string path, handler on_line)
        : command_socket(std::move(path), std::move(on_line), limits{}) {}
    ~command_socket();
    command_socket(const command_socket&) = delete;
    command_socket& operator=(const command_socket&) = delete;

    // Binds the socket; false with `error` set if that fails (e.g. another jakirod owns it).
    bool start(std::string& error);
    void stop();

    // Clients dropped because their deadline passed (slow to ask, or not reading).
    uint64_t dropped() const { return _dropped.load(std::memory_order_relaxed); }

  private:
    void serve();

    std::string _path;
    handler _on_line;
    limits _limits;
    int _listen_fd = -1;
    std::atomic<bool> _stopping{false};
    std::atomic<uint64_t> _dropped{0};
    std::thread _thread;
};

}  // namespace jakiro
