#include "cni/links.hh"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "dataplane/config/host_config.hh"

namespace jakiro::cni {

namespace {

constexpr int ip_timeout_ms = 10000;

// `name` where Debian installs it, or else as PATH finds it.
std::string binary(const std::string& name) {
    for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
        std::string path = dir + name;
        if (access(path.c_str(), X_OK) == 0) {
            return path;
        }
    }
    return name;
}

std::string prefix_text(uint32_t ip, uint8_t length) {
    return format_ipv4(ip) + "/" + std::to_string(int{length});
}

// Runs `name ARGS...` in `netns` (run_ip's contract, for any of iproute2's and ethtool's tools).
bool run_tool(const std::string& name, const std::string& netns,
              const std::vector<std::string>& args, std::string& output, std::string& error) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
        error = std::string("pipe: ") + std::strerror(errno);
        return false;
    }
    std::vector<std::string> argv_text{binary(name)};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    argv.reserve(argv_text.size() + 1);
    for (auto& a : argv_text) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
        error = std::string("fork: ") + std::strerror(errno);
        close(out[0]);
        close(out[1]);
        return false;
    }
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(out[1], 2);
        if (!netns.empty()) {
            const int fd = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
                const char* msg = "cannot enter the network namespace\n";
                (void)!write(2, msg, std::strlen(msg));
                _exit(127);
            }
        }
        execv(argv[0], argv.data());
        execvp(name.c_str(), argv.data());
        _exit(127);
    }
    close(out[1]);
    std::string text;
    char buffer[4096];
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(ip_timeout_ms);
    bool timed_out = false;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - std::chrono::steady_clock::now())
                              .count();
        pollfd p{out[0], POLLIN, 0};
        if (left <= 0 || poll(&p, 1, static_cast<int>(left)) == 0) {
            timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        const ssize_t n = read(out[0], buffer, sizeof(buffer));
        if (n <= 0) {
            break;
        }
        text.append(buffer, static_cast<std::size_t>(n));
    }
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    output = text;
    if (timed_out) {
        error =
            name + " " + (args.empty() ? std::string() : args[0]) + " did not finish within 10 s";
        return false;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        while (!text.empty() && text.back() == '\n') {
            text.pop_back();
        }
        std::string cmd = name;
        for (const auto& a : args) {
            cmd += " " + a;
        }
        error = cmd + ": " + (text.empty() ? "failed" : text);
        return false;
    }
    return true;
}

}  // namespace

bool run_ip(const std::string& netns, const std::vector<std::string>& args, std::string& output,
            std::string& error) {
    return run_tool("ip", netns, args, output, error);
}

bool netns_usable(const std::string& netns, std::string& error) {
    const int fd = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        error = "CNI_NETNS " + netns + ": " + std::strerror(errno);
        return false;
    }
    // A network namespace file is what setns accepts with CLONE_NEWNET; try it in a child so
    // this process stays where it is.
    const pid_t pid = fork();
    if (pid == 0) {
        _exit(setns(fd, CLONE_NEWNET) == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    close(fd);
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        error = "CNI_NETNS " + netns + " is not a network namespace";
        return false;
    }
    return true;
}

bool host_link_exists(const std::string& name) {
    std::string output, error;
    return run_ip("", {"link", "show", "dev", name}, output, error);
}

bool create_face(const container_face& face, std::string& error) {
    std::string output;
    // The peer is made under a temporary name in the host namespace and renamed once inside,
    // so a CNI_IFNAME that exists on the host (eth0) does not collide.
    const std::string temp = face.host_name + "p";
    const auto mtu = std::to_string(face.mtu);
    if (!run_ip("",
                {"link", "add", face.host_name, "mtu", mtu, "type", "veth", "peer", "name", temp,
                 "mtu", mtu},
                output, error)) {
        return false;
    }
    const auto undo = [&](std::string why) {
        std::string ignored;
        run_ip("", {"link", "del", face.host_name}, output, ignored);
        error = std::move(why);
        return false;
    };
    if (!run_ip("", {"link", "set", temp, "netns", face.netns}, output, error)) {
        return undo(error);
    }
    if (!run_ip(face.netns, {"link", "set", temp, "name", face.ifname, "address", face.mac}, output,
                error)) {
        return undo(error);
    }
    // The container's kernel cuts its own super-frames of every kind but TCP's (UDP GSO sends,
    // as QUIC stacks make them, tunnels, SCTP, frag lists), as behind a NIC that offloads only
    // TCP segmentation: a vnet face takes TCP super-frames and no others
    // (vnet_face/vnet_header.hh), and a veth offers them all by default.
    std::vector<std::string> offloads_off{"-K", face.ifname};
    for (const char* feature :
         {"tx-udp-segmentation", "tx-udp_tnl-segmentation", "tx-udp_tnl-csum-segmentation",
          "tx-gre-segmentation", "tx-gre-csum-segmentation", "tx-ipxip4-segmentation",
          "tx-ipxip6-segmentation", "tx-sctp-segmentation", "tx-gso-list"}) {
        offloads_off.insert(offloads_off.end(), {feature, "off"});
    }
    if (!run_tool("ethtool", face.netns, offloads_off, output, error)) {
        return undo(error);
    }
    std::vector<std::vector<std::string>> inside = {
        {"addr", "add", prefix_text(face.ip, face.length), "dev", face.ifname},
        {"link", "set", face.ifname, "up"},
    };
    for (const auto& r : face.routes) {
        std::vector<std::string> cmd{"route", "add", prefix_text(r.dst, r.length)};
        if (r.gw) {
            cmd.insert(cmd.end(), {"via", format_ipv4(*r.gw)});
        }
        cmd.insert(cmd.end(), {"dev", face.ifname});
        inside.push_back(cmd);
    }
    for (const auto& cmd : inside) {
        if (!run_ip(face.netns, cmd, output, error)) {
            return undo(error);
        }
    }
    if (!run_ip("", {"link", "set", face.host_name, "up"}, output, error)) {
        return undo(error);
    }
    return true;
}

bool delete_face(const std::string& host_name, std::string& error) {
    if (!host_link_exists(host_name)) {
        return true;
    }
    std::string output;
    return run_ip("", {"link", "del", host_name}, output, error) || !host_link_exists(host_name);
}

std::optional<face_state> read_container_face(const std::string& netns, const std::string& ifname,
                                              std::string& error) {
    std::string output;
    if (!run_ip(netns, {"-j", "addr", "show", "dev", ifname}, output, error)) {
        return std::nullopt;
    }
    try {
        const auto root = YAML::Load(output);
        if (!root.IsSequence() || root.size() != 1) {
            error = ifname + ": no such interface in the container";
            return std::nullopt;
        }
        const auto link = root[0];
        face_state state;
        state.mac = link["address"].as<std::string>("");
        state.mtu = link["mtu"].as<uint32_t>(0);
        state.up = link["operstate"].as<std::string>("") == "UP";
        for (const auto& a : link["addr_info"]) {
            if (a["family"].as<std::string>("") == "inet") {
                state.addresses.push_back(a["local"].as<std::string>("") + "/" +
                                          a["prefixlen"].as<std::string>(""));
            }
        }
        return state;
    } catch (const YAML::Exception& e) {
        error = "cannot read ip's report on " + ifname + ": " + e.msg;
        return std::nullopt;
    }
}

}  // namespace jakiro::cni
