#pragma once
// `systemctl restart` with the state (docs/restart.md): the daemon's side of systemd's
// file-descriptor store (handover/fd_store.hh). On SIGTERM the old process freezes and writes
// its image as for a take-over and parks it, with every descriptor it names, in the store; the
// new process, started by systemd with them ($LISTEN_FDS), restores from it as a successor
// does from a take-over, or, when it cannot read it, starts cold and says why.
//
// Thread-safety: restore_from_store in main before other threads start; the rest any thread.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/restart/take_over.hh"
#include "handover/image.hh"
#include "handover/listen_fds.hh"

namespace jakiro {

// How many descriptors the unit's store holds: --fd-store N, else $FDSTORE (systemd 254 and
// later export FileDescriptorStoreMax= so), else 0 (no store: SIGTERM stops cold). Only with a
// manager to send to ($NOTIFY_SOCKET).
std::size_t fd_store_capacity(std::size_t option);

struct stored_inheritance {
    std::optional<inheritance> inherited;  // the state, opened and checked
    std::vector<std::string> names;        // every name of ours the store passed
    std::string refused;                   // why a stored state is not used ("": none passed)
    std::size_t missing = 0;               // stored descriptors the manager no longer had
};
// Reads the state among `passed` (the descriptors $LISTEN_FDS gave this process). A state this
// binary cannot read (a required section it does not know, a newer version, a truncated or
// corrupt image) is refused whole: `refused` says why and every descriptor is closed.
stored_inheritance restore_from_store(const handover::listen_fds& passed);

// FDSTOREREMOVE=1 for each name: the state is consumed (or refused), so that a later crash does
// not find it.
void forget_stored_state(const std::vector<std::string>& names);

// Parks `image` and its descriptors in the store of `capacity`; false with `why`.
bool store_state(const handover::image_writer& image, std::size_t capacity, std::string& why);

}  // namespace jakiro
