#pragma once
// The next snapshot when only peers changed (a remote vNIC added, removed or changed; the
// control plane's common case): made from the snapshot in force by touching only what the
// changed peers are in, instead of building every table again (table_builder.hh).
//  - VLT: two tables take turns. The one the snapshot before last held is no longer read by
//    any worker once the last publication returned (tables_publisher waits for that); it gets
//    the previous change and this one, and is published. Each change costs its own entries,
//    twice; the second table costs one copy of the VLT's memory.
//  - Group members: kept across publications and patched; only the vNICs one of whose rules
//    names a group a changed peer is (or was) in get their ACLs compiled again; every other
//    vNIC's ACL contexts are the previous snapshot's, shared.
//  - Everything else (vNIC views, the VNI map, QoS) is the previous snapshot's.
// The full build stays for everything else: vNICs, VPCs or groups changed, a resync, a VLT
// without room. After one, reset().
//
// Thread-safety: control thread only.

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dataplane/config/host_config.hh"
#include "dataplane/overlay/underlay_neighbors.hh"
#include "dataplane/tables.hh"
#include "secgroup/compiler.hh"
#include "secgroup/ipv6_rules.hh"

namespace jakiro {

// One peer of the host's configuration gone (before only), new (after only) or changed (both).
struct peer_change {
    std::optional<peer_config> before;
    std::optional<peer_config> after;
};

class table_patcher {
  public:
    // What one patch touched (for tests and `jakiroctl status`).
    struct patch_summary {
        std::size_t vlt_entries = 0;  // entries removed and added
        std::size_t acl_vnics = 0;    // vNICs whose ACLs were compiled again
        bool copied_vlt = false;      // the second VLT had to be made first (after a build)
    };

    // A full build was published: what is kept across patches no longer matches it.
    void reset();
    // Prepares the second VLT and the group members for the next patch, so that its cost is
    // the change's only. `current` is the snapshot in force, `config` its configuration.
    bool prepare(const datapath_tables& current, const host_config& config, std::string& error);

    // The snapshot that follows `current` (published, built from a configuration of which
    // `config` is the same with `changes` applied) with `changes` applied. `slots` are the
    // vNICs' slots, in config.vnics order. nullptr with `error` when it cannot be patched (the
    // VLT has no room left, an entry is not where it should be): then build it whole and
    // reset(). After publishing what it returns, call retired() with `current`'s VLT.
    std::unique_ptr<datapath_tables> patch(const datapath_tables& current,
                                           const host_config& config,
                                           std::span<const peer_change> changes,
                                           std::span<const uint16_t> slots,
                                           overlay::underlay_neighbors& neighbors,
                                           uint32_t policy_generation, std::string& error);
    // The VLT of the snapshot before the one patch() made, now that no worker reads it: the
    // next patch brings it up to date and publishes it.
    void retired(std::shared_ptr<overlay::vlt> previous);

    const patch_summary& last() const { return _last; }

  private:
    struct vlt_op {
        bool add;
        uint32_t vpc;
        rte_be32_t ip;
        std::optional<ipv6_address> ip6;
        overlay::vlt_entry entry;
    };
    bool apply_ops(overlay::vlt& table, std::span<const vlt_op> ops) const;
    void patch_members(const host_config& config, const peer_config& peer, bool add);

    bool _ready = false;  // _members and _members6 match the snapshot in force
    secgroup::membership _members;
    secgroup::membership6 _members6;
    // The VLT that is not published (or nullptr: copied from the published one when needed),
    // and the operations the published one has had since it was this one's twin.
    std::shared_ptr<overlay::vlt> _spare;
    std::vector<vlt_op> _backlog;
    patch_summary _last;
};

}  // namespace jakiro
