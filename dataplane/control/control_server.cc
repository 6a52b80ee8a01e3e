#include "control_server.hh"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

#include "../config/config_loader.hh"
#include "reports.hh"

namespace jakiro {

namespace {
constexpr int poll_interval_ms = 200;  // how quickly stop() is noticed
constexpr int client_timeout_ms = 2000;
constexpr std::size_t max_command = 4096;

std::string directory_of(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}
}  // namespace

control_server::control_server(daemon_state& state, host_manager& host, std::string socket_path)
    : _state(state), _host(host), _path(std::move(socket_path)) {}

control_server::~control_server() {
    stop();
}

bool control_server::start(std::string& error) {
    if (_path.size() >= sizeof(sockaddr_un::sun_path)) {
        error = "control socket path too long: " + _path;
        return false;
    }
    mkdir(directory_of(_path).c_str(), 0755);
    _listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, _path.c_str(), sizeof(addr.sun_path) - 1);
    // A socket file left by a crashed daemon is stale if nobody accepts on it.
    if (connect(_listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
        error = "another jakirod is serving " + _path;
        close(_listen_fd);
        _listen_fd = -1;
        return false;
    }
    unlink(_path.c_str());
    if (bind(_listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(_listen_fd, 16) != 0) {
        error = "cannot listen on " + _path + ": " + std::strerror(errno);
        close(_listen_fd);
        _listen_fd = -1;
        return false;
    }
    _thread = std::thread([this] { serve(); });
    return true;
}

void control_server::stop() {
    _stopping = true;
    if (_thread.joinable()) {
        _thread.join();
    }
    if (_listen_fd >= 0) {
        close(_listen_fd);
        unlink(_path.c_str());
        _listen_fd = -1;
    }
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
    bool raw = false;
    std::string vnic;
    std::vector<std::string> rest;
    for (std::size_t i = 1; i < args.size(); ++i) {
        if (args[i] == "--json") {
            json = true;
        } else if (args[i] == "--raw" && command == "qos") {
            raw = true;
        } else if (args[i] == "--vnic" && i + 1 < args.size() &&
                   (command == "flows" || command == "qps")) {
            vnic = args[++i];
        } else {
            rest.push_back(args[i]);
        }
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
            return reply + "\n";
        }
        std::string summary, error;
        if (!_host.apply(std::move(loaded.config), summary, error)) {
            return "ERR " + error + " (nothing changed)\n";
        }
        return "OK\n" + summary;
    }
    if (!rest.empty()) {
        return "ERR unexpected argument '" + rest[0] + "' for " + command + "\n";
    }
    if (command == "status") {
        return "OK\n" + render_status(_state, json);
    }
    if (command == "stats") {
        return "OK\n" + render_stats(_state, json);
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
        return "OK\n" + render_qps(_state, vnic, json);
    }
    if (command == "qos") {
        return "OK\n" + render_qos(_state, json, raw);
    }
    return "ERR unknown command '" + command +
           "' (try: status, stats, flows, qps, qos, apply FILE)\n";
}

void control_server::serve() {
    while (!_stopping) {
        pollfd listener{_listen_fd, POLLIN, 0};
        if (poll(&listener, 1, poll_interval_ms) <= 0) {
            continue;
        }
        const int client = accept4(_listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) {
            continue;
        }
        std::string command;
        char buffer[512];
        // Read one line, bounded in size and time so a stuck client cannot wedge the thread.
        while (command.find('\n') == std::string::npos && command.size() < max_command) {
            pollfd in{client, POLLIN, 0};
            if (poll(&in, 1, client_timeout_ms) <= 0) {
                break;
            }
            const ssize_t n = read(client, buffer, sizeof(buffer));
            if (n <= 0) {
                break;
            }
            command.append(buffer, static_cast<std::size_t>(n));
        }
        const std::string reply = handle(command.substr(0, command.find('\n')));
        std::size_t sent = 0;
        while (sent < reply.size()) {
            const ssize_t n = send(client, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) {
                break;
            }
            sent += static_cast<std::size_t>(n);
        }
        close(client);
    }
}

}  // namespace jakiro
