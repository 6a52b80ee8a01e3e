#include "dataplane/control/control_server.hh"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <sstream>
#include <vector>

#include <rte_ethdev.h>

#include "dataplane/config/config_loader.hh"
#include "dataplane/control/counter_reports.hh"
#include "dataplane/control/reports.hh"
#include "dataplane/log.hh"
#include "dataplane/ports.hh"
#include "dataplane/service/notify.hh"
#include "rnic/engine.hh"

namespace jakiro {

namespace {
constexpr int tick_ms = 200;
}  // namespace

control_server::control_server(daemon_state& state, host_manager& host, std::string socket_path)
    : _state(state),
      _host(host),
      _socket(std::move(socket_path), [this](const std::string& line) { return handle(line); }) {}

control_server::~control_server() {
    stop();
}

bool control_server::start(std::string& error) {
    if (_inherited_metrics >= 0) {
        _socket.set_http_listener(_inherited_metrics, metrics_handler());
        _inherited_metrics = -1;
    } else if (!bind_metrics(_state.config.metrics, error)) {
        return false;
    }
    _watchdog = service::watchdog_period();
    _socket.set_tick([this] { tick(); }, tick_ms);
    return _socket.start(error);
}

bool control_server::bind_metrics(const std::optional<metrics_config>& metrics,
                                  std::string& error) {
    int fd = -1;
    if (metrics) {
        fd = command_socket::open_tcp_listener(metrics->ip, metrics->port, error);
        if (fd < 0) {
            error = "host.metrics.listen: " + error;
            return false;
        }
    }
    _socket.set_http_listener(fd, metrics_handler());
    return true;
}

command_socket::http_handler control_server::metrics_handler() {
    return [this](const std::string& head) {
        return http_metrics_response(head, [this] {
            ++_scrapes;
            return metrics_text();
        });
    };
}

stats_snapshot control_server::snapshot() const {
    control_counters control;
    control.control_dropped = _socket.dropped();
    control.scrapes = _scrapes;
    control.log_suppressed = log::suppressed();
    return collect_stats(_state, control);
}

std::vector<prometheus::MetricFamily> control_server::collect() {
    return metric_families(snapshot());
}

std::string control_server::metrics_text() {
    return render_metrics_text(collect());
}

uint64_t control_server::worker_progress() const {
    uint64_t sum = 0;
    for (const auto* worker : _state.workers) {
        sum += worker->counters.busy_polls.read() + worker->counters.idle_sleeps.read() +
               worker->counters.throttled_sleeps.read();
    }
    return sum;
}

std::string control_server::status_line() const {
    unsigned up = 0;
    for (const auto& port : _state.ports) {
        up += port_link_up(port.port_id);
    }
    unsigned resolved = 0;
    for (uint32_t slot = 0; slot < _state.neighbors->size(); ++slot) {
        resolved += _state.neighbors->mac(slot).has_value();
    }
    std::ostringstream out;
    out << (daemon_ready(_state) ? "ready" : "not ready") << ": " << up << "/"
        << _state.ports.size() << " ports up, underlay neighbours " << resolved << "/"
        << _state.neighbors->size() << " resolved, " << _state.config.vnics.size() << " vNICs";
    if (_state.config.metrics) {
        out << ", metrics on " << _state.config.metrics->text();
    }
    return out.str();
}

void control_server::tick() {
    if (_reload_flag != nullptr && _reload_flag->exchange(false)) {
        const std::string reply = handle("apply " + _reload_file);  // logs what happened
        if (reply.rfind("OK", 0) != 0) {
            log::error("reload_failed", reply.substr(0, reply.find('\n')),
                       {{"file", _reload_file}});
        }
    }
    const auto now = std::chrono::steady_clock::now();
    if (_watchdog.count() > 0 && now >= _next_watchdog) {
        // A worker that stopped looping (stuck in a call, spinning in a bug) stops the pings,
        // and systemd restarts jakirod after WatchdogSec. One that sleeps still counts naps.
        const uint64_t progress = worker_progress();
        if (progress != _last_progress) {
            service::notify("WATCHDOG=1");
        } else {
            log::warning("worker_stalled", "the worker made no progress: no watchdog ping",
                         {{"period_ms", _watchdog.count() / 2000}});
        }
        _last_progress = progress;
        _next_watchdog = now + _watchdog / 2;
    }
    if (now >= _next_second) {
        _next_second = now + std::chrono::seconds(1);
        if (_on_second) {
            _on_second();
        }
        auto status = status_line();
        if (status != _last_status) {
            service::notify("STATUS=" + status);
            const bool was_ready = _last_status.rfind("ready", 0) == 0;
            const bool ready = status.rfind("ready", 0) == 0;
            if (ready != was_ready) {
                log::write(ready ? log::level::info : log::level::warning,
                           ready ? "ready" : "not_ready", status);
            }
            _last_status = std::move(status);
        }
    }
}

bool control_server::run_on_control_thread(std::function<void()> fn,
                                           std::chrono::milliseconds timeout) {
    // The job may outlive this call if it times out: it shares what it needs, and whoever
    // claims `taken` first decides whether it runs.
    auto taken = std::make_shared<std::atomic<bool>>(false);
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    auto job = std::make_shared<std::function<void()>>(std::move(fn));
    _socket.post([taken, done, job] {
        if (taken->exchange(true)) {
            return;  // the caller gave up
        }
        (*job)();
        done->set_value();
    });
    if (finished.wait_for(timeout) == std::future_status::ready) {
        return true;
    }
    if (!taken->exchange(true)) {
        return false;  // it never ran and now never will
    }
    finished.wait();  // it is running: its references are still good until it ends
    return true;
}

void control_server::stop() {
    _socket.stop();
}

std::string control_server::handle(const std::string& command_line) {
    std::istringstream words(command_line);
    std::vector<std::string> args;
    for (std::string word; words >> word;) {
        args.push_back(word);
    }
    if (args.empty()) {
        return "ERR empty command\n";
    }
    const std::string command = args[0];
    bool json = false;
    std::string vnic;
    std::vector<std::string> rest;
    for (std::size_t i = 1; i < args.size(); ++i) {
        if (args[i] == "--json") {
            json = true;
        } else if (args[i] == "--vnic" && i + 1 < args.size() &&
                   (command == "flows" || command == "qps")) {
            vnic = args[++i];
        } else {
            rest.push_back(args[i]);
        }
    }
    if (command == "apply" && _state.handing_over.load()) {
        return "ERR jakirod is handing over to its successor: apply to the new one\n";
    }
    if (command == "restart") {
        return _on_restart ? _on_restart(rest) : "ERR restart is not available here\n";
    }
    if (command == "apply" && _state.control_plane != nullptr) {
        // The running configuration is host YAML + etcd; a host YAML alone would drop the
        // cluster's part of it.
        return "ERR this host follows the cluster in etcd (control: in its YAML): change the "
               "cluster with jakiroctl --etcd URL apply, or restart jakirod for host settings\n";
    }
    if (command == "apply") {
        if (rest.size() != 1) {
            return "ERR usage: apply FILE\n";
        }
        auto loaded = load_host_config_file(rest[0]);
        if (!loaded.ok()) {
            std::string reply = "ERR configuration rejected, nothing changed:";
            for (const auto& error : loaded.errors) {
                reply += "\n  " + error.to_string();
            }
            log::warning("apply_rejected", "configuration rejected, nothing changed",
                         {{"file", rest[0]}, {"first_error", loaded.errors[0].to_string()}});
            return reply + "\n";
        }
        // A new metrics address is bound before anything else changes, so a taken port
        // rejects the whole apply.
        const auto metrics = loaded.config.metrics;
        const bool metrics_moved = metrics != _state.config.metrics;
        int metrics_fd = -1;
        std::string summary, error;
        if (metrics_moved && metrics) {
            metrics_fd = command_socket::open_tcp_listener(metrics->ip, metrics->port, error);
            if (metrics_fd < 0) {
                log::warning("apply_rejected", error, {{"file", rest[0]}});
                return "ERR host.metrics.listen: " + error + " (nothing changed)\n";
            }
        }
        if (!_host.apply(std::move(loaded.config), summary, error)) {
            if (metrics_fd >= 0) {
                close(metrics_fd);
            }
            log::warning("apply_rejected", error, {{"file", rest[0]}});
            return "ERR " + error + " (nothing changed)\n";
        }
        if (metrics_moved) {
            _socket.set_http_listener(metrics_fd, metrics_handler());  // closes the old one
            summary += "metrics " + (metrics ? "on " + metrics->text() : std::string("off")) + "\n";
        }
        log::info("applied", summary.substr(0, summary.find('\n')), {{"file", rest[0]}});
        _last_status.clear();  // STATUS= again at the next tick
        return "OK\n" + summary;
    }
    if (!rest.empty()) {
        return "ERR unexpected argument '" + rest[0] + "' for " + command + "\n";
    }
    if (command == "status") {
        return "OK\n" + render_status(_state, json);
    }
    if (command == "stats") {
        return "OK\n" + render_stats(snapshot(), json);
    }
    if (command == "flows") {
        if (!vnic.empty() && std::find(_state.slot_names.begin(), _state.slot_names.end(), vnic) ==
                                 _state.slot_names.end()) {
            return "ERR no vNIC named '" + vnic + "'\n";
        }
        return "OK\n" + render_flows(_state, vnic, json);
    }
    if (command == "qps") {
        if (!vnic.empty() && std::find(_state.slot_names.begin(), _state.slot_names.end(), vnic) ==
                                 _state.slot_names.end()) {
            return "ERR no vNIC named '" + vnic + "'\n";
        }
        return "OK\n" + render_qps(snapshot(), vnic, json);
    }
    if (command == "qos") {
        return "OK\n" + render_qos(snapshot(), json);
    }
    if (command == "metrics") {
        return "OK\n" + metrics_text();
    }
    return "ERR unknown command '" + command +
           "' (try: status, stats, flows, qps, qos, metrics, apply FILE)\n";
}

}  // namespace jakiro
