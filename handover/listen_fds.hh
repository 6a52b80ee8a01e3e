#pragma once
// The descriptors a service manager passes at start (sd_listen_fds(3)), read without libsystemd:
// $LISTEN_PID names the process they are meant for, $LISTEN_FDS how many there are (at 3, 4,
// ...), $LISTEN_FDNAMES their names, colon-separated. systemd hands back what a service put in
// its file-descriptor store this way (fd_store.hh).
//
// Only a manager that started this very process is believed: $LISTEN_PID must be our pid, as
// sd_listen_fds checks, so variables inherited from a parent that was itself started with them
// (or set by anyone else) pass nothing. Values that do not parse pass nothing either, with the
// reason; the descriptors are then left alone, as they may not be ours to close.
//
// Thread-safety: take_listen_fds in main before any other thread starts (it edits the
// environment); parse_listen_fds is pure.

#include <sys/types.h>

#include <string>
#include <vector>

namespace jakiro::handover {

// The first descriptor a manager passes (SD_LISTEN_FDS_START).
inline constexpr int listen_fds_start = 3;
// Above this many, $LISTEN_FDS is not believed (systemd's own store is bounded far below).
inline constexpr long max_listen_fds = 1L << 20;

struct passed_fd {
    int fd;
    std::string name;  // "unknown" when the manager named none (sd_listen_fds_with_names)
};

struct listen_fds {
    std::vector<passed_fd> fds;
    // Why variables that were set pass nothing (not for us, not a number, names that do not
    // match the count); empty when they passed descriptors or were not set at all.
    std::string ignored;
};

// The variables' values (nullptr: unset) as a process with pid `self` reads them.
listen_fds parse_listen_fds(const char* listen_pid, const char* listen_fds,
                            const char* listen_fdnames, pid_t self);

// Reads and unsets the variables (a child of ours must not believe them); each descriptor
// passed gets FD_CLOEXEC. One that is not open is dropped, with a note in `ignored`.
listen_fds take_listen_fds();

}  // namespace jakiro::handover
