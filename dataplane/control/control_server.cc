#include "control_server.hh"

#include <algorithm>
#include <sstream>
#include <vector>

#include "../config/config_loader.hh"
#include "reports.hh"

namespace jakiro {

control_server::control_server(daemon_state& state, host_manager& host, std::string socket_path)
    : _state(state),
      _host(host),
      _socket(std::move(socket_path), [this](const std::string& line) { return handle(line); }) {}

control_server::~control_server() {
    stop();
}

bool control_server::start(std::string& error) {
    return _socket.start(error);
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

}  // namespace jakiro
