#pragma once
// jakirod's control thread. It serves:
//  - the control socket: a Unix stream socket that takes one command line per connection and
//    answers "OK\n<body>" or "ERR <message>\n" (jakiroctl);
//  - the metrics listener (host.metrics.listen): GET /metrics in the Prometheus text format;
//  - DPDK telemetry's /jakiro/... commands (telemetry.hh), run here on the telemetry thread's
//    behalf;
//  - systemd: STATUS= when the state changes and WATCHDOG=1 while the worker makes progress.
// All of it runs on one (non-EAL) thread: clients are served together with deadlines
// (command_socket.hh), so one that never reads its reply cannot wedge it, and nothing reads the
// daemon's state from any other thread. A scrape never writes to or waits for the worker.

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "dataplane/control/command_socket.hh"
#include "dataplane/control/daemon_state.hh"
#include "dataplane/control/host_manager.hh"
#include "dataplane/control/metrics.hh"
#include "dataplane/control/stats_snapshot.hh"

namespace jakiro {

class control_server {
  public:
    control_server(daemon_state& state, host_manager& host, std::string socket_path);
    ~control_server();
    control_server(const control_server&) = delete;
    control_server& operator=(const control_server&) = delete;

    // Binds the control socket and, when configured, the metrics listener; false with `error`
    // set if that fails (e.g. another jakirod owns the socket, or the port is taken).
    bool start(std::string& error);
    void stop();

    // A predecessor's metrics listener (docs/restart.md): start() serves it instead of binding
    // host.metrics.listen, which the predecessor still holds. Takes `fd`.
    void inherit_metrics_listener(int fd) { _inherited_metrics = fd; }
    // A successor: start() takes over the control socket's path from the predecessor.
    void replace_predecessor() { _socket.replace_existing(); }
    // A successor that bound the control socket's path failed: take the path back.
    void reclaim_socket() { _socket.reclaim_path(); }
    // The metrics listener now (-1: none), to hand to a successor.
    int metrics_listener() const { return _socket.http_listener(); }

    // Exposed for tests: the reply to one command line.
    std::string handle(const std::string& command_line);
    // Every counter of the daemon now, read once (control thread only): what stats, qps, qos
    // and the metrics render.
    stats_snapshot snapshot() const;
    // The daemon's metrics now, and as Prometheus text (control thread only).
    std::vector<prometheus::MetricFamily> collect();
    std::string metrics_text();
    // The one-line state systemd shows (STATUS=).
    std::string status_line() const;

    // SIGHUP: when `*flag` is set, the control thread applies `file` (as `apply FILE`).
    void reload_on(std::atomic<bool>* flag, std::string file) {
        _reload_flag = flag;
        _reload_file = std::move(file);
    }

    // `restart [--binary PATH]`: `fn` starts the successor and answers the client
    // (docs/restart.md).
    void on_restart(std::function<std::string(const std::vector<std::string>& args)> fn) {
        _on_restart = std::move(fn);
    }

    // Runs `fn` on the control thread soon, without waiting (any thread).
    void post(std::function<void()> fn) { _socket.post(std::move(fn)); }
    // `fn` runs on the control thread once a second (the etcd follower's retries).
    void on_second(std::function<void()> fn) { _on_second = std::move(fn); }

    // Runs `fn` on the control thread and waits for it up to `timeout`; false if it did not
    // run in time (then it never runs). For other threads (DPDK telemetry's).
    bool run_on_control_thread(std::function<void()> fn, std::chrono::milliseconds timeout);

  private:
    void tick();
    command_socket::http_handler metrics_handler();
    bool bind_metrics(const std::optional<metrics_config>& metrics, std::string& error);
    uint64_t worker_progress() const;

    daemon_state& _state;
    host_manager& _host;
    command_socket _socket;
    uint64_t _scrapes = 0;
    // systemd: the watchdog period (0: none), when to ping next and what the worker had done.
    std::chrono::microseconds _watchdog{0};
    std::chrono::steady_clock::time_point _next_watchdog{};
    uint64_t _last_progress = 0;
    std::chrono::steady_clock::time_point _next_second{};
    std::string _last_status;
    std::atomic<bool>* _reload_flag = nullptr;
    std::string _reload_file;
    std::function<void()> _on_second;
    int _inherited_metrics = -1;
    std::function<std::string(const std::vector<std::string>&)> _on_restart;
};

}  // namespace jakiro
