#pragma once
// `jakiroctl restart`: the running jakirod starts its successor itself (docs/restart.md), the
// way nginx upgrades its binary, so that under systemd the successor is in the unit's cgroup and
// reports MAINPID= before the predecessor exits.
//
// Thread-safety: any thread (fork + exec).

#include <sys/types.h>

#include <string>
#include <vector>

namespace jakiro {

// This process's executable and arguments as it was started (argv[1..]), read at start: the
// successor runs the same command line (with `binary`, default the same path, which a package
// upgrade has replaced by then).
struct own_command {
    std::string binary;
    std::vector<std::string> args;
};
own_command read_own_command(int argc, char** argv);

// Starts `binary args...` in a session of its own with no descriptor but 0-2 inherited; its pid,
// or -1 with `error`.
pid_t start_successor(const std::string& binary, const std::vector<std::string>& args,
                      std::string& error);

}  // namespace jakiro
