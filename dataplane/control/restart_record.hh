#pragma once
// What `jakiroctl status` and /metrics say of this jakirod's restarts (docs/restart.md): the
// last one (its kind, when, how long forwarding stopped, what was carried over) and how many of
// each kind this host has seen. The history travels in the state image, so the counts never go
// down across take-overs.
//
// Thread-safety: written by main before the control thread starts; read by the control thread.

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace jakiro {

enum class restart_kind : uint8_t {
    none,     // the first start on this host (since its runtime directory was made)
    restart,  // taken over by the same version
    upgrade,  // taken over by another version
    crash,    // started after a predecessor that ended without handing over
};
constexpr std::array<const char*, 4> restart_kind_names = {"none", "restart", "upgrade", "crash"};

inline const char* name_of(restart_kind k) {
    return restart_kind_names[static_cast<std::size_t>(k)];
}

struct restart_record {
    restart_kind last = restart_kind::none;
    int64_t at_unix_ms = 0;  // when this process took over or started
    // Take-overs: from the old process stopping its workers to this one running its own
    // (forwarding stopped for that long), and from asking to take over to running.
    double blackout_ms = 0;
    double takeover_ms = 0;
    std::string from_version;  // the predecessor's, for a take-over
    // How the state came across: "take-over" (the predecessor handed it over a socket) or
    // "fd store" (systemd kept it across `systemctl restart`); empty for none or crash, which
    // status and /metrics show as "cold" (via_shown).
    std::string via;
    // Why a state that systemd's store passed was not used (this process started cold).
    std::string state_refused;
    std::map<std::string, uint64_t> carried;  // what came across: flows, neighbours, ...
    std::map<std::string, uint64_t> lost;     // what could not: flows of removed vNICs
    // Restarts of each kind this host has seen (restart_kind order; `none` unused).
    std::array<uint64_t, 4> counts{};
};

// How the last start got its state, as status and /metrics say it: "take-over", "fd store",
// or "cold" (none came across: the first start, a crash, a stored state refused).
inline std::string via_shown(const restart_record& r) {
    return r.via.empty() ? "cold" : r.via;
}

}  // namespace jakiro
