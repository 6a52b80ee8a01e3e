#pragma once
// The cluster's records as read from etcd (a copy of everything under /jakiro/v1/), kept up to
// date from the watch, and what they mean: a validated cluster document (cluster_view).
// Also the other direction: the records a cluster YAML stands for, and the difference between
// two sets of records (what `jakiroctl --etcd apply` writes in its transaction).
//
// Interest: jakiroctl keeps every record; jakirod follows only what its own vNICs need
// (follow_only): the VPCs its homes/ index names, with their groups and vNICs, plus the hosts
// (their underlay addresses) and their liveness. Records of other VPCs are dropped on arrival
// by their key alone, before any parsing: they cost one key comparison. Remote groups need
// nothing more: a rule can only name a group of its own VPC.
// While the cluster has no schema marker (key_schema.hh), a host also follows the legacy vNIC
// keys (follow_legacy): every one is kept, since only its value says its VPC and host, and one
// that names this host counts as a local vNIC of its VPC as a homes/ entry does. A vNIC under
// both keys is the per-VPC one.
//
// Thread-safety: none; one owner (jakirod's etcd agent thread, or jakiroctl).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dataplane/config/config_loader.hh"
#include "dataplane/control_plane/key_schema.hh"

namespace jakiro::control_plane {

struct stored_record {
    std::string value;
    int64_t mod_revision = 0;  // etcd's; what a compare-and-swap checks
    // The value as one line of YAML flow (parsed once, when it arrives), or why it is no
    // record: not YAML, not a mapping, a name that is not its key's.
    std::string flow;
    std::string problem;
    // What its key says (set when it arrives).
    record_kind kind = record_kind::vpc;
    std::string vpc;  // groups, vNICs, homes; a legacy vNIC: the VPC its value names
    bool legacy = false;
    std::string host;  // a legacy vNIC: the host its value names (its index, in effect)
    // A vNIC value kept as it came (one line): its name and VPC are compared with the key's
    // when it is checked.
    bool key_unchecked = false;
    // A vNIC's check against the frame, kept until the record or its VPC's frame changes.
    uint64_t checked_frame = 0;  // 0: not checked yet
    std::optional<vnic_config> vnic;
    std::string error;
    bool accepted = false;  // in the last view's vNICs
};

// The hosts of the cluster as the views share them (a vNIC's change reuses it whole).
struct host_directory {
    std::unordered_map<std::string, uint32_t> underlay;  // by name: every valid host record
    // By name: the overlay public key (base64) of every host whose record carries one.
    std::unordered_map<std::string, std::string> overlay_keys;
    std::unordered_set<std::string> alive;  // hosts whose alive/ key exists
    std::vector<std::string> stale;         // hosts without one, by name
};

// One vNIC record of a delta view: as the view before had it and as it is now (absent: not
// there, or not in that view's vNICs).
struct vnic_change {
    std::string key;
    std::optional<vnic_config> before;
    std::optional<vnic_config> after;
};

// What the records mean at one revision. `cluster` holds hosts, VPCs, groups and vNICs (each
// with its host); records that do not parse or do not fit (unknown VPC, name not matching its
// key, ...) are left out and listed in `rejected`, so one bad write cannot take the rest down.
//
// A delta view (`delta`) says only what changed since the view before it, which its reader must
// have applied: vNICs of other hosts added, removed or changed, nothing else (no VPC, group,
// host, lease, local vNIC, refusal). Its `cluster` is empty; `hosts` and `rejected` are whole.
struct cluster_view {
    int64_t revision = 0;
    // False when the records could not be made into a valid document at all (then `cluster`
    // is empty and a follower keeps what it has).
    bool usable = true;
    host_config cluster;  // VPCs, groups and vNICs; the hosts are in `hosts`
    // Every host's address and liveness, shared by the views until a host or lease changes.
    std::shared_ptr<const host_directory> hosts = std::make_shared<host_directory>();
    std::vector<std::string> rejected;  // "KEY: reason"
    std::size_t records = 0;            // keys read
    std::size_t bytes = 0;              // their keys + values
    std::size_t vnics_checked = 0;      // vNIC records parsed and validated for this view
    bool frame_checked = false;         // hosts, VPCs and groups were gone over again for this view
    bool legacy_keys = false;           // a host's view: the legacy vNIC keys were followed too
    bool delta = false;
    std::vector<vnic_change> changes;  // a delta view's, in key order
};

class cluster_records {
  public:
    // From now on, keep only the records host `host` needs (see above).
    void follow_only(std::string host) { _host = std::move(host); }
    bool following_all() const { return _host.empty(); }
    // A host: also keep the legacy vNIC keys (the cluster has no schema marker yet). Set
    // before the records of a full read are put.
    void follow_legacy(bool legacy) { _follow_legacy = legacy; }
    bool following_legacy() const { return _follow_legacy; }
    // The schema marker is there: the migration to per-VPC keys is complete.
    bool migrated() const;
    // Whether the marker appeared or went away since the last call (a host then reads its
    // interest again, with or without the legacy keys).
    bool take_schema_changed() { return std::exchange(_schema_changed, false); }
    // The VPCs this host serves (at least one of its vNICs is in each).
    std::set<std::string> served_vpcs() const;
    bool serves(const std::string& vpc) const { return _served.count(vpc) != 0; }

    // Replaces everything (a full read at `revision`).
    void reset(int64_t revision);
    // One watch event; keys outside the schema or outside the interest are ignored. False
    // when the record was ignored.
    bool put(const std::string& key, std::string value, int64_t mod_revision);
    bool erase(const std::string& key);
    // VPCs that entered the interest since the last call (their first local vNIC arrived):
    // the caller reads their records, at the revision of the change that pulled them in.
    std::vector<std::string> take_pulled();
    // VPCs that left it since the last call (their last local vNIC left); their records are
    // already forgotten.
    std::vector<std::string> take_dropped();
    void set_revision(int64_t revision) { _revision = revision; }
    int64_t revision() const { return _revision; }
    const std::map<std::string, stored_record>& records() const { return _records; }

    // Parses and validates every record (the same checks as a cluster YAML). vNIC records are
    // checked one by one and remembered: a change costs one record's parse, not the cluster's,
    // until the VPCs, groups or hosts change (then every vNIC is checked again).
    // A host's view is a delta (cluster_view) when all that changed since the last view is
    // vNICs of other hosts that fit alone (each claims an address and MAC nobody else claims,
    // and none was refused); then it costs the changed records only. `full` asks for a whole
    // view (a reader that lost track).
    std::shared_ptr<const cluster_view> build_view(bool full = false);

  private:
    // Local vNICs of a VPC, each by a tag: its name (homes/ entry) or "legacy/" + its name
    // (a legacy key naming this host). The first pulls the VPC in, the last drops it.
    void serve(const std::string& vpc, const std::string& tag);
    void unserve(const std::string& vpc, const std::string& tag);
    // What a stored or dropped record of `kind` makes stale: the frame, or the liveness.
    void note_change(record_kind kind);
    std::map<std::string, stored_record>::iterator drop(
        std::map<std::string, stored_record>::iterator record);
    std::vector<const std::string*> keys_of(record_kind kind) const;
    // The frame (hosts, VPCs, groups) checked again, into _frame, _hosts and _vpc_frames.
    void load_frame();
    // The hosts' leases into a new _hosts.
    void load_liveness();
    struct vpc_frame {
        std::string text;  // the VPC's record and its groups', as last checked against
        uint64_t generation = 0;
    };
    void forget_vpc(const std::string& vpc);
    // A per-VPC vNIC record about to change or go: what the last view had of it.
    void touch_vnic(const std::string& key, stored_record* old);
    // The check of one vNIC record against the frame, when it or its VPC's frame changed.
    void check_vnic(const std::string& key, stored_record& record, std::size_t& checked);
    // The same against `frame`, a copy of _frame that only this call's thread uses (the
    // loader adds the vNIC to its context and takes it back out).
    void check_vnic_against(host_config& frame, const std::string& key, stored_record& record,
                            std::size_t& checked) const;
    // check_vnic for many records at once: at a full sync or a frame change every vNIC of the
    // interest is checked again (tens of thousands, ~15 µs each), so the records are shared
    // out between threads, one per CPU jakirod may run on; each record is checked by one.
    void check_vnics(const std::vector<const std::string*>& keys,
                     const std::vector<stored_record*>& records, std::size_t& checked);
    std::shared_ptr<cluster_view> build_delta();
    // What a vNIC claims alone: its address in its VPC (both families) and its MAC.
    struct claim_keys {
        std::optional<uint64_t> address;
        std::optional<std::pair<uint64_t, ipv6_address>> address6;
        uint64_t mac = 0;
    };
    std::optional<claim_keys> claims_of(const vnic_config& vnic) const;

    std::map<std::string, stored_record> _records;  // by key
    int64_t _revision = 0;
    std::string _host;  // empty: every record is kept
    bool _follow_legacy = false;
    bool _schema_changed = false;
    std::map<std::string, std::set<std::string>> _served;  // VPC -> this host's vNICs in it
    std::set<std::string> _pulled, _dropped;
    // The frame (hosts, VPCs and groups) as last loaded, and what it made: a change elsewhere
    // reuses it. A vNIC is checked again only when its own VPC's part of the frame changed.
    std::string _frame_text;
    host_config _frame;  // without its hosts: they are in _hosts
    bool _frame_usable = false;
    bool _frame_dirty = true;     // a host, VPC or group record changed since the last load
    bool _liveness_dirty = true;  // an alive/ key came or went
    std::vector<std::string> _frame_rejected;   // every refusal of the frame's records
    std::vector<std::string> _loader_rejected;  // those the loader made (of the last text)
    std::shared_ptr<const host_directory> _hosts;
    std::size_t _bytes = 0;  // keys and values kept
    std::map<std::string, vpc_frame> _vpc_frames;
    uint64_t _generations = 0;
    // For delta views: the per-VPC vNIC keys put or erased since the last view, with what it had
    // of each; whether anything else changed (then the next view is whole); and, from the last
    // whole view on, how many valid vNIC records claim each address and MAC.
    std::map<std::string, std::optional<vnic_config>> _touched;
    bool _structural = true;
    bool _last_view_usable = false;
    std::vector<std::string> _view_rejected;
    std::map<std::string, uint64_t> _vpc_number;
    std::unordered_map<uint64_t, uint32_t> _address_claims, _mac_claims;
    std::map<std::pair<uint64_t, ipv6_address>, uint32_t> _address6_claims;
};

// Where a vNIC value says it lives: its VPC and host (empty when it does not say, or is not a
// YAML mapping). A legacy key names neither, so its value is read for them.
struct vnic_placement {
    std::string name;
    std::string vpc;
    std::string host;
};
vnic_placement placement_of_vnic_value(const std::string& value);

// The records (key -> value) a validated cluster document stands for: one per host, VPC,
// group and vNIC, each value the entry as a YAML flow mapping. `root` is the document the
// loader accepted (values keep the author's spelling, e.g. "10Gbit").
std::map<std::string, std::string> records_of_document(const YAML::Node& root);

// What turns `current` into `desired`. Every put and delete carries the mod_revision it
// expects (0: the key must not exist), so a transaction built from it fails rather than
// overwrite a change it did not see. Hosts, alive and readers keys are never deleted: hosts
// register themselves (a document may add or update them, not forget them).
struct record_change {
    std::string key;
    std::string value;          // puts only
    int64_t expected_revision;  // 0: create
};
struct record_diff {
    std::vector<record_change> puts;
    std::vector<record_change> deletes;
    bool empty() const { return puts.empty() && deletes.empty(); }
};
record_diff diff_records(const std::map<std::string, std::string>& desired,
                         const std::map<std::string, stored_record>& current);

}  // namespace jakiro::control_plane
