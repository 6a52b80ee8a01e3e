// jakiroctl: the operator CLI. Sends one command line to jakirod's control socket and prints
// the reply; exits 1 when jakirod reports an error, 2 on bad usage or an unreachable daemon.

#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

constexpr const char* socket_dir = "/run/jakiro";
constexpr int reply_timeout_ms = 5000;

const char* usage =
    "usage: jakiroctl [--host NAME | --socket PATH] COMMAND [--json]\n"
    "commands:\n"
    "  status   host, ports, link state, underlay neighbours\n"
    "  stats    per-port, per-vNIC, security-group and conntrack counters, drops by reason\n"
    "  flows [--vnic NAME]   tracked connections with state, direction and counters\n"
    "  qps [--vnic NAME]     RDMA queue pairs: state, peer, PSNs, retransmits, NAKs\n"
    "  apply FILE            apply a host YAML live: security groups, rules, peers, vNICs\n"
    "--host NAME talks to /run/jakiro/NAME.sock; without it the only socket there is used.\n";

// The single *.sock in /run/jakiro, or "" when there are none or several.
std::string only_socket() {
    DIR* dir = opendir(socket_dir);
    if (dir == nullptr) {
        return "";
    }
    std::vector<std::string> found;
    while (dirent* entry = readdir(dir)) {
        const std::string name = entry->d_name;
        if (name.size() > 5 && name.compare(name.size() - 5, 5, ".sock") == 0) {
            found.push_back(std::string(socket_dir) + "/" + name);
        }
    }
    closedir(dir);
    return found.size() == 1 ? found[0] : "";
}

}  // namespace

int main(int argc, char** argv) {
    std::string path;
    std::string command;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if ((arg == "--host" || arg == "--socket") && i + 1 < argc) {
            const std::string value = argv[++i];
            path = arg == "--host" ? std::string(socket_dir) + "/" + value + ".sock" : value;
        } else if (arg == "--help" || arg == "-h") {
            std::cout << usage;
            return 0;
        } else if (arg == "--host" || arg == "--socket") {
            std::cerr << "jakiroctl: " << arg << " needs a value\n" << usage;
            return 2;
        } else if (command == "apply" && arg.find('/') != 0) {
            // jakirod reads the file itself, from its own working directory: send a full path.
            char* full = realpath(arg.c_str(), nullptr);
            if (full == nullptr) {
                std::cerr << "jakiroctl: cannot read " << arg << ": " << std::strerror(errno)
                          << "\n";
                return 2;
            }
            command += std::string(" ") + full;
            std::free(full);
        } else {
            command += (command.empty() ? "" : " ") + arg;
        }
    }
    if (command.empty()) {
        std::cerr << usage;
        return 2;
    }
    if (path.empty()) {
        path = only_socket();
        if (path.empty()) {
            std::cerr << "jakiroctl: no single jakirod in " << socket_dir
                      << "; name one with --host or --socket\n";
            return 2;
        }
    }
    sockaddr_un addr{};
    if (path.size() >= sizeof(addr.sun_path)) {
        std::cerr << "jakiroctl: socket path too long\n";
        return 2;
    }
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        std::cerr << "jakiroctl: cannot reach jakirod at " << path << ": " << std::strerror(errno)
                  << "\n";
        return 2;
    }
    command += "\n";
    if (send(fd, command.data(), command.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(command.size())) {
        std::cerr << "jakiroctl: cannot send to " << path << "\n";
        return 2;
    }
    std::string reply;
    char buffer[4096];
    for (;;) {
        pollfd in{fd, POLLIN, 0};
        if (poll(&in, 1, reply_timeout_ms) <= 0) {
            std::cerr << "jakiroctl: no reply from " << path << " within 5 s\n";
            return 2;
        }
        const ssize_t n = read(fd, buffer, sizeof(buffer));
        if (n <= 0) {
            break;
        }
        reply.append(buffer, static_cast<std::size_t>(n));
    }
    close(fd);
    const auto newline = reply.find('\n');
    const std::string head = reply.substr(0, newline);
    if (head == "OK") {
        std::cout << (newline == std::string::npos ? "" : reply.substr(newline + 1));
        return 0;
    }
    std::cerr << "jakiroctl: " << (head.rfind("ERR ", 0) == 0 ? head.substr(4) : head) << "\n";
    return 1;
}
