#pragma once
// Moving a cluster from the legacy vNIC keys (/jakiro/v1/vnics/<vnic>) to per-VPC keys
// (/jakiro/v1/vnics/<vpc>/<vnic> and their homes/ index) while it runs, host by host, with no
// host losing a vNIC:
//
//  - a jakirod that reads per-VPC keys says so in readers/<host> when it registers, and
//    follows the legacy keys too for as long as the cluster has no schema marker;
//  - a jakirod from before reads only the legacy keys and writes no readers/ key;
//  - while the marker is absent and a legacy key or a host without readers/ is there (the
//    cluster is *in transition*), `jakiroctl apply` writes every vNIC under both keys;
//  - `jakiroctl migrate` writes every legacy vNIC under its VPC with its index (and, while
//    old hosts remain, a legacy copy of every per-VPC one), and once every registered host
//    reads per-VPC keys removes the legacy keys and writes the marker, in one transaction.
//
// Pure logic over the records as read (cluster_records): no etcd.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "dataplane/control_plane/cluster_records.hh"

namespace jakiro::control_plane {

// The marker's value: what the cluster's vNIC keys are.
inline constexpr const char* schema_marker_value = "{vnic_keys: per_vpc}";
// A host's readers/ value: the vNIC key forms its jakirod reads.
std::string readers_value_of(const std::string& host);

struct migration_state {
    bool complete = false;                 // the marker is there
    std::size_t legacy_vnics = 0;          // legacy vNIC keys left
    std::vector<std::string> old_readers;  // registered hosts with no readers/ key
    // apply writes both forms: a host may still read only the legacy keys.
    bool in_transition() const { return !complete && (legacy_vnics > 0 || !old_readers.empty()); }
};
migration_state migration_state_of(const std::map<std::string, stored_record>& records);

// What apply adds to the records of its document: in transition, a legacy copy of every vNIC;
// otherwise, on a cluster without the marker (a new one, or one whose hosts all read per-VPC
// keys and that has no legacy key left), the marker.
void add_schema_records(std::map<std::string, std::string>& desired, const migration_state& state);

struct migration_plan {
    // The records once this step is done (every record read, but alive/ keys): what
    // diff_records turns into the transaction.
    std::map<std::string, std::string> desired;
    // Legacy records that cannot be moved ("KEY: why"): nothing is written while there are.
    std::vector<std::string> problems;
    std::size_t moved = 0;          // legacy vNICs written under their VPC (new or newer)
    std::size_t legacy_copies = 0;  // legacy copies written for hosts that still read them
    std::size_t removed = 0;        // legacy keys removed
    bool finishes = false;          // this step writes the marker
    // Hosts that still read only legacy keys (they hold the finish back unless `force`).
    std::vector<std::string> holding_back;
};
// `force`: finish even with hosts that still read only legacy keys (decommissioned ones, say);
// they stop seeing the vNICs.
migration_plan plan_migration(const std::map<std::string, stored_record>& current, bool force);

}  // namespace jakiro::control_plane
