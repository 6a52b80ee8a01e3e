#include "dataplane/control_plane/schema_migration.hh"

#include <set>

#include "dataplane/control_plane/key_schema.hh"

namespace jakiro::control_plane {

std::string readers_value_of(const std::string& host) {
    return "{name: " + host + ", vnic_keys: per_vpc}";
}

migration_state migration_state_of(const std::map<std::string, stored_record>& records) {
    migration_state state;
    std::set<std::string> hosts, readers;
    for (const auto& [key, record] : records) {
        switch (record.kind) {
            case record_kind::schema:
                state.complete = true;
                break;
            case record_kind::vnic:
                state.legacy_vnics += record.legacy ? 1 : 0;
                break;
            case record_kind::host:
                hosts.insert(key.substr(prefix_of(record_kind::host).size()));
                break;
            case record_kind::reader:
                readers.insert(key.substr(prefix_of(record_kind::reader).size()));
                break;
            default:
                break;
        }
    }
    for (const auto& host : hosts) {
        if (!readers.count(host)) {
            state.old_readers.push_back(host);
        }
    }
    return state;
}

namespace {

std::string name_of(const std::string& key) {
    return key.substr(key.rfind('/') + 1);
}

std::string legacy_key_of(const std::string& name) {
    return key_of({record_kind::vnic, "", name, "", true});
}

}  // namespace

void add_schema_records(std::map<std::string, std::string>& desired, const migration_state& state) {
    if (!state.in_transition()) {
        desired[schema_marker_key()] = schema_marker_value;
        return;
    }
    // Hosts that read only legacy keys must see every vNIC there, as they always have.
    std::vector<std::pair<std::string, std::string>> copies;
    for (const auto& [key, value] : desired) {
        const auto parsed = parse_key(key);
        if (parsed && parsed->kind == record_kind::vnic && !parsed->legacy) {
            copies.emplace_back(legacy_key_of(parsed->name), value);
        }
    }
    for (auto& [key, value] : copies) {
        desired[key] = std::move(value);
    }
}

migration_plan plan_migration(const std::map<std::string, stored_record>& current, bool force) {
    migration_plan plan;
    const auto state = migration_state_of(current);
    plan.holding_back = state.old_readers;
    std::map<std::string, std::vector<std::string>> homes_of;  // "vpc/vnic" -> its homes/ keys
    std::map<std::string, std::string> per_vpc_key;            // vNIC name -> its per-VPC key
    std::vector<std::string> legacy_keys;
    for (const auto& [key, record] : current) {
        if (record.kind == record_kind::alive) {
            continue;  // under each host's lease: not ours to write
        }
        plan.desired[key] = record.value;
        if (record.kind == record_kind::home) {
            const auto parsed = parse_key(key);
            homes_of[parsed->vpc + "/" + parsed->name].push_back(key);
        } else if (record.kind == record_kind::vnic && record.legacy) {
            legacy_keys.push_back(key);
        } else if (record.kind == record_kind::vnic) {
            per_vpc_key[name_of(key)] = key;
        }
    }
    // Every legacy vNIC under its VPC, with its index: unless the per-VPC key holds a newer
    // value already (written by apply, which writes both while the cluster is in transition).
    for (const auto& key : legacy_keys) {
        const auto& record = current.at(key);
        const auto name = name_of(key);
        if (!record.problem.empty()) {
            plan.problems.push_back(key + ": " + record.problem);
            continue;
        }
        const auto placement = placement_of_vnic_value(record.value);
        if (placement.name != name) {
            plan.problems.push_back(key + ": name does not match the key");
            continue;
        }
        if (!valid_name(placement.vpc)) {
            plan.problems.push_back(key + ": vpc: '" + placement.vpc +
                                    "' is not a VPC name (the key under its VPC needs one)");
            continue;
        }
        if (!valid_name(placement.host)) {
            plan.problems.push_back(key + ": host: '" + placement.host +
                                    "' is not a host name (its index needs one)");
            continue;
        }
        const auto target = key_of({record_kind::vnic, placement.vpc, name, "", false});
        if (const auto other = per_vpc_key.find(name);
            other != per_vpc_key.end() && other->second != target) {
            plan.problems.push_back(key + ": says VPC '" + placement.vpc + "' but " +
                                    other->second +
                                    " holds the vNIC too: delete the one that is wrong");
            continue;
        }
        const auto found = current.find(target);
        if (found != current.end() && (found->second.value == record.value ||
                                       found->second.mod_revision > record.mod_revision)) {
            continue;
        }
        plan.desired[target] = record.value;
        ++plan.moved;
        for (const auto& home : homes_of[placement.vpc + "/" + name]) {
            plan.desired.erase(home);  // it moved: no other host's index keeps it
        }
        plan.desired[key_of({record_kind::home, placement.vpc, name, placement.host, false})] =
            "{name: " + name + "}";
    }
    if (!plan.problems.empty()) {
        return plan;
    }
    plan.finishes = state.complete || plan.holding_back.empty() || force;
    if (plan.finishes) {
        for (const auto& key : legacy_keys) {
            plan.desired.erase(key);
            ++plan.removed;
        }
        plan.desired[schema_marker_key()] = schema_marker_value;
        return plan;
    }
    // Hosts still read only legacy keys: every per-VPC vNIC gets a legacy copy that says the
    // same (a cluster whose legacy keys an earlier apply removed gets them back).
    std::vector<std::pair<std::string, std::string>> copies;
    for (const auto& [key, value] : plan.desired) {
        const auto parsed = parse_key(key);
        if (!parsed || parsed->kind != record_kind::vnic || parsed->legacy) {
            continue;
        }
        const auto legacy = plan.desired.find(legacy_key_of(parsed->name));
        if (legacy == plan.desired.end() || legacy->second != value) {
            copies.emplace_back(legacy_key_of(parsed->name), value);
        }
    }
    for (auto& [key, value] : copies) {
        plan.desired[key] = std::move(value);
        ++plan.legacy_copies;
    }
    return plan;
}

}  // namespace jakiro::control_plane
