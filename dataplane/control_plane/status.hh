#pragma once
// What `jakiroctl status` says about the control plane: connected or not (since when, at which
// revision), what the state in force contains, which hosts are stale and which records were
// refused; and the watch-to-publish latencies (perf/control_plane reads them).
//
// Thread-safety: written and read on the control thread only (cluster_follower owns it).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace jakiro {
class json_writer;
}

namespace jakiro::control_plane {

struct control_plane_status {
    std::vector<std::string> endpoints;
    bool connected = false;
    bool ever_connected = false;
    std::chrono::system_clock::time_point since{};  // when `connected` last changed
    std::string last_error;
    int64_t revision_seen = 0;     // the newest revision etcd has shown us
    int64_t revision_applied = 0;  // the revision of the state in force (0: none yet)
    std::size_t records = 0;
    std::size_t record_bytes = 0;
    std::size_t local_vnics = 0;
    std::size_t peers = 0;
    std::vector<std::string> vpcs;  // the VPCs this host follows (its vNICs are in them)
    // The cluster has no schema marker yet: the legacy vNIC keys are followed too.
    bool legacy_keys = false;
    // Members this host knows of each group of those VPCs ("vpc/group", count): local vNICs
    // and remote ones, including groups that only a rule names.
    std::vector<std::pair<std::string, std::size_t>> group_members;
    std::vector<std::string> stale_hosts;
    std::vector<std::string> unplaced_vnics;  // their host never registered
    std::vector<std::string> waiting_vnics;   // local, but their port cannot be opened yet
    std::vector<std::string> rejected;        // records refused: "KEY: reason"
    uint64_t views_applied = 0;
    // Snapshots patched from the one before (only peers changed) rather than built whole.
    uint64_t patched_publications = 0;
    uint64_t apply_failures = 0;
    // Watch response received -> new snapshot published, in microseconds, most recent last
    // (bounded; perf/control_plane reads them from `status --json`).
    std::vector<uint64_t> publish_latency_us;
    static constexpr std::size_t max_latency_samples = 4096;
};

std::string render_control_plane_text(const control_plane_status& status);
void write_control_plane_json(json_writer& out, const control_plane_status& status);

}  // namespace jakiro::control_plane
