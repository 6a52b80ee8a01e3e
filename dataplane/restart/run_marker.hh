#pragma once
// How a starting jakirod knows it follows a crash (docs/restart.md): while it runs, a file
// beside its control socket names its pid and the host's restart counts. A clean stop removes
// it and a take-over rewrites it; found naming a process that is gone, the predecessor ended
// without either: a crash (SIGKILL, abort, the watchdog), and its counts carry on.
//
// Thread-safety: main only.

#include <string>

#include "dataplane/control/restart_record.hh"

namespace jakiro {

inline std::string run_marker_path(const std::string& control_socket) {
    return control_socket + ".pid";
}

// Reads the marker a predecessor left: true (with its counts in `record`) if it names a
// process that no longer runs (gone, or ended and not yet reaped by its parent).
bool predecessor_crashed(const std::string& path, restart_record& record);
// Writes ours (this pid, `record`'s counts).
void write_run_marker(const std::string& path, const restart_record& record);
void remove_run_marker(const std::string& path);

}  // namespace jakiro
