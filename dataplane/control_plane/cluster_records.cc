#include "dataplane/control_plane/cluster_records.hh"

#include <yaml-cpp/yaml.h>

namespace jakiro::control_plane {

void cluster_records::reset(int64_t revision) {
    _records.clear();
    _revision = revision;
}

void cluster_records::put(const std::string& key, std::string value, int64_t mod_revision) {
    const auto parsed = parse_key(key);
    if (!parsed) {
        return;
    }
    stored_record record{std::move(value), mod_revision, "", ""};
    if (parsed->kind != record_kind::alive) {
        try {
            const auto node = YAML::Load(record.value);
            // The key says what the record is: a value that claims another name is refused
            // rather than guessed at.
            if (!node.IsMap()) {
                record.problem = "not a mapping";
            } else if (!node["name"].IsDefined() || !node["name"].IsScalar() ||
                       node["name"].Scalar() != parsed->name) {
                record.problem = "name does not match the key";
            } else if (parsed->kind == record_kind::group &&
                       (!node["vpc"].IsDefined() || !node["vpc"].IsScalar() ||
                        node["vpc"].Scalar() != parsed->vpc)) {
                record.problem = "vpc does not match the key";
            } else {
                YAML::Emitter emit;
                emit << YAML::Flow << node;
                record.flow = emit.c_str();
                for (auto& c : record.flow) {
                    c = c == '\n' ? ' ' : c;  // flow collections fold line breaks anyway
                }
            }
        } catch (const YAML::Exception& e) {
            record.problem = "not YAML: " + e.msg;
        }
    }
    _records[key] = std::move(record);
}

void cluster_records::erase(const std::string& key) {
    _records.erase(key);
}

namespace {

// The document section each kind of record is an entry of.
const char* section_of(record_kind kind) {
    switch (kind) {
        case record_kind::vpc:
            return "vpcs";
        case record_kind::group:
            return "security_groups";
        case record_kind::vnic:
            return "vnics";
        case record_kind::host:
            return "hosts";
        case record_kind::alive:
            break;
    }
    return nullptr;
}

}  // namespace

std::shared_ptr<const cluster_view> cluster_records::build_view() {
    auto view = std::make_shared<cluster_view>();
    view->revision = _revision;
    view->records = _records.size();
    std::map<record_kind, std::vector<const std::string*>> by_kind;  // keys, in key order
    for (const auto& [key, record] : _records) {
        view->bytes += key.size() + record.value.size();
        const auto parsed = parse_key(key);
        if (parsed->kind == record_kind::alive) {
            view->alive_hosts.insert(parsed->name);
        } else if (!record.problem.empty()) {
            view->rejected.push_back(key + ": " + record.problem);
        } else {
            by_kind[parsed->kind].push_back(&key);
        }
    }
    // The frame (hosts, VPCs, groups: few records) is one document, one entry per line, which
    // the loader checks as it checks a cluster YAML; an error's line names its record. Each
    // round drops the entries the loader blames and tries again; a few rounds cover chains.
    std::set<const std::string*> dropped;
    bool loaded_frame = false;
    for (int round = 0; round < 8 && !loaded_frame; ++round) {
        std::string text;
        std::vector<const std::string*> line_key{nullptr};  // 1-based lines
        for (auto kind : {record_kind::host, record_kind::vpc, record_kind::group}) {
            bool header = false;  // an empty section would be null, not a list
            for (const auto* key : by_kind[kind]) {
                if (dropped.count(key)) {
                    continue;
                }
                if (!header) {
                    text += std::string(section_of(kind)) + ":\n";
                    line_key.push_back(nullptr);
                    header = true;
                }
                text += "- " + _records.at(*key).flow + "\n";
                line_key.push_back(key);
            }
        }
        if (text.empty()) {
            loaded_frame = true;
        } else {
            auto loaded = load_cluster_config_text(text, "etcd");
            if (loaded.ok()) {
                view->cluster = std::move(loaded.config);
                loaded_frame = true;
            } else {
                bool progress = false;
                for (const auto& error : loaded.errors) {
                    const auto* key =
                        error.line > 0 && static_cast<std::size_t>(error.line) < line_key.size()
                            ? line_key[error.line]
                            : nullptr;
                    if (key != nullptr && dropped.insert(key).second) {
                        view->rejected.push_back(*key + ": " + error.field + ": " + error.message);
                        progress = true;
                    }
                }
                if (!progress) {
                    view->rejected.push_back(loaded.errors[0].to_string());
                    break;
                }
            }
        }
        if (loaded_frame && text != _frame_text) {
            _frame_text = std::move(text);
            ++_frame_generation;
        }
    }
    if (!loaded_frame) {
        view->usable = false;
        return view;
    }
    // vNICs one by one against the frame, each remembered until it or the frame changes.
    for (auto it = _checked.begin(); it != _checked.end();) {
        it = _records.count(it->first) ? std::next(it) : _checked.erase(it);
    }
    std::set<std::pair<std::string, uint32_t>> addresses;  // (VPC, IP) taken
    std::set<mac_address> macs;
    for (const auto* key : by_kind[record_kind::vnic]) {
        const auto& flow = _records.at(*key).flow;
        auto& checked = _checked[*key];
        if (checked.flow != flow || checked.frame != _frame_generation) {
            checked.flow = flow;
            checked.frame = _frame_generation;
            checked.error.clear();
            checked.vnic = load_cluster_vnic_text(flow, view->cluster, checked.error);
        }
        if (!checked.vnic) {
            view->rejected.push_back(*key + ": " + checked.error);
            continue;
        }
        const auto& vnic = *checked.vnic;
        // What the loader checks across entries: the first claimant (in key order) keeps it.
        if (!addresses.insert({vnic.vpc, vnic.ip.address}).second) {
            view->rejected.push_back(*key + ": vnics[*].ip: address " +
                                     format_ipv4(vnic.ip.address) + " already used in VPC '" +
                                     vnic.vpc + "'");
            continue;
        }
        if (!macs.insert(vnic.mac).second) {
            view->rejected.push_back(*key + ": vnics[*].mac: MAC used by two vNICs");
            continue;
        }
        view->cluster.vnics.push_back(vnic);
    }
    return view;
}

std::map<std::string, std::string> records_of_document(const YAML::Node& root) {
    std::map<std::string, std::string> out;
    auto add = [&](record_kind kind, const char* section) {
        const auto list = root[section];
        if (!list.IsDefined() || !list.IsSequence()) {
            return;
        }
        for (const auto& node : list) {
            record_key key;
            key.kind = kind;
            key.name = node["name"].as<std::string>("");
            if (kind == record_kind::group) {
                key.vpc = node["vpc"].as<std::string>("");
            }
            YAML::Emitter emit;
            emit << YAML::Flow << node;
            out[key_of(key)] = emit.c_str();
        }
    };
    add(record_kind::host, "hosts");
    add(record_kind::vpc, "vpcs");
    add(record_kind::group, "security_groups");
    add(record_kind::vnic, "vnics");
    return out;
}

record_diff diff_records(const std::map<std::string, std::string>& desired,
                         const std::map<std::string, stored_record>& current) {
    record_diff diff;
    for (const auto& [key, value] : desired) {
        const auto found = current.find(key);
        if (found == current.end()) {
            diff.puts.push_back({key, value, 0});
        } else if (found->second.value != value) {
            diff.puts.push_back({key, value, found->second.mod_revision});
        }
    }
    for (const auto& [key, record] : current) {
        const auto parsed = parse_key(key);
        if (!parsed || parsed->kind == record_kind::host || parsed->kind == record_kind::alive) {
            continue;
        }
        if (!desired.count(key)) {
            diff.deletes.push_back({key, "", record.mod_revision});
        }
    }
    return diff;
}

}  // namespace jakiro::control_plane
