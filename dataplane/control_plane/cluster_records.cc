#include "dataplane/control_plane/cluster_records.hh"

#include <yaml-cpp/yaml.h>

#include <sched.h>

#include <algorithm>
#include <functional>
#include <system_error>
#include <thread>
#include <unordered_set>

namespace jakiro::control_plane {

void cluster_records::reset(int64_t revision) {
    _records.clear();
    _revision = revision;
    _served.clear();
    _pulled.clear();
    _dropped.clear();
    _schema_changed = false;
    _bytes = 0;
    _frame_dirty = true;
    _liveness_dirty = true;
    _structural = true;
    _touched.clear();
}

void cluster_records::note_change(record_kind kind) {
    // Only a per-VPC vNIC record can be part of a delta view (touch_vnic says which).
    _structural |= kind != record_kind::vnic;
    switch (kind) {
        case record_kind::host:
        case record_kind::vpc:
        case record_kind::group:
            _frame_dirty = true;
            break;
        case record_kind::alive:
            _liveness_dirty = true;
            break;
        default:
            break;
    }
}

std::map<std::string, stored_record>::iterator cluster_records::drop(
    std::map<std::string, stored_record>::iterator record) {
    if (record->second.kind == record_kind::vnic) {
        if (record->second.legacy) {
            _structural = true;
        } else {
            touch_vnic(record->first, &record->second);
        }
    }
    _bytes -= record->first.size() + record->second.value.size();
    note_change(record->second.kind);
    return _records.erase(record);
}

bool cluster_records::migrated() const {
    return _records.count(schema_marker_key()) != 0;
}

void cluster_records::serve(const std::string& vpc, const std::string& tag) {
    auto& local = _served[vpc];
    if (local.insert(tag).second && local.size() == 1) {
        _pulled.insert(vpc);  // its first local vNIC: read the VPC
        _structural = true;
    }
}

void cluster_records::unserve(const std::string& vpc, const std::string& tag) {
    const auto served = _served.find(vpc);
    if (served != _served.end() && served->second.erase(tag) && served->second.empty()) {
        // The last local vNIC of the VPC left: forget the VPC whole.
        _served.erase(served);
        forget_vpc(vpc);
        _pulled.erase(vpc);
        _dropped.insert(vpc);
        _structural = true;
    }
}

void cluster_records::touch_vnic(const std::string& key, stored_record* old) {
    if (_touched.count(key)) {
        return;  // what the last view had of it is noted already
    }
    if (old != nullptr && !old->accepted) {
        _structural = true;  // the last view refused it (its refusal goes with a whole view)
    }
    std::optional<vnic_config> before;
    if (old != nullptr && old->accepted) {
        before = std::move(old->vnic);
    }
    _touched.emplace(key, std::move(before));
}

vnic_placement placement_of_vnic_value(const std::string& value) {
    vnic_placement out;
    try {
        const auto node = YAML::Load(value);
        if (node.IsMap()) {
            if (node["name"].IsScalar()) {
                out.name = node["name"].Scalar();
            }
            if (node["vpc"].IsScalar()) {
                out.vpc = node["vpc"].Scalar();
            }
            if (node["host"].IsScalar()) {
                out.host = node["host"].Scalar();
            }
        }
    } catch (const YAML::Exception&) {
        // Not YAML: it places nothing (the check refuses it later).
    }
    return out;
}

std::set<std::string> cluster_records::served_vpcs() const {
    std::set<std::string> out;
    for (const auto& [vpc, vnics] : _served) {
        out.insert(vpc);
    }
    return out;
}

std::vector<std::string> cluster_records::take_pulled() {
    std::vector<std::string> out(_pulled.begin(), _pulled.end());
    _pulled.clear();
    return out;
}

std::vector<std::string> cluster_records::take_dropped() {
    std::vector<std::string> out(_dropped.begin(), _dropped.end());
    _dropped.clear();
    return out;
}

void cluster_records::forget_vpc(const std::string& vpc) {
    if (const auto found = _records.find(key_of({record_kind::vpc, "", vpc}));
        found != _records.end()) {
        drop(found);
    }
    for (auto kind : {record_kind::group, record_kind::vnic}) {
        const auto prefix = prefix_of(kind, vpc);
        for (auto it = _records.lower_bound(prefix),
                  last = _records.lower_bound(prefix_range_end(prefix));
             it != last;) {
            it = drop(it);
        }
    }
}

namespace {

// One line holding one flow mapping ("{...}", JSON included): usable as a flow entry as is.
bool one_line_mapping(std::string_view value) {
    while (!value.empty() && value.front() == ' ') {
        value.remove_prefix(1);
    }
    while (!value.empty() && value.back() == ' ') {
        value.remove_suffix(1);
    }
    return value.size() >= 2 && value.front() == '{' && value.back() == '}' &&
           value.find_first_of("\n\r#") == std::string_view::npos;
}

}  // namespace

bool cluster_records::put(const std::string& key, std::string value, int64_t mod_revision) {
    const auto parsed = parse_key(key);
    if (!parsed) {
        return false;
    }
    if (!_host.empty()) {
        switch (parsed->kind) {
            case record_kind::home:
                if (parsed->host != _host) {
                    return false;
                }
                serve(parsed->vpc, parsed->name);
                break;
            case record_kind::vpc:
                if (!serves(parsed->name)) {
                    return false;
                }
                break;
            case record_kind::group:
                if (!serves(parsed->vpc)) {
                    return false;
                }
                break;
            case record_kind::vnic:
                // A legacy key is kept whatever its VPC while the cluster still has them: only
                // its value says where it lives (placed below).
                if (parsed->legacy ? !_follow_legacy : !serves(parsed->vpc)) {
                    return false;
                }
                break;
            case record_kind::reader:
                return false;  // what other hosts read is jakiroctl's business
            case record_kind::schema:
                _schema_changed |= !migrated();
                break;
            case record_kind::host:
            case record_kind::alive:
                break;
        }
    } else if (parsed->kind == record_kind::schema) {
        _schema_changed |= !migrated();
    }
    if (const auto found = _records.find(key);
        found != _records.end() && found->second.value == value) {
        // The same value again (a resync): parsed and checked already.
        found->second.mod_revision = mod_revision;
        return true;
    }
    stored_record record{std::move(value), mod_revision, "", ""};
    record.kind = parsed->kind;
    record.vpc = parsed->vpc;
    record.legacy = parsed->legacy;
    if (parsed->legacy) {
        auto placement = placement_of_vnic_value(record.value);
        record.vpc = std::move(placement.vpc);
        record.host = std::move(placement.host);
        if (!_host.empty()) {
            // Its value names this host: a local vNIC of its VPC, as a homes/ entry would say.
            // The new place is counted before the old is let go, so that a change that keeps
            // it in its VPC does not drop and pull the VPC again.
            const auto tag = "legacy/" + parsed->name;
            if (record.host == _host && valid_name(record.vpc)) {
                serve(record.vpc, tag);
            }
            if (const auto old = _records.find(key);
                old != _records.end() && old->second.host == _host &&
                (record.host != _host || old->second.vpc != record.vpc)) {
                unserve(old->second.vpc, tag);
            }
        }
    }
    if (parsed->kind == record_kind::vnic && one_line_mapping(record.value)) {
        // As jakiroctl writes it: checked as it stands, in one YAML parse (the check's) instead
        // of two; its name and VPC are compared with the key's after the check.
        record.flow = record.value;
        record.key_unchecked = true;
    } else if (parsed->kind != record_kind::alive && parsed->kind != record_kind::home &&
               parsed->kind != record_kind::reader && parsed->kind != record_kind::schema) {
        try {
            const auto node = YAML::Load(record.value);
            // The key says what the record is: a value that claims another name is refused
            // rather than guessed at.
            if (!node.IsMap()) {
                record.problem = "not a mapping";
            } else if (!node["name"].IsDefined() || !node["name"].IsScalar() ||
                       node["name"].Scalar() != parsed->name) {
                record.problem = "name does not match the key";
            } else if ((parsed->kind == record_kind::group ||
                        (parsed->kind == record_kind::vnic && !parsed->legacy)) &&
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
    note_change(record.kind);
    const auto [stored, added] = _records.try_emplace(key);
    if (record.kind == record_kind::vnic) {
        if (record.legacy) {
            _structural = true;
        } else {
            touch_vnic(key, added ? nullptr : &stored->second);
        }
    }
    _bytes += (added ? key.size() : 0) + record.value.size() - stored->second.value.size();
    stored->second = std::move(record);
    return true;
}

bool cluster_records::erase(const std::string& key) {
    const auto found = _records.find(key);
    if (found == _records.end()) {
        return false;  // never kept: outside the interest, or gone already
    }
    if (found->second.kind == record_kind::schema) {
        _schema_changed = true;
    }
    if (!_host.empty()) {
        const auto parsed = parse_key(key);
        if (parsed && parsed->kind == record_kind::home && parsed->host == _host) {
            unserve(parsed->vpc, parsed->name);
        } else if (parsed && parsed->legacy && found->second.host == _host) {
            const auto vpc = found->second.vpc;
            drop(found);
            unserve(vpc, "legacy/" + parsed->name);
            return true;
        }
    }
    // Looked up again: forgetting a VPC above may have dropped records.
    if (const auto again = _records.find(key); again != _records.end()) {
        drop(again);
    }
    return true;
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
        case record_kind::home:
        case record_kind::reader:
        case record_kind::schema:
            break;
    }
    return nullptr;
}

}  // namespace

std::vector<const std::string*> cluster_records::keys_of(record_kind kind) const {
    std::vector<const std::string*> out;
    const auto prefix = prefix_of(kind);
    const auto last = _records.lower_bound(prefix_range_end(prefix));
    for (auto it = _records.lower_bound(prefix); it != last; ++it) {
        out.push_back(&it->first);
    }
    return out;
}

void cluster_records::load_frame() {
    // The frame (hosts, VPCs, groups: few records) is one document, one entry per line, which
    // the loader checks as it checks a cluster YAML; an error's line names its record. Each
    // round drops the entries the loader blames and tries again; a few rounds cover chains.
    // The same text as last time gives the same frame: it is not loaded again.
    std::map<record_kind, std::vector<const std::string*>> by_kind;  // keys, in key order
    std::vector<std::string> rejected;
    for (auto kind : {record_kind::host, record_kind::vpc, record_kind::group}) {
        for (const auto* key : keys_of(kind)) {
            const auto& record = _records.at(*key);
            if (!record.problem.empty()) {
                rejected.push_back(*key + ": " + record.problem);
            } else {
                by_kind[kind].push_back(key);
            }
        }
    }
    const auto problems = rejected.size();
    std::set<const std::string*> dropped;
    host_config loaded_config;
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
        if (round == 0 && text == _frame_text && _frame_usable) {
            // What the records say has not changed: the same frame, the same refusals.
            rejected.insert(rejected.end(), _loader_rejected.begin(), _loader_rejected.end());
            _frame_rejected = std::move(rejected);
            return;
        }
        if (round == 0) {
            _frame_text = text;
        }
        if (text.empty()) {
            loaded_frame = true;
            break;
        }
        auto loaded = load_cluster_config_text(text, "etcd");
        if (loaded.ok()) {
            loaded_config = std::move(loaded.config);
            loaded_frame = true;
            break;
        }
        bool progress = false;
        for (const auto& error : loaded.errors) {
            const auto* key =
                error.line > 0 && static_cast<std::size_t>(error.line) < line_key.size()
                    ? line_key[error.line]
                    : nullptr;
            if (key != nullptr && dropped.insert(key).second) {
                rejected.push_back(*key + ": " + error.field + ": " + error.message);
                progress = true;
            }
        }
        if (!progress) {
            rejected.push_back(loaded.errors[0].to_string());
            break;
        }
    }
    _loader_rejected.assign(rejected.begin() + static_cast<std::ptrdiff_t>(problems),
                            rejected.end());
    _frame_rejected = std::move(rejected);
    _frame_usable = loaded_frame;
    if (!loaded_frame) {
        _frame_text.clear();  // loaded again next time
        return;
    }
    // The hosts go to the directory, which views share: a view copies the frame, and would
    // copy every host of the cluster with it.
    auto directory = std::make_shared<host_directory>();
    directory->underlay.reserve(loaded_config.hosts.size());
    for (const auto& host : loaded_config.hosts) {
        directory->underlay.emplace(host.name, host.underlay_ip);
        if (!host.overlay_key.empty()) {
            directory->overlay_keys.emplace(host.name, host.overlay_key);
        }
    }
    _hosts = std::move(directory);
    loaded_config.hosts.clear();
    _frame = std::move(loaded_config);
    ++_generations;
    // Each VPC's part of the frame: its vNICs are checked again only if it changed.
    std::map<std::string, std::string> vpc_text;
    for (const auto& vpc : _frame.vpcs) {
        vpc_text[vpc.name] = "vpc " + vpc.name + " " + std::to_string(vpc.vni) + "\n";
    }
    for (const auto* key : by_kind[record_kind::group]) {
        if (!dropped.count(key)) {
            vpc_text[parse_key(*key)->vpc] += _records.at(*key).flow + "\n";
        }
    }
    for (auto it = _vpc_frames.begin(); it != _vpc_frames.end();) {
        it = vpc_text.count(it->first) ? std::next(it) : _vpc_frames.erase(it);
    }
    for (auto& [vpc, text] : vpc_text) {
        auto& frame = _vpc_frames[vpc];
        if (frame.generation == 0 || frame.text != text) {
            frame.text = std::move(text);
            frame.generation = _generations;
        }
    }
}

void cluster_records::load_liveness() {
    // A copy of the hosts' addresses (kept) with this moment's leases: a lease coming or going
    // costs one pass over the hosts; a vNIC's change none.
    auto directory = std::make_shared<host_directory>();
    if (_hosts) {
        directory->underlay = _hosts->underlay;
        directory->overlay_keys = _hosts->overlay_keys;
    }
    for (const auto* key : keys_of(record_kind::alive)) {
        directory->alive.insert(key->substr(prefix_of(record_kind::alive).size()));
    }
    for (const auto& [name, ip] : directory->underlay) {
        if (!directory->alive.count(name)) {
            directory->stale.push_back(name);
        }
    }
    std::sort(directory->stale.begin(), directory->stale.end());
    _hosts = std::move(directory);
}

void cluster_records::check_vnic(const std::string& key, stored_record& record,
                                 std::size_t& checked) {
    check_vnic_against(_frame, key, record, checked);
}

void cluster_records::check_vnics(const std::vector<const std::string*>& keys,
                                  const std::vector<stored_record*>& records,
                                  std::size_t& checked) {
    // Below this many records a thread costs more than it saves.
    constexpr std::size_t records_per_thread = 2048;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const auto cpus = sched_getaffinity(0, sizeof(allowed), &allowed) == 0
                          ? static_cast<std::size_t>(CPU_COUNT(&allowed))
                          : std::size_t{1};
    const auto threads =
        std::max<std::size_t>(1, std::min(cpus, records.size() / records_per_thread));
    if (threads == 1) {
        for (std::size_t k = 0; k < records.size(); ++k) {
            check_vnic(*keys[k], *records[k], checked);
        }
        return;
    }
    // Interleaved, not in blocks: records of one VPC sit together in key order, and a VPC
    // whose records all need a check should not fall to one thread.
    std::vector<std::size_t> counts(threads, 0);
    std::vector<host_config> frames(threads - 1, _frame);
    auto share = [&](std::size_t t, host_config& frame) {
        for (std::size_t k = t; k < records.size(); k += threads) {
            check_vnic_against(frame, *keys[k], *records[k], counts[t]);
        }
    };
    std::vector<std::thread> helpers;
    helpers.reserve(threads - 1);
    for (std::size_t t = 1; t < threads; ++t) {
        try {
            helpers.emplace_back(share, t, std::ref(frames[t - 1]));
        } catch (const std::system_error&) {
            break;  // no thread to be had: this one does the rest
        }
    }
    share(0, _frame);
    for (std::size_t t = helpers.size() + 1; t < threads; ++t) {
        share(t, frames[t - 1]);
    }
    for (auto& helper : helpers) {
        helper.join();
    }
    for (const auto count : counts) {
        checked += count;
    }
}

void cluster_records::check_vnic_against(host_config& frame, const std::string& key,
                                         stored_record& record, std::size_t& checked) const {
    // A legacy value that names no VPC: checked again whenever any part of the frame
    // changed.
    uint64_t generation = _generations;
    if (!record.vpc.empty()) {
        const auto found = _vpc_frames.find(record.vpc);
        generation = found == _vpc_frames.end() ? 0 : found->second.generation;
    }
    if (record.checked_frame == generation && generation != 0) {
        return;
    }
    record.checked_frame = generation;
    record.error.clear();
    record.vnic = load_cluster_vnic_text(record.flow, frame, record.error);
    ++checked;
    if (record.key_unchecked) {
        // The key says what the record is: a value that claims another name or VPC is refused
        // rather than guessed at.
        if (record.vnic && record.vnic->name != key.substr(key.rfind('/') + 1)) {
            record.vnic.reset();
            record.error = "name does not match the key";
        } else if (record.vnic && !record.legacy && record.vnic->vpc != record.vpc) {
            record.vnic.reset();
            record.error = "vpc does not match the key";
        } else if (!record.vnic && record.error.rfind("yaml-cpp", 0) == 0) {
            record.error = "not YAML: " + record.error;
        }
    }
}

std::optional<cluster_records::claim_keys> cluster_records::claims_of(
    const vnic_config& vnic) const {
    claim_keys out;
    if (const auto number = _vpc_number.find(vnic.vpc); number != _vpc_number.end()) {
        out.address = number->second << 32 | vnic.ip.address;
        if (vnic.ip6) {
            out.address6 = std::make_pair(number->second, vnic.ip6->address);
        }
    }
    for (const auto byte : vnic.mac) {
        out.mac = out.mac << 8 | byte;
    }
    return out;
}

std::shared_ptr<cluster_view> cluster_records::build_delta() {
    auto view = std::make_shared<cluster_view>();
    view->delta = true;
    view->revision = _revision;
    view->records = _records.size();
    view->bytes = _bytes;
    view->hosts = _hosts;
    std::vector<stored_record*> now;
    for (auto& [key, before] : _touched) {
        const auto found = _records.find(key);
        stored_record* record = found == _records.end() ? nullptr : &found->second;
        if (record != nullptr) {
            if (!record->problem.empty()) {
                return nullptr;
            }
            check_vnic(key, *record, view->vnics_checked);
            if (!record->vnic || record->vnic->host == _host) {
                return nullptr;  // a refusal, or a local vNIC: the whole view says it
            }
        }
        if (before && before->host == _host) {
            return nullptr;
        }
        now.push_back(record);
    }
    // Each changed vNIC must have claimed its address and MAC alone, and claim its new ones
    // alone: otherwise which of two claimants keeps them is the whole view's decision. A failure
    // leaves the counts half done; the whole view counts them again.
    auto release = [](auto& counts, const auto& key) {
        const auto found = counts.find(key);
        if (found == counts.end() || found->second != 1) {
            return false;
        }
        counts.erase(found);
        return true;
    };
    auto take = [](auto& counts, const auto& key) { return counts.emplace(key, 1).second; };
    for (const auto& [key, before] : _touched) {
        if (!before) {
            continue;
        }
        const auto claims = claims_of(*before);
        if (!claims || !claims->address || !release(_address_claims, *claims->address) ||
            !release(_mac_claims, claims->mac) ||
            (claims->address6 && !release(_address6_claims, *claims->address6))) {
            return nullptr;
        }
    }
    for (auto* record : now) {
        if (record == nullptr || !record->vnic) {
            continue;
        }
        const auto claims = claims_of(*record->vnic);
        if (!claims || !claims->address || !take(_address_claims, *claims->address) ||
            !take(_mac_claims, claims->mac) ||
            (claims->address6 && !take(_address6_claims, *claims->address6))) {
            return nullptr;
        }
    }
    std::size_t k = 0;
    for (auto& [key, before] : _touched) {
        auto* record = now[k++];
        vnic_change change;
        change.key = key;
        change.before = std::move(before);
        if (record != nullptr) {
            record->accepted = true;
            change.after = record->vnic;
        }
        if (change.before || change.after) {
            view->changes.push_back(std::move(change));
        }
    }
    view->rejected = _view_rejected;
    _touched.clear();
    return view;
}

std::shared_ptr<const cluster_view> cluster_records::build_view(bool full) {
    if (!full && !_structural && !_host.empty() && !_follow_legacy && _last_view_usable &&
        !_frame_dirty && !_liveness_dirty) {
        if (auto delta = build_delta()) {
            return delta;
        }
    }
    _touched.clear();
    _structural = false;
    _last_view_usable = false;
    auto view = std::make_shared<cluster_view>();
    view->revision = _revision;
    view->records = _records.size();
    view->bytes = _bytes;
    view->legacy_keys = _follow_legacy;
    // Hosts, VPCs and groups are loaded again only when one of them changed, leases only when
    // one came or went: a vNIC's change does no work that grows with the hosts of the cluster.
    if (_frame_dirty || !_frame_usable) {
        view->frame_checked = true;
        load_frame();
        _frame_dirty = false;
        _liveness_dirty = true;  // the addresses may have changed
    }
    view->rejected = _frame_rejected;
    if (!_frame_usable) {
        view->usable = false;
        return view;
    }
    if (_liveness_dirty || !_hosts) {
        load_liveness();
        _liveness_dirty = false;
    }
    view->hosts = _hosts;
    view->cluster = _frame;
    std::vector<const std::string*> vnic_keys;
    std::vector<stored_record*> vnic_records;
    std::vector<std::pair<const std::string*, stored_record*>> legacy_vnics;
    for (const auto* key : keys_of(record_kind::vnic)) {
        auto& record = _records.at(*key);
        record.accepted = false;
        if (record.legacy) {
            // A host keeps every legacy key while they are in use; its VPCs' count.
            if (_host.empty() || serves(record.vpc)) {
                legacy_vnics.emplace_back(key, &record);
            }
        } else if (!record.problem.empty()) {
            view->rejected.push_back(*key + ": " + record.problem);
        } else {
            vnic_keys.push_back(key);
            vnic_records.push_back(&record);
        }
    }
    if (!legacy_vnics.empty()) {
        // While a cluster moves to per-VPC keys a vNIC may be under both: the per-VPC one is it.
        std::unordered_set<std::string_view> per_vpc;
        for (const auto* key : vnic_keys) {
            per_vpc.insert(std::string_view(*key).substr(key->rfind('/') + 1));
        }
        for (auto [key, record] : legacy_vnics) {
            if (per_vpc.count(std::string_view(*key).substr(key->rfind('/') + 1))) {
                continue;
            }
            if (!record->problem.empty()) {
                view->rejected.push_back(*key + ": " + record->problem);
                continue;
            }
            vnic_keys.push_back(key);
            vnic_records.push_back(record);
        }
    }
    // vNICs one by one against the frame, each remembered until it or its VPC's frame changes.
    // What the loader checks across entries, the first claimant (in key order) keeping it:
    // one address per VPC, one MAC in the cluster.
    std::map<std::string, uint64_t> vpc_number;
    for (const auto& vpc : view->cluster.vpcs) {
        vpc_number.emplace(vpc.name, vpc_number.size());
    }
    _vpc_number = vpc_number;
    _address_claims.clear();
    _mac_claims.clear();
    _address6_claims.clear();
    _address_claims.reserve(vnic_records.size());
    _mac_claims.reserve(vnic_records.size());
    std::unordered_set<uint64_t> addresses, macs;
    std::set<std::pair<uint64_t, ipv6_address>> addresses6;
    addresses.reserve(vnic_records.size());
    macs.reserve(vnic_records.size());
    view->cluster.vnics.reserve(vnic_records.size());
    check_vnics(vnic_keys, vnic_records, view->vnics_checked);
    const auto& keys = vnic_keys;
    for (std::size_t k = 0; k < keys.size(); ++k) {
        const auto& key = *keys[k];
        auto& record = *vnic_records[k];
        if (!record.vnic) {
            view->rejected.push_back(key + ": " + record.error);
            continue;
        }
        const auto& vnic = *record.vnic;
        // Every valid record's claims count, refused or not: a delta view may only change a
        // vNIC that claimed alone (build_delta).
        if (const auto claims = claims_of(vnic)) {
            if (claims->address) {
                ++_address_claims[*claims->address];
            }
            if (claims->address6) {
                ++_address6_claims[*claims->address6];
            }
            ++_mac_claims[claims->mac];
        }
        const auto number = vpc_number.find(vnic.vpc);
        if (number != vpc_number.end() &&
            !addresses.insert(number->second << 32 | vnic.ip.address).second) {
            view->rejected.push_back(key + ": vnics[*].ip: address " +
                                     format_ipv4(vnic.ip.address) + " already used in VPC '" +
                                     vnic.vpc + "'");
            continue;
        }
        if (number != vpc_number.end() && vnic.ip6 &&
            addresses6.count({number->second, vnic.ip6->address})) {
            view->rejected.push_back(key + ": vnics[*].ip6: address " +
                                     format_ipv6(vnic.ip6->address) + " already used in VPC '" +
                                     vnic.vpc + "'");
            continue;
        }
        uint64_t mac = 0;
        for (const auto byte : vnic.mac) {
            mac = mac << 8 | byte;
        }
        if (!macs.insert(mac).second) {
            view->rejected.push_back(key + ": vnics[*].mac: MAC used by two vNICs");
            continue;
        }
        if (number != vpc_number.end() && vnic.ip6) {
            addresses6.insert({number->second, vnic.ip6->address});
        }
        record.accepted = true;
        view->cluster.vnics.push_back(vnic);
    }
    _view_rejected = view->rejected;
    _last_view_usable = true;
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
            if (kind == record_kind::group || kind == record_kind::vnic) {
                key.vpc = node["vpc"].as<std::string>("");
            }
            YAML::Emitter emit;
            emit << YAML::Flow << node;
            out[key_of(key)] = emit.c_str();
            if (kind == record_kind::vnic) {
                // The host's index: how it finds the VPCs it serves without reading the rest.
                record_key home{record_kind::home, key.vpc, key.name,
                                node["host"].as<std::string>(""), false};
                out[key_of(home)] = "{name: " + key.name + "}";
            }
        }
    };
    add(record_kind::host, "hosts");
    add(record_kind::vpc, "vpcs");
    add(record_kind::group, "security_groups");
    add(record_kind::vnic, "vnics");
    return out;
}

namespace {

// A host's record as its jakirod registered it carries the host's overlay key; a file that
// names the host with the same address and no key leaves the record as it is (the key is the
// host's to publish, not the file's).
bool keeps_registered_key(const std::string& key, const std::string& desired,
                          const std::string& stored) {
    const auto parsed = parse_key(key);
    if (!parsed || parsed->kind != record_kind::host) {
        return false;
    }
    try {
        const YAML::Node want = YAML::Load(desired);
        const YAML::Node have = YAML::Load(stored);
        return !want["overlay_key"] && have["overlay_key"] &&
               want["name"].as<std::string>("") == have["name"].as<std::string>("") &&
               want["underlay_ip"].as<std::string>("") == have["underlay_ip"].as<std::string>("") &&
               want.size() + 1 == have.size();
    } catch (const YAML::Exception&) {
        return false;
    }
}

}  // namespace

record_diff diff_records(const std::map<std::string, std::string>& desired,
                         const std::map<std::string, stored_record>& current) {
    record_diff diff;
    for (const auto& [key, value] : desired) {
        const auto found = current.find(key);
        if (found == current.end()) {
            diff.puts.push_back({key, value, 0});
        } else if (found->second.value != value &&
                   !keeps_registered_key(key, value, found->second.value)) {
            diff.puts.push_back({key, value, found->second.mod_revision});
        }
    }
    for (const auto& [key, record] : current) {
        const auto parsed = parse_key(key);
        if (!parsed || parsed->kind == record_kind::host || parsed->kind == record_kind::alive ||
            parsed->kind == record_kind::reader) {
            continue;
        }
        if (!desired.count(key)) {
            diff.deletes.push_back({key, "", record.mod_revision});
        }
    }
    return diff;
}

}  // namespace jakiro::control_plane
