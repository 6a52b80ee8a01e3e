#include "dataplane/restart/successor.hh"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace jakiro {

own_command read_own_command(int argc, char** argv) {
    own_command own;
    char path[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n > 0) {
        own.binary.assign(path, static_cast<std::size_t>(n));
    } else {
        own.binary = argv[0];
    }
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg != "--take-over") {
            own.args.push_back(arg);
        }
    }
    return own;
}

pid_t start_successor(const std::string& binary, const std::vector<std::string>& args,
                      std::string& error) {
    if (access(binary.c_str(), X_OK) != 0) {
        error = "cannot run " + binary + ": " + std::strerror(errno);
        return -1;
    }
    std::vector<std::string> words{binary};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    argv.reserve(words.size() + 1);
    for (auto& w : words) {
        argv.push_back(w.data());
    }
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
        error = std::string("fork: ") + std::strerror(errno);
        return -1;
    }
    if (pid == 0) {
        // Only async-signal-safe calls from here: the parent has threads.
        setsid();
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, nullptr);
        // None of our sockets, ports or devices: what the successor needs it is handed.
        syscall(SYS_close_range, 3u, ~0u, 0u);
        execv(argv[0], argv.data());
        _exit(127);
    }
    return pid;
}

}  // namespace jakiro
