#include "run_marker.hh"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>

namespace jakiro {

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
    // Alive (or not ours to signal): not a crash. Gone: nobody removed or rewrote the marker.
    return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
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
