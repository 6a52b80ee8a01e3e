// jakiroctl: the operator CLI. Sends one command line to jakirod's control socket and prints
// the reply; exits 1 when jakirod reports an error, 2 on bad usage or an unreachable daemon.

#include <dirent.h>
#include <fcntl.h>
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

#include "dataplane/overlay/sealing/host_key.hh"
#include "tools/jakiroctl/cluster_commands.hh"
#include "tools/jakiroctl/control_client.hh"
#include "tools/jakiroctl/top.hh"

namespace {

constexpr const char* socket_dir = "/run/jakiro";

const char* usage =
    "usage: jakiroctl [--host NAME | --socket PATH] COMMAND [--json]\n"
    "commands:\n"
    "  status   host, ports, link state, underlay neighbours\n"
    "  stats    per-port, per-vNIC, security-group and conntrack counters, drops by reason\n"
    "  flows [--vnic NAME]   tracked connections with state, direction and counters\n"
    "  qps [--vnic NAME]     RDMA queue pairs: state, peer, PSNs, retransmits, NAKs\n"
    "  qos                   DHTB per shaped vNIC and class: rate, weights, shares, counters\n"
    "  top [--interval S] [--count N]   live rates per shaped vNIC and class, every S s\n"
    "  metrics               every metric in the Prometheus text format (as GET /metrics)\n"
    "  apply FILE            apply a host YAML live: security groups, rules, peers, vNICs,\n"
    "                        QoS, quotas, the metrics address (what systemctl reload does)\n"
    "  restart [--binary PATH]   start a successor (PATH, default the same binary) that\n"
    "                        takes over with the state: tenants keep their RDMA objects,\n"
    "                        connections and flows\n"
    "overlay keys (no jakirod needed):\n"
    "  overlay-key new FILE      write a new X25519 private key to FILE (mode 600, not over\n"
    "                            an existing file) and print its public key\n"
    "  overlay-key public FILE   print the public key of the private key in FILE\n"
    "cluster commands (the control plane in etcd; no jakirod needed):\n"
    "  --etcd URL apply CLUSTER.yaml   write the cluster's VPCs, groups, vNICs (and hosts)\n"
    "                                  in one transaction; refused with file:line: field\n"
    "  --etcd URL get vnics|vpcs|groups|hosts   read them back\n"
    "  --etcd URL migrate [--dry-run] [--force]  move vNICs from legacy keys to per-VPC keys\n"
    "                                  while hosts are upgraded one by one (idempotent)\n"
    "options:\n"
    "  --host NAME    talk to /run/jakiro/NAME.sock; without it the only socket there is used\n"
    "  --socket PATH  talk to the control socket at PATH\n"
    "  --json         machine-readable output (status, stats, flows, qps, qos)\n"
    "  --help         print this and exit\n"
    "Exit status: 0 done, 1 jakirod refused (ERR ...), 2 bad usage or no jakirod. See "
    "jakiroctl(8).\n";

// `overlay-key new|public FILE`: the host's overlay key pair (overlay/sealing/host_key.hh).
int run_overlay_key(int argc, char** argv) {
    namespace sealing = jakiro::overlay::sealing;
    if (argc != 4 || (std::string(argv[2]) != "new" && std::string(argv[2]) != "public")) {
        std::cerr << "usage: jakiroctl overlay-key new|public FILE\n";
        return 2;
    }
    const std::string path = argv[3];
    if (std::string(argv[2]) == "new") {
        const sealing::host_key_pair pair = sealing::generate_key_pair();
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        const std::string text = sealing::format_key(pair.private_key) + "\n";
        if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
            std::cerr << "jakiroctl: cannot write " << path << ": " << std::strerror(errno) << "\n";
            if (fd >= 0) {
                ::close(fd);
            }
            return 1;
        }
        ::close(fd);
        std::cout << sealing::format_key(pair.public_key) << "\n";
        return 0;
    }
    std::string error;
    const auto pair = sealing::load_private_key(path, error);
    if (!pair) {
        std::cerr << "jakiroctl: " << error << "\n";
        return 1;
    }
    std::cout << sealing::format_key(pair->public_key) << "\n";
    return 0;
}

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
    std::vector<std::string> etcd;
    if (argc >= 2 && std::string(argv[1]) == "overlay-key") {
        return run_overlay_key(argc, argv);
    }
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--etcd" && i + 1 < argc) {
            etcd.push_back(argv[++i]);
        }
    }
    if (!etcd.empty()) {
        std::vector<std::string> args;
        for (int i = 1; i < argc; ++i) {
            if (std::string(argv[i]) == "--etcd") {
                ++i;
            } else {
                args.push_back(argv[i]);
            }
        }
        return run_cluster_command(etcd, args);
    }
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
        } else if ((command == "apply" ||
                    (command.rfind("restart", 0) == 0 && command.size() >= 8 &&
                     command.compare(command.size() - 8, 8, "--binary") == 0)) &&
                   arg.find('/') != 0) {
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
    if (command == "top" || command.rfind("top ", 0) == 0) {
        return run_top(path, command);
    }
    std::string body;
    const int status = ask(path, command, body);
    if (status == 0) {
        std::cout << body;
    }
    return status;
}
