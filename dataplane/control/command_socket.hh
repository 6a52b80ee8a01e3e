#pragma once
// The transport under jakirod's control socket: a Unix stream listener whose clients each send
// one command line and get one reply, then the connection closes. Every client is served from
// one thread with poll() and non-blocking descriptors, so a client that is slow to send its
// line or never reads its reply holds only its own connection, never the thread: it is
// dropped when its deadline passes (a few seconds), and meanwhile every other client is
// answered as usual. Beyond max_clients connections at once, new ones get "ERR busy".
//
// The same thread serves an optional HTTP listener (TCP, e.g. Prometheus' GET /metrics) with
// the same deadlines and limits, runs a periodic tick, and runs functions that other threads
// post(), so everything that reads the daemon's state for a client happens on this one thread.
//
// Thread-safety: start() and stop() from one thread (main or a test); the handlers, the tick
// and everything else run on the socket's own thread; dropped() and post() from anywhere;
// set_http_listener() before start() or on the socket's thread (from a handler).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/control/socket_path.hh"

namespace jakiro {

class command_socket {
  public:
    using handler = std::function<std::string(const std::string& line)>;
    // Gets an HTTP request's head (request line and headers, up to the blank line; cut at
    // max_http_request) and returns the whole response, status line to body.
    using http_handler = std::function<std::string(const std::string& request_head)>;

    struct limits {
        // From accept to a complete line (the old server's per-read timeout, now overall).
        int read_deadline_ms = 2000;
        // From a reply being ready to its last byte gone: jakiroctl reads at once, so this
        // only ends clients that do not read.
        int write_deadline_ms = 5000;
        std::size_t max_clients = 64;
        std::size_t max_command = 4096;       // longer lines are cut here and answered
        std::size_t max_http_request = 8192;  // request heads beyond this are answered as cut
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

    // start() binds the path even while another process serves it: a successor taking over
    // (its predecessor's clients finish; new ones reach the successor).
    void replace_existing() { _replace = true; }
    // After a take-over that failed: binds the path again if it no longer leads to this socket
    // (the successor bound it and then removed it, or died holding it), so that clients reach
    // this process by name again (socket_path.hh). On the socket's thread, soon.
    void reclaim_path();

    // Clients dropped because their deadline passed (slow to ask, or not reading).
    uint64_t dropped() const { return _dropped.load(std::memory_order_relaxed); }

    // A listening TCP socket (non-blocking) on ip:port (host order); -1 with `error` set.
    static int open_tcp_listener(uint32_t ip, uint16_t port, std::string& error);
    // Serves `fd` (from open_tcp_listener, or -1 for none) as HTTP with `on_request`; a
    // listener set before is closed (its clients still get their answers).
    void set_http_listener(int fd, http_handler on_request);
    // The HTTP listener's descriptor (-1: none), handed to a successor (docs/restart.md).
    int http_listener() const { return _http_fd; }
    // The port the HTTP listener is bound to (0: none); for tests that bind port 0.
    uint16_t http_port() const;

    // `fn` runs on the socket's thread about every `interval_ms` (at least that far apart).
    void set_tick(std::function<void()> fn, int interval_ms);
    // Runs `fn` on the socket's thread soon (any thread may post). Never runs if the socket
    // is stopped before it gets to it.
    void post(std::function<void()> fn);

  private:
    void serve();
    void run_posted();

    std::string _path;
    handler _on_line;
    limits _limits;
    int _listen_fd = -1;
    std::optional<socket_file> _bound;  // the file the bind made at _path
    bool _replace = false;
    int _http_fd = -1;
    http_handler _on_http;
    int _wake_fd = -1;  // eventfd: post() wakes the thread
    std::mutex _posted_mutex;
    std::vector<std::function<void()>> _posted;
    std::function<void()> _tick;
    int _tick_interval_ms = 0;
    std::atomic<bool> _stopping{false};
    std::atomic<uint64_t> _dropped{0};
    std::thread _thread;
};

}  // namespace jakiro
