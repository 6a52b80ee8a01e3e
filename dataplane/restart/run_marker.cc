#include "dataplane/restart/run_marker.hh"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>

namespace jakiro {

namespace {

// A process that has ended but that its parent has not reaped yet (a zombie: 'Z' in
// /proc/PID/stat) is gone for us: a daemon started outside systemd is reparented to init, which
// may take its time, and its successor must not wait for that to see the crash.
bool ended_unreaped(long pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) {
        return false;
    }
    const auto name_end = line.rfind(')');  // the command name may hold spaces and ')'
    return name_end != std::string::npos && name_end + 2 < line.size() && line[name_end + 2] == 'Z';
}

}  // namespace

bool predecessor_crashed(const std::string& path, restart_record& record) {
    std::ifstream in(path);
    long pid = 0;
    if (!(in >> pid) || pid <= 1) {
        return false;
    }
    for (auto& n : record.counts) {
        if (!(in >> n)) {
            n = 0;
        }
    }
    // Alive (or not ours to signal): not a crash. Gone or ended: nobody removed or rewrote the
    // marker.
    return (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) || ended_unreaped(pid);
}

void write_run_marker(const std::string& path, const restart_record& record) {
    const std::string temporary = path + ".new";
    {
        std::ofstream out(temporary, std::ios::trunc);
        out << getpid();
        for (const auto n : record.counts) {
            out << " " << n;
        }
        out << "\n";
    }
    std::rename(temporary.c_str(), path.c_str());
}

void remove_run_marker(const std::string& path) {
    unlink(path.c_str());
}

}  // namespace jakiro
