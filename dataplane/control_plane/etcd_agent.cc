#include "dataplane/control_plane/etcd_agent.hh"

#include <algorithm>
#include <set>

#include "dataplane/control_plane/key_schema.hh"
#include "dataplane/control_plane/schema_migration.hh"
#include "dataplane/log.hh"

namespace jakiro::control_plane {

namespace {
constexpr auto call_timeout = std::chrono::seconds(5);
// Retry pace while etcd is away: fast enough to converge within a second of its return,
// slow enough to cost nothing while it stays away.
constexpr auto retry_first = std::chrono::milliseconds(200);
constexpr auto retry_max = std::chrono::milliseconds(1000);
}  // namespace

etcd_agent::etcd_agent(control_config control, std::string host_name, uint32_t underlay_ip)
    : _control(std::move(control)),
      _host_name(std::move(host_name)),
      _underlay_ip(underlay_ip),
      _client(_control.etcd, true) {
    _records.follow_only(_host_name);
}

etcd_agent::~etcd_agent() {
    stop();
}

bool etcd_agent::read_interest(std::vector<key_value>& out, int64_t& revision, bool& legacy,
                               std::string& error, std::chrono::milliseconds timeout) {
    // This host's index first: it says which VPCs to read; everything else at its revision.
    revision = 0;
    std::vector<key_value> homes;
    if (!_client.range_prefix(homes_prefix_of(_host_name), homes, revision, error, timeout)) {
        return false;
    }
    std::set<std::string> vpcs;
    for (const auto& kv : homes) {
        if (const auto key = parse_key(kv.key); key && key->kind == record_kind::home) {
            vpcs.insert(key->vpc);
        }
    }
    out = std::move(homes);
    // No schema marker: the cluster may still have vNICs under legacy keys only (written
    // before the per-VPC keys, or by a jakiroctl from before): read them all, since only
    // their values say which are this host's (schema_migration.hh).
    const auto marker_at = out.size();
    if (!_client.range_prefix(schema_marker_key(), out, revision, error, timeout)) {
        return false;
    }
    legacy = std::none_of(out.begin() + static_cast<std::ptrdiff_t>(marker_at), out.end(),
                          [](const key_value& kv) { return kv.key == schema_marker_key(); });
    if (legacy) {
        const auto vnics_at = out.size();
        if (!_client.range_prefix(prefix_of(record_kind::vnic), out, revision, error, timeout)) {
            return false;
        }
        for (auto kv = out.begin() + static_cast<std::ptrdiff_t>(vnics_at); kv != out.end(); ++kv) {
            const auto key = parse_key(kv->key);
            if (key && key->legacy) {
                const auto placement = placement_of_vnic_value(kv->value);
                if (placement.host == _host_name && valid_name(placement.vpc)) {
                    vpcs.insert(placement.vpc);
                }
            }
        }
    }
    std::vector<std::string> prefixes{prefix_of(record_kind::host), prefix_of(record_kind::alive)};
    // With the legacy keys, the VPC's vNICs come twice: those read whole above came before
    // the legacy key that put the VPC in the interest, and were dropped then.
    for (const auto& vpc : vpcs) {
        for (auto& prefix : vpc_prefixes(vpc)) {
            prefixes.push_back(std::move(prefix));
        }
    }
    for (const auto& prefix : prefixes) {
        if (!_client.range_prefix(prefix, out, revision, error, timeout)) {
            return false;
        }
    }
    return true;
}

std::vector<std::string> etcd_agent::vpc_prefixes(const std::string& vpc) {
    // The VPC's own record is read as a prefix too: a neighbour whose name starts with it
    // comes along and is dropped by the interest.
    return {key_of({record_kind::vpc, "", vpc, "", false}), prefix_of(record_kind::group, vpc),
            prefix_of(record_kind::vnic, vpc)};
}

bool etcd_agent::full_read(std::string& error) {
    std::vector<key_value> kvs;
    int64_t revision = 0;
    bool legacy = false;
    if (!read_interest(kvs, revision, legacy, error, call_timeout)) {
        return false;
    }
    queued_event event;
    event.reset = true;
    event.legacy = legacy;
    event.puts = std::move(kvs);
    event.revision = revision;
    event.received = std::chrono::steady_clock::now();
    {
        std::lock_guard lock(_mutex);
        _revision = revision;
    }
    enqueue(std::move(event));
    return true;
}

std::shared_ptr<const cluster_view> etcd_agent::read_once(std::chrono::milliseconds timeout,
                                                          std::string& error) {
    std::vector<key_value> kvs;
    int64_t revision = 0;
    bool legacy = false;
    if (!read_interest(kvs, revision, legacy, error, timeout)) {
        return nullptr;
    }
    _records.reset(revision);
    _records.follow_legacy(legacy);
    for (auto& kv : kvs) {
        _records.put(kv.key, std::move(kv.value), kv.mod_revision);
    }
    _records.take_pulled();  // read above with the rest
    _records.take_schema_changed();
    _revision = revision;
    return _records.build_view();
}

bool etcd_agent::pull_vpcs(int64_t revision) {
    for (const auto& vpc : _records.take_pulled()) {
        std::vector<key_value> kvs;
        std::string error;
        for (const auto& prefix : vpc_prefixes(vpc)) {
            int64_t at = revision;
            if (!_client.range_prefix(prefix, kvs, at, error, call_timeout)) {
                log::warning("vpc_read_failed", error, {{"vpc", vpc}, {"revision", revision}});
                return false;
            }
        }
        log::info("vpc_followed", "the first local vNIC of a VPC arrived: following it",
                  {{"vpc", vpc}, {"records", kvs.size()}});
        for (auto& kv : kvs) {
            _records.put(kv.key, std::move(kv.value), kv.mod_revision);
        }
    }
    for (const auto& vpc : _records.take_dropped()) {
        log::info("vpc_forgotten", "the last local vNIC of a VPC left: forgetting it",
                  {{"vpc", vpc}});
    }
    return true;
}

void etcd_agent::request_whole_view() {
    queued_event event;
    event.whole = true;
    event.received = std::chrono::steady_clock::now();
    enqueue(std::move(event));
}

void etcd_agent::start(view_handler on_view, connection_handler on_connection) {
    _on_view = std::move(on_view);
    _on_connection = std::move(on_connection);
    _build_thread = std::thread([this] { build_loop(); });
    _watch_thread = std::thread([this] { watch_loop(); });
    _lease_thread = std::thread([this] { lease_loop(); });
}

void etcd_agent::stop() {
    if (_stopping.exchange(true)) {
        return;
    }
    {
        std::lock_guard lock(_mutex);
        if (_watch != nullptr) {
            _watch->cancel();
        }
    }
    _wake.notify_all();
    for (auto* thread : {&_watch_thread, &_build_thread, &_lease_thread}) {
        if (thread->joinable()) {
            thread->join();
        }
    }
}

void etcd_agent::sleep_for(std::chrono::milliseconds duration) {
    std::unique_lock lock(_mutex);
    _wake.wait_for(lock, duration, [this] { return _stopping.load(); });
}

void etcd_agent::enqueue(queued_event event) {
    {
        std::lock_guard lock(_mutex);
        if (event.reset) {
            _queue.clear();  // everything before a full read is superseded by it
        }
        _queue.push_back(std::move(event));
    }
    _wake.notify_all();
}

void etcd_agent::report(bool connected, const std::string& error) {
    int64_t revision = 0;
    {
        std::lock_guard lock(_mutex);
        if (_reported && connected == _connected && (connected || error == _last_error)) {
            return;  // only changes are news
        }
        _reported = true;
        _last_error = error;
        _connected = connected;
        revision = _revision;
    }
    if (connected) {
        log::info("etcd_connected", "following the cluster in etcd",
                  {{"revision", revision}, {"etcd", _control.etcd[0]}});
    } else {
        log::warning("etcd_disconnected", error,
                     {{"revision", revision}, {"etcd", _control.etcd[0]}});
    }
    _on_connection({connected, revision, error});
}

void etcd_agent::watch_loop() {
    auto retry = retry_first;
    bool need_full_read = true;
    {
        std::lock_guard lock(_mutex);
        // read_once() already holds a full read: the watch resumes right after it.
        need_full_read = _revision == 0;
    }
    while (!_stopping) {
        std::string error;
        if (need_full_read) {
            if (!full_read(error)) {
                report(false, error);
                sleep_for(retry);
                retry = std::min(retry * 2, retry_max);
                continue;
            }
            need_full_read = false;
        }
        int64_t from = 0;
        {
            std::lock_guard lock(_mutex);
            from = _revision + 1;
        }
        etcd_client::watch_stream stream(_client, std::string(key_root), from);
        {
            std::lock_guard lock(_mutex);
            if (_stopping) {
                break;
            }
            if (_resync) {
                // The build thread could not read a VPC it was pulled into: start over.
                _resync = false;
                need_full_read = true;
                continue;
            }
            _watch = &stream;
        }
        etcdserverpb::WatchResponse response;
        while (stream.next(response, error)) {
            const auto received = std::chrono::steady_clock::now();
            if (response.compact_revision() > 0) {
                // What we missed is gone from etcd's history: read everything again.
                log::warning("etcd_compacted", "watch revision compacted; reading everything again",
                             {{"from", from}, {"compact_revision", response.compact_revision()}});
                need_full_read = true;
                stream.cancel();
                break;
            }
            if (response.canceled()) {
                error = "watch cancelled by etcd: " + response.cancel_reason();
                stream.cancel();
                break;
            }
            retry = retry_first;
            queued_event event;
            event.received = received;
            for (const auto& e : response.events()) {
                if (e.type() == etcdserverpb::Event::DELETE) {
                    event.deletes.push_back(e.kv().key());
                } else {
                    event.puts.push_back(
                        {e.kv().key(), e.kv().value(), e.kv().mod_revision(), e.kv().lease()});
                }
            }
            {
                std::lock_guard lock(_mutex);
                _revision = std::max(_revision, response.header().revision());
                event.revision = _revision;
            }
            report(true, "");
            if (!event.puts.empty() || !event.deletes.empty()) {
                enqueue(std::move(event));
            }
        }
        {
            std::lock_guard lock(_mutex);
            _watch = nullptr;
        }
        if (_stopping) {
            break;
        }
        {
            std::lock_guard lock(_mutex);
            if (_resync) {
                _resync = false;
                need_full_read = true;
            }
        }
        if (!need_full_read) {
            report(false, error);
            sleep_for(retry);
            retry = std::min(retry * 2, retry_max);
        }
    }
}

void etcd_agent::build_loop() {
    for (;;) {
        std::deque<queued_event> batch;
        {
            std::unique_lock lock(_mutex);
            _wake.wait(lock, [this] { return _stopping || !_queue.empty(); });
            if (_stopping) {
                return;
            }
            batch.swap(_queue);
        }
        // The oldest event of the batch: what the latency of this publication is counted from.
        const auto received = batch.front().received;
        bool changed = false;
        bool pulled = true;
        bool whole = false;
        for (auto& event : batch) {
            if (event.whole) {
                whole = changed = true;
                continue;
            }
            if (event.reset) {
                _records.reset(event.revision);
                _records.follow_legacy(event.legacy);
                changed = true;
            }
            // A record outside the interest costs its key's parse and nothing else.
            for (auto& kv : event.puts) {
                changed |= _records.put(kv.key, std::move(kv.value), kv.mod_revision);
            }
            for (const auto& key : event.deletes) {
                changed |= _records.erase(key);
            }
            if (event.reset) {
                _records.take_pulled();  // the full read holds the VPCs its index named
                _records.take_schema_changed();
            } else if (_records.take_schema_changed()) {
                // The migration to per-VPC keys finished (or was undone): read the interest
                // again, with or without the legacy keys. The transaction that wrote the
                // marker removed the legacy keys, so nothing in between is published.
                log::info("schema_changed", "the cluster's vNIC key schema changed; reading again",
                          {{"revision", event.revision}});
                pulled = false;
                break;
            } else if (!pull_vpcs(event.revision)) {
                pulled = false;  // compacted or etcd gone: read everything again
                break;
            }
            _records.set_revision(event.revision);
        }
        if (!pulled) {
            std::lock_guard lock(_mutex);
            _resync = true;
            if (_watch != nullptr) {
                _watch->cancel();
            }
            continue;
        }
        if (changed) {
            _on_view(_records.build_view(whole), received);
        }
    }
}

bool etcd_agent::register_host(int64_t lease, std::string& error) {
    const std::string name = _host_name;
    etcdserverpb::TxnRequest request;
    // No compare: this host is the only writer of its two keys.
    auto* host = request.add_success()->mutable_request_put();
    host->set_key(key_of({record_kind::host, "", name}));
    host->set_value("{name: " + name + ", underlay_ip: " + format_ipv4(_underlay_ip) +
                    (_overlay_key.empty() ? "" : ", overlay_key: \"" + _overlay_key + "\"") + "}");
    auto* alive = request.add_success()->mutable_request_put();
    alive->set_key(key_of({record_kind::alive, "", name}));
    alive->set_value("{name: " + name + "}");
    alive->set_lease(lease);
    // Durable: the migration to per-VPC keys finishes once every registered host says this.
    auto* reader = request.add_success()->mutable_request_put();
    reader->set_key(key_of({record_kind::reader, "", name}));
    reader->set_value(readers_value_of(name));
    etcdserverpb::TxnResponse response;
    return _client.txn(request, response, error, call_timeout);
}

void etcd_agent::lease_loop() {
    const auto period = std::chrono::milliseconds(_control.lease_ttl_s * 1000 / 3);
    int64_t lease = 0;
    while (!_stopping) {
        std::string error;
        if (lease == 0) {
            int64_t granted = 0;
            if (_client.lease_grant(_control.lease_ttl_s, granted, error, call_timeout) &&
                register_host(granted, error)) {
                lease = granted;
                log::info("host_registered", "registered in etcd under a lease",
                          {{"lease_ttl_s", _control.lease_ttl_s}});
            }
        } else {
            int64_t ttl = 0;
            if (_client.lease_keep_alive(lease, ttl, error, call_timeout) && ttl <= 0) {
                // Expired while etcd was away: etcd dropped alive/<name>; register again.
                log::warning("lease_expired", "the host's lease expired; registering again");
                lease = 0;
                continue;
            }
        }
        sleep_for(lease == 0 ? retry_max : period);
    }
}

}  // namespace jakiro::control_plane
