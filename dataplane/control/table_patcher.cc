#include "dataplane/control/table_patcher.hh"

#include <rte_byteorder.h>

#include <algorithm>
#include <set>

#include "dataplane/control/table_builder.hh"

namespace jakiro {

void table_patcher::reset() {
    _ready = false;
    _members = {};
    _members6 = {};
    _spare.reset();
    _backlog.clear();
}

bool table_patcher::prepare(const datapath_tables& current, const host_config& config,
                            std::string& error) {
    if (!_ready) {
        _members = group_members(config);
        _members6 = group_members6(config);
        _ready = true;
    }
    if (!_spare && current.vlt) {
        auto copy = current.vlt->clone(error);
        if (!copy) {
            return false;
        }
        _spare = std::move(copy);
        _backlog.clear();
        _last.copied_vlt = true;
    }
    return true;
}

bool table_patcher::apply_ops(overlay::vlt& table, std::span<const vlt_op> ops) const {
    for (const auto& op : ops) {
        if (op.add) {
            if (!table.add(op.vpc, op.ip, op.entry) ||
                (op.ip6 && !table.add6(op.vpc, op.ip6->data(), op.entry))) {
                return false;
            }
        } else if (!table.remove(op.vpc, op.ip) ||
                   (op.ip6 && !table.remove6(op.vpc, op.ip6->data()))) {
            return false;
        }
    }
    return true;
}

void table_patcher::patch_members(const host_config& config, const peer_config& peer, bool add) {
    for (const auto& name : peer.security_groups) {
        const int g = config.group_index(peer.vpc, name);
        if (g < 0 || static_cast<std::size_t>(g) >= _members.of_group.size()) {
            continue;
        }
        auto& of4 = _members.of_group[g];
        if (add) {
            of4.push_back(peer.ip);
        } else if (const auto at = std::find(of4.begin(), of4.end(), peer.ip); at != of4.end()) {
            *at = of4.back();
            of4.pop_back();
        }
        if (!peer.ip6 || static_cast<std::size_t>(g) >= _members6.of_group.size()) {
            continue;
        }
        auto& of6 = _members6.of_group[g];
        if (add) {
            of6.push_back(*peer.ip6);
        } else if (const auto at = std::find(of6.begin(), of6.end(), *peer.ip6); at != of6.end()) {
            *at = of6.back();
            of6.pop_back();
        }
    }
}

std::unique_ptr<datapath_tables> table_patcher::patch(
    const datapath_tables& current, const host_config& config, std::span<const peer_change> changes,
    std::span<const uint16_t> slots, overlay::underlay_neighbors& neighbors,
    uint32_t policy_generation, std::string& error) {
    _last = {};
    // Members made from `config` already hold the changes.
    const bool members_current = !_ready;
    if (!prepare(current, config, error)) {
        reset();
        return nullptr;
    }
    std::vector<vlt_op> ops;
    std::set<int> groups;  // the groups a changed peer is or was in
    // Removals first: a peer whose MAC or host changed is removed and added again.
    for (const auto& change : changes) {
        if (!change.before) {
            continue;
        }
        const auto& peer = *change.before;
        ops.push_back(
            {false, vpc_index(config, peer.vpc), rte_cpu_to_be_32(peer.ip), peer.ip6, {}});
        for (const auto& name : peer.security_groups) {
            groups.insert(config.group_index(peer.vpc, name));
        }
        if (!members_current) {
            patch_members(config, peer, false);
        }
    }
    for (const auto& change : changes) {
        if (!change.after) {
            continue;
        }
        const auto& peer = *change.after;
        vlt_op op{true, vpc_index(config, peer.vpc), rte_cpu_to_be_32(peer.ip), peer.ip6, {}};
        if (!peer_vlt_entry(peer, neighbors, op.entry)) {
            error = "too many remote hosts";
            reset();
            return nullptr;
        }
        ops.push_back(op);
        for (const auto& name : peer.security_groups) {
            groups.insert(config.group_index(peer.vpc, name));
        }
        if (!members_current) {
            patch_members(config, peer, true);
        }
    }
    // The spare gets what the published table had since they were twins, then this change.
    if (!apply_ops(*_spare, _backlog) || !apply_ops(*_spare, ops)) {
        error = "the VLT has no room for the change";
        reset();
        return nullptr;
    }
    _last.vlt_entries = ops.size();

    auto next = std::make_unique<datapath_tables>(current);
    next->policy_generation = policy_generation;
    next->vlt = _spare;

    // Only the vNICs whose rules name a changed group see other members.
    const secgroup::rule_catalog catalog(config.security_groups);
    for (std::size_t i = 0; i < config.vnics.size() && i < slots.size(); ++i) {
        bool affected = false;
        for (const auto& name : config.vnics[i].security_groups) {
            const int g = config.group_index(config.vnics[i].vpc, name);
            if (g < 0) {
                continue;
            }
            const auto& group = config.security_groups[g];
            for (const auto* rules : {&group.ingress, &group.egress}) {
                for (const auto& r : *rules) {
                    affected |= r.remote_group_index >= 0 && groups.count(r.remote_group_index);
                }
            }
        }
        if (!affected) {
            continue;
        }
        datapath_tables::vnic_policy policy;
        if (!compile_vnic_policy(config, i, _members, _members6, catalog, policy, error)) {
            reset();
            return nullptr;
        }
        next->policies[slots[i]] = std::move(policy);
        ++_last.acl_vnics;
    }

    // The published table now has `ops`; the one being retired does not yet.
    _spare.reset();
    _backlog = std::move(ops);
    return next;
}

void table_patcher::retired(std::shared_ptr<overlay::vlt> previous) {
    // Reused only when nothing else holds it (the retired snapshot was its only other owner);
    // otherwise the next patch copies the published one.
    if (previous && previous.use_count() == 1) {
        _spare = std::move(previous);
    } else {
        _spare.reset();
    }
}

}  // namespace jakiro
