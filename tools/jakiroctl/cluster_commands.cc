#include "tools/jakiroctl/cluster_commands.hh"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "dataplane/config/config_loader.hh"
#include "dataplane/control_plane/cluster_records.hh"
#include "dataplane/control_plane/etcd_client.hh"
#include "dataplane/control_plane/key_schema.hh"
#include "dataplane/control_plane/schema_migration.hh"

namespace {

using namespace jakiro;
using namespace jakiro::control_plane;

constexpr auto timeout = std::chrono::seconds(10);
// Another writer got in between our read and our transaction: read, diff and try again.
constexpr int max_attempts = 5;

bool read_all(etcd_client& client, cluster_records& records, std::string& error) {
    std::vector<key_value> kvs;
    int64_t revision = 0;
    if (!client.range_prefix(std::string(key_root), kvs, revision, error, timeout)) {
        return false;
    }
    records.reset(revision);
    for (auto& kv : kvs) {
        records.put(kv.key, std::move(kv.value), kv.mod_revision);
    }
    return true;
}

// Names become key segments: refuse those that cannot be one, at their line.
std::vector<std::string> check_names(const YAML::Node& root, const std::string& file) {
    std::vector<std::string> errors;
    for (const char* section : {"hosts", "vpcs", "security_groups", "vnics"}) {
        const auto list = root[section];
        if (!list.IsSequence()) {
            continue;
        }
        for (std::size_t i = 0; i < list.size(); ++i) {
            for (const char* key : {"name", "vpc", "host"}) {
                const auto node = list[i][key];
                if (node.IsDefined() && node.IsScalar() && !valid_name(node.Scalar())) {
                    errors.push_back(file + ":" + std::to_string(node.Mark().line + 1) + ": " +
                                     section + "[" + std::to_string(i) + "]." + key + ": '" +
                                     node.Scalar() +
                                     "' cannot be part of an etcd key (no '/', spaces or "
                                     "control characters)");
                }
            }
        }
    }
    return errors;
}

void add_compare(etcdserverpb::TxnRequest& txn, const record_change& change) {
    auto* compare = txn.add_compare();
    compare->set_key(change.key);
    compare->set_result(etcdserverpb::Compare::EQUAL);
    if (change.expected_revision == 0) {
        compare->set_target(etcdserverpb::Compare::VERSION);  // version 0: the key is absent
        compare->set_version(0);
    } else {
        compare->set_target(etcdserverpb::Compare::MOD);
        compare->set_mod_revision(change.expected_revision);
    }
}

std::string joined_or_none(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& name : names) {
        out += (out.empty() ? "" : ", ") + name;
    }
    return out.empty() ? "none" : out;
}

int apply(etcd_client& client, const std::string& path) {
    std::ifstream in(path);
    if (!in) {
        std::cerr << path << ": cannot be read\n";
        return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    const auto loaded = load_cluster_config_text(text.str(), path);
    if (!loaded.ok()) {
        std::cerr << "cluster rejected, nothing written:\n";
        for (const auto& error : loaded.errors) {
            std::cerr << "  " << error.to_string() << "\n";
        }
        return 1;
    }
    const auto root = YAML::Load(text.str());
    if (const auto errors = check_names(root, path); !errors.empty()) {
        std::cerr << "cluster rejected, nothing written:\n";
        for (const auto& error : errors) {
            std::cerr << "  " << error << "\n";
        }
        return 1;
    }
    const auto document = records_of_document(root);
    for (int attempt = 1; attempt <= max_attempts; ++attempt) {
        cluster_records current;
        std::string error;
        if (!read_all(client, current, error)) {
            std::cerr << "jakiroctl: etcd: " << error << "\n";
            return 2;
        }
        // While hosts may still read only the legacy vNIC keys, every vNIC is written under
        // both (schema_migration.hh).
        const auto state = migration_state_of(current.records());
        auto desired = document;
        add_schema_records(desired, state);
        const auto diff = diff_records(desired, current.records());
        if (diff.empty()) {
            std::cout << "nothing to change: etcd already holds " << path << " (revision "
                      << current.revision() << ")\n";
            return 0;
        }
        // One transaction: every record as we read it, or nothing at all.
        etcdserverpb::TxnRequest txn;
        // Counted as the operator sees them: records, not the homes/ index that follows them;
        // a vNIC under its legacy key is rewritten under its VPC (a migration, not a change).
        std::size_t created = 0, changed = 0, deleted = 0, migrated = 0;
        auto counts = [](const std::string& key) {
            const auto parsed = parse_key(key);
            return parsed && parsed->kind != record_kind::home &&
                   parsed->kind != record_kind::schema && !parsed->legacy;
        };
        auto legacy = [](const std::string& key) {
            const auto parsed = parse_key(key);
            return parsed && parsed->kind == record_kind::vnic && parsed->legacy;
        };
        std::set<std::string> rewritten;  // names of legacy vNICs written under their VPC
        for (const auto& del : diff.deletes) {
            if (legacy(del.key)) {
                rewritten.insert(parse_key(del.key)->name);
            }
        }
        for (const auto& put : diff.puts) {
            add_compare(txn, put);
            auto* op = txn.add_success()->mutable_request_put();
            op->set_key(put.key);
            op->set_value(put.value);
            const auto parsed = parse_key(put.key);
            if (!counts(put.key)) {
                continue;
            }
            if (put.expected_revision != 0) {
                ++changed;
            } else if (parsed->kind == record_kind::vnic && rewritten.count(parsed->name)) {
                ++migrated;
            } else {
                ++created;
            }
        }
        for (const auto& del : diff.deletes) {
            add_compare(txn, del);
            txn.add_success()->mutable_request_delete_range()->set_key(del.key);
            deleted += counts(del.key) && !legacy(del.key);
        }
        etcdserverpb::TxnResponse response;
        if (!client.txn(txn, response, error, timeout)) {
            std::cerr << "jakiroctl: etcd: " << error << " (nothing written)\n";
            return 2;
        }
        if (response.succeeded()) {
            std::cout << "applied " << path << ": revision " << response.header().revision() << ", "
                      << created << " records created, " << changed << " changed, " << deleted
                      << " deleted";
            if (migrated > 0) {
                std::cout << ", " << migrated << " vNICs moved from legacy keys to their VPC's";
            }
            std::cout << "\n";
            if (state.in_transition()) {
                std::cout << "the cluster is moving to per-VPC vNIC keys: every vNIC written "
                             "under both keys (hosts that read only the legacy ones: "
                          << joined_or_none(state.old_readers)
                          << "); `jakiroctl --etcd URL migrate` finishes once they are "
                             "upgraded\n";
            }
            return 0;
        }
        // Someone else wrote a record we were about to change: nothing was written.
    }
    std::cerr << "jakiroctl: etcd: the cluster kept changing under us (" << max_attempts
              << " attempts); nothing written\n";
    return 1;
}

// `jakiroctl --etcd URL migrate [--dry-run] [--force]`: one step of the move to per-VPC vNIC
// keys (schema_migration.hh), idempotent: run it before, during and after upgrading the hosts.
int migrate(etcd_client& client, bool dry_run, bool force) {
    for (int attempt = 1; attempt <= max_attempts; ++attempt) {
        cluster_records current;
        std::string error;
        if (!read_all(client, current, error)) {
            std::cerr << "jakiroctl: etcd: " << error << "\n";
            return 2;
        }
        const auto plan = plan_migration(current.records(), force);
        if (!plan.problems.empty()) {
            std::cerr << "migration refused, nothing written: these legacy vNIC records cannot "
                         "be moved (correct or delete them, then migrate again):\n";
            for (const auto& problem : plan.problems) {
                std::cerr << "  " << problem << "\n";
            }
            return 1;
        }
        const auto diff = diff_records(plan.desired, current.records());
        std::ostringstream done;
        done << plan.moved << " vNICs written under their VPC with their index, "
             << plan.legacy_copies << " legacy copies written for hosts that still read them, "
             << plan.removed << " legacy keys removed";
        std::ostringstream then;
        if (plan.finishes) {
            then << "migration complete: every vNIC under its VPC, no legacy key, marker "
                 << schema_marker_key();
            if (force && !plan.holding_back.empty()) {
                then << " (forced: " << joined_or_none(plan.holding_back)
                     << " read only legacy keys and see no vNIC until upgraded)";
            }
        } else {
            then << "migration in progress: " << joined_or_none(plan.holding_back)
                 << " still read only the legacy keys, which are kept in step; upgrade them "
                    "and run migrate again (--force finishes without them)";
        }
        if (diff.empty()) {
            std::cout << "nothing to change (revision " << current.revision() << ")\n"
                      << then.str() << "\n";
            return 0;
        }
        if (dry_run) {
            std::cout << "dry run, nothing written: " << diff.puts.size() << " puts and "
                      << diff.deletes.size() << " deletes at revision " << current.revision()
                      << " would make " << done.str() << "\n";
            for (const auto& put : diff.puts) {
                std::cout << "  put " << put.key << "\n";
            }
            for (const auto& del : diff.deletes) {
                std::cout << "  delete " << del.key << "\n";
            }
            std::cout << "then: " << then.str() << "\n";
            return 0;
        }
        etcdserverpb::TxnRequest txn;
        for (const auto& put : diff.puts) {
            add_compare(txn, put);
            auto* op = txn.add_success()->mutable_request_put();
            op->set_key(put.key);
            op->set_value(put.value);
        }
        for (const auto& del : diff.deletes) {
            add_compare(txn, del);
            txn.add_success()->mutable_request_delete_range()->set_key(del.key);
        }
        etcdserverpb::TxnResponse response;
        if (!client.txn(txn, response, error, timeout)) {
            std::cerr << "jakiroctl: etcd: " << error << " (nothing written)\n";
            return 2;
        }
        if (response.succeeded()) {
            std::cout << "migrated: revision " << response.header().revision() << ", " << done.str()
                      << "\n"
                      << then.str() << "\n";
            return 0;
        }
        // Someone else wrote a record we were about to change: nothing was written.
    }
    std::cerr << "jakiroctl: etcd: the cluster kept changing under us (" << max_attempts
              << " attempts); nothing written\n";
    return 1;
}

std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& name : names) {
        out += (out.empty() ? "" : ",") + name;
    }
    return out.empty() ? "-" : out;
}

int get(etcd_client& client, const std::string& what) {
    cluster_records records;
    std::string error;
    if (!read_all(client, records, error)) {
        std::cerr << "jakiroctl: etcd: " << error << "\n";
        return 2;
    }
    const auto view = records.build_view();
    const auto& c = view->cluster;
    char line[512];
    if (what == "vnics") {
        std::printf("%-16s %-10s %-18s %-24s %-17s %-10s %s\n", "NAME", "VPC", "IP", "IP6", "MAC",
                    "HOST", "GROUPS");
        for (const auto& v : c.vnics) {
            const std::string ip =
                format_ipv4(v.ip.address) + "/" + std::to_string(int{v.ip.length});
            const std::string ip6 =
                v.ip6 ? format_ipv6(v.ip6->address) + "/" + std::to_string(int{v.ip6->length})
                      : "-";
            std::snprintf(line, sizeof(line), "%-16s %-10s %-18s %-24s %-17s %-10s %s%s%s\n",
                          v.name.c_str(), v.vpc.c_str(), ip.c_str(), ip6.c_str(),
                          format_mac(v.mac).c_str(), v.host.c_str(),
                          joined(v.security_groups).c_str(), v.qos ? " qos" : "", "");
            std::cout << line;
        }
    } else if (what == "vpcs") {
        std::printf("%-16s %s\n", "NAME", "VNI");
        for (const auto& v : c.vpcs) {
            std::printf("%-16s %u\n", v.name.c_str(), v.vni);
        }
    } else if (what == "groups") {
        std::printf("%-10s %-16s %s\n", "VPC", "NAME", "RULES(in/out)");
        for (const auto& g : c.security_groups) {
            std::printf("%-10s %-16s %zu/%zu\n", g.vpc.c_str(), g.name.c_str(), g.ingress.size(),
                        g.egress.size());
        }
    } else if (what == "hosts") {
        std::printf("%-16s %-16s %s\n", "NAME", "UNDERLAY", "STATE");
        const std::map<std::string, uint32_t> by_name(view->hosts->underlay.begin(),
                                                      view->hosts->underlay.end());
        for (const auto& [name, ip] : by_name) {
            std::printf("%-16s %-16s %s\n", name.c_str(), format_ipv4(ip).c_str(),
                        view->hosts->alive.count(name) ? "alive" : "stale (lease expired)");
        }
    } else {
        std::cerr << "jakiroctl: get what? vnics, vpcs, groups or hosts\n";
        return 2;
    }
    std::cout << "(revision " << view->revision << ")\n";
    for (const auto& reason : view->rejected) {
        std::cout << "refused record " << reason << "\n";
    }
    return 0;
}

}  // namespace

int run_cluster_command(const std::vector<std::string>& endpoints,
                        const std::vector<std::string>& args) {
    for (const auto& url : endpoints) {
        if (url.rfind("http://", 0) != 0) {
            std::cerr << "jakiroctl: --etcd " << url << ": expected http://ADDR:PORT\n";
            return 2;
        }
    }
    etcd_client client(endpoints, false);
    if (args.size() == 2 && args[0] == "apply") {
        return apply(client, args[1]);
    }
    if (args.size() == 2 && args[0] == "get") {
        return get(client, args[1]);
    }
    if (!args.empty() && args[0] == "migrate") {
        bool dry_run = false, force = false, known = true;
        for (std::size_t i = 1; i < args.size(); ++i) {
            dry_run |= args[i] == "--dry-run";
            force |= args[i] == "--force";
            known &= args[i] == "--dry-run" || args[i] == "--force";
        }
        if (known) {
            return migrate(client, dry_run, force);
        }
    }
    std::cerr << "usage: jakiroctl --etcd URL apply CLUSTER.yaml | get vnics|vpcs|groups|hosts "
                 "| migrate [--dry-run] [--force]\n";
    return 2;
}
