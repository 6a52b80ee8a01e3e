#include "rnic/verbs/channel_server.hh"

#include <arpa/inet.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "verbs_abi/endpoint_address.hh"

namespace jakiro::verbs {

namespace {

// Connections a listener queues before accept; each vNIC has its own listeners.
constexpr int listen_backlog = 64;
// Descriptors jakirod may need for clients: two per connection, for this many connections.
constexpr std::size_t expected_clients = 4096;

// Every client holds two descriptors here; the default soft limit (1024) would cap jakirod
// at a few hundred verbs contexts, so raise it towards the hard limit once.
void raise_fd_limit(std::size_t wanted) {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= wanted) {
        return;
    }
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, wanted);
    setrlimit(RLIMIT_NOFILE, &lim);
}

bool same_endpoint(const endpoint_config& a, const endpoint_config& b) {
    return a.identity.name == b.identity.name && a.identity.mac == b.identity.mac &&
           a.identity.ip == b.identity.ip && a.identity.ip6 == b.identity.ip6 &&
           a.identity.slot == b.identity.slot && a.identity.engine == b.identity.engine &&
           a.netns == b.netns && a.port == b.port && a.own_namespace == b.own_namespace;
}

void add(channel_stats& sum, const endpoint_report& r) {
    sum.faces += r.counters;
    sum.cm_commands += r.cm.commands;
    sum.cm_bad_commands += r.cm.bad_commands;
    sum.cm_mads_sent += r.cm.mads_sent;
    sum.cm_mads_received += r.cm.mads_received;
    sum.cm_mads_dropped += r.cm.mads_dropped;
    sum.cm_retransmissions += r.cm.retransmissions;
    sum.cm_timeouts += r.cm.timeouts;
    sum.cm_rejected_by_policy += r.cm.rejected_by_policy;
    sum.cm_rejected_no_listener += r.cm.rejected_no_listener;
    sum.cm_mads_forged += r.cm.mads_forged;
}

}  // namespace

channel_server::channel_server(channel_config config)
    : _config(std::move(config)),
      _sink{[](void* self, uint64_t client, uint32_t cq) {
                static_cast<channel_server*>(self)->raise_cq_error(client, cq);
            },
            this} {
    if (_config.reserve == nullptr) {
        _config.reserve = std::make_shared<host_reserve>();
    }
}

channel_server::~channel_server() {
    stop();
}

std::string channel_server::socket_path(uint16_t slot) const {
    const std::lock_guard lock(_endpoints_mutex);
    const auto it = _endpoints.find(slot);
    return it == _endpoints.end() ? std::string() : socket_path_for(it->second->spec());
}

std::string channel_server::name_address(const std::string& vnic) const {
    return _config.endpoint_prefix + "name/" + vnic;
}

bool channel_server::serves(uint16_t slot) const {
    const std::lock_guard lock(_endpoints_mutex);
    return _endpoints.count(slot) != 0;
}

vnic_resources& channel_server::resources(uint16_t slot) {
    const std::lock_guard lock(_endpoints_mutex);
    return _endpoints.at(slot)->resources();
}

std::size_t channel_server::client_count() const {
    const std::lock_guard lock(_endpoints_mutex);
    std::size_t n = 0;
    for (const auto& [slot, ep] : _endpoints) {
        n += ep->client_count();
    }
    return n;
}

channel_stats channel_server::stats() const {
    const std::lock_guard lock(_endpoints_mutex);
    channel_stats s = _retired;
    for (const auto& [slot, ep] : _endpoints) {
        add(s, ep->report());
    }
    return s;
}

std::vector<endpoint_report> channel_server::reports() const {
    const std::lock_guard lock(_endpoints_mutex);
    std::vector<endpoint_report> out;
    for (const auto& [slot, ep] : _endpoints) {
        out.push_back(ep->report());
    }
    return out;
}

void channel_server::enable_qps(
    std::vector<rnic::engine*> engines,
    std::function<int(uint16_t slot, uint32_t remote_ip_be)> admit,
    std::function<int(uint16_t slot, const rnic::ipv6_address& remote)> admit_ipv6) {
    _engines = std::move(engines);
    _admit = std::move(admit);
    _admit_ipv6 = std::move(admit_ipv6);
}

rnic::engine* channel_server::engine_for(const vnic_identity& v) const {
    return v.engine < _engines.size() ? _engines[v.engine] : nullptr;
}

bool channel_server::start(std::string& error, std::string& warnings) {
    raise_fd_limit(2 * expected_clients + 1024);
    {
        const std::lock_guard lock(_changes_mutex);
        if (_running) {
            error = "already serving";
            return false;
        }
        _running = true;
    }
    if (!sync(_config.vnics, warnings)) {
        warnings += "\n";
    }
    return true;
}

std::unique_ptr<vnic_endpoint> channel_server::make_endpoint(const endpoint_config& spec,
                                                             std::string& error,
                                                             handover::section_reader* image) {
    vnic_endpoint::parts p;
    p.spec = spec;
    const bool found = spec.own_namespace    ? tenant_namespace::own(p.ns, error)
                       : !spec.netns.empty() ? tenant_namespace::named(spec.netns, p.ns, error)
                                             : tenant_namespace::veth_peer(spec.port, p.ns, error);
    if (!found) {
        error = "vNIC " + spec.identity.name + ": no RDMA face: " + error;
        return nullptr;
    }
    std::vector<std::string> addresses = {socket_path_for(spec)};
    if (image != nullptr) {
        addresses.clear();  // the predecessor's listeners, bound already, come in the image
    } else if (verbs_endpoint::valid_name(spec.identity.name)) {
        addresses.push_back(name_address(spec.identity.name));
    }
    for (const auto& address : addresses) {
        const int fd = p.ns.listen_inside(address, listen_backlog, error);
        if (fd < 0) {
            error = "vNIC " + spec.identity.name + ": " + error;
            for (const int bound : p.listeners) {
                close(bound);
            }
            return nullptr;
        }
        p.listeners.push_back(fd);
    }
    p.resources = std::make_unique<vnic_resources>(engine_limits(), _sink, spec.identity.quota,
                                                   _config.reserve);
    if (!_engines.empty()) {
        p.engine = engine_for(spec.identity);
        if (p.engine == nullptr) {
            error = "vNIC " + spec.identity.name + ": no RoCE engine " +
                    std::to_string(spec.identity.engine);
            for (const int bound : p.listeners) {
                close(bound);
            }
            return nullptr;
        }
        p.resources->enable_qps(qp_support_for(spec.identity));
        if (_admit) {
            auto check = _admit;
            const uint16_t slot = spec.identity.slot;
            p.admit = [check, slot](uint32_t remote) { return check(slot, remote); };
        }
        if (_admit_ipv6) {
            auto check = _admit_ipv6;
            const uint16_t slot = spec.identity.slot;
            p.admit_ipv6 = [check, slot](const rnic::ipv6_address& remote) {
                return check(slot, remote);
            };
        }
    }
    vnic_endpoint::settings s;
    s.host_name = _config.host_name;
    s.tenant_mtu = _config.tenant_mtu;
    s.hello_timeout = _config.hello_timeout;
    s.client_ids = &_client_ids;
    if (image != nullptr) {
        auto ep = vnic_endpoint::restore(std::move(p), std::move(s), *image);
        if (ep == nullptr) {
            error = image->ok() ? "vNIC " + spec.identity.name + ": not restored" : "";
        }
        return ep;
    }
    return std::make_unique<vnic_endpoint>(std::move(p), std::move(s));
}

std::string channel_server::socket_path_for(const endpoint_config& spec) const {
    const std::string full = verbs_endpoint::by_mac(spec.identity.mac.data());
    return _config.endpoint_prefix + full.substr(verbs_endpoint::prefix.size());
}

qp_support channel_server::qp_support_for(const vnic_identity& v) {
    qp_support support;
    support.engine = engine_for(v);
    support.local.vnic = v.slot;
    support.local.mac = v.mac;
    support.local.ip_be = htonl(v.ip);
    support.local.ip6 = v.ip6;
    support.limits.gid_table_len = rnic::is_unspecified(v.ip6) ? 1 : 2;
    support.events = {[](void* self, uint64_t client, uint32_t type, uint32_t qp) {
                          static_cast<channel_server*>(self)->raise_event(
                              client, static_cast<proto_event_type>(type), qp);
                      },
                      this};
    const uint32_t path_mtu = path_mtu_for(_config.tenant_mtu);
    support.limits.max_mtu = path_mtu >= 4096   ? IBV_MTU_4096
                             : path_mtu >= 2048 ? IBV_MTU_2048
                             : path_mtu >= 1024 ? IBV_MTU_1024
                             : path_mtu >= 512  ? IBV_MTU_512
                                                : IBV_MTU_256;
    if (_admit) {
        const uint16_t slot = v.slot;
        auto admit = _admit;
        support.admit = [admit, slot](uint32_t remote) { return admit(slot, remote); };
    }
    if (_admit_ipv6) {
        const uint16_t slot = v.slot;
        auto admit = _admit_ipv6;
        support.admit_ipv6 = [admit, slot](const rnic::ipv6_address& remote) {
            return admit(slot, remote);
        };
    }
    return support;
}

bool channel_server::sync(const std::vector<endpoint_config>& vnics, std::string& error) {
    std::vector<uint16_t> unwanted;
    {
        const std::lock_guard lock(_endpoints_mutex);
        for (const auto& [slot, ep] : _endpoints) {
            // Named captures: C++20 lets a lambda capture a structured binding, clang 14
            // (clang-tidy's front end here) does not.
            const bool wanted = std::any_of(
                vnics.begin(), vnics.end(), [&, slot = slot, &spec = ep->spec()](const auto& v) {
                    return v.identity.slot == slot && same_endpoint(v, spec);
                });
            if (!wanted) {
                unwanted.push_back(slot);
            }
        }
    }
    // Removals first, so that a vNIC that moved (new slot, namespace or MAC) frees its names
    // before they are bound again.
    for (const uint16_t slot : unwanted) {
        withdraw(slot);
    }
    std::string errors;
    for (const auto& v : vnics) {
        std::string why;
        if (!serve(v, why)) {
            errors += (errors.empty() ? "" : "; ") + why;
        }
    }
    if (!errors.empty()) {
        error = errors;
        return false;
    }
    return true;
}

bool channel_server::serve(const endpoint_config& vnic, std::string& error) {
    const std::lock_guard changes(_changes_mutex);
    if (!_running) {
        error = "vNIC " + vnic.identity.name + ": the verbs server is not running";
        return false;
    }
    std::unique_ptr<vnic_endpoint> moved;
    vnic_endpoint* kept = nullptr;
    {
        const std::lock_guard lock(_endpoints_mutex);
        const auto it = _endpoints.find(vnic.identity.slot);
        if (it != _endpoints.end() && same_endpoint(vnic, it->second->spec())) {
            kept = it->second.get();
        } else if (it != _endpoints.end()) {
            moved = std::move(it->second);  // its old names go before the new ones are bound
            _endpoints.erase(it);
        }
    }
    if (kept != nullptr) {
        // Limits change in place: lowering one refuses new objects, existing ones stay. Not
        // under _endpoints_mutex: the resources' mutex may be held by a verb waiting for the
        // worker, and the worker's events need _endpoints_mutex. The endpoint stays, as only
        // changes (which _changes_mutex serializes) remove one.
        kept->set_quota(vnic.identity.quota);
        return true;
    }
    if (moved != nullptr) {
        retire(std::move(moved), true);
    }
    auto ep = make_endpoint(vnic, error);
    if (ep == nullptr || !ep->start(error)) {
        return false;
    }
    const std::lock_guard lock(_endpoints_mutex);
    _endpoints[vnic.identity.slot] = std::move(ep);
    return true;
}

void channel_server::withdraw(uint16_t slot) {
    withdraw(slot, true);
}

void channel_server::withdraw(uint16_t slot, bool removed) {
    const std::lock_guard changes(_changes_mutex);
    std::unique_ptr<vnic_endpoint> gone;
    {
        const std::lock_guard lock(_endpoints_mutex);
        const auto it = _endpoints.find(slot);
        if (it == _endpoints.end()) {
            return;
        }
        gone = std::move(it->second);
        _endpoints.erase(it);
    }
    retire(std::move(gone), removed);
}

void channel_server::retire(std::unique_ptr<vnic_endpoint> ep, bool removed) {
    // Out of the map already: events for its clients find nothing from here on, and its
    // thread, which may be waiting for a worker, holds no lock anyone else needs.
    ep->stop();
    const endpoint_report last = ep->report();
    const std::lock_guard lock(_endpoints_mutex);
    add(_retired, last);
    _retired.vnics_removed += removed ? 1 : 0;
}

void channel_server::stop() {
    std::vector<uint16_t> slots;
    {
        const std::lock_guard lock(_endpoints_mutex);
        for (const auto& [slot, ep] : _endpoints) {
            slots.push_back(slot);
        }
    }
    for (const uint16_t slot : slots) {
        withdraw(slot, false);  // jakirod stops: the vNICs are not removed
    }
    const std::lock_guard changes(_changes_mutex);
    _running = false;
}

bool channel_server::adopt(int fd, uint16_t slot) {
    const std::lock_guard lock(_endpoints_mutex);
    const auto it = _endpoints.find(slot);
    if (it == _endpoints.end()) {
        close(fd);
        return false;
    }
    it->second->adopt(fd);
    return true;
}

void channel_server::raise_cq_error(uint64_t client, uint32_t cq_handle) {
    raise_event(client, proto_event_type::cq_err, cq_handle);
}

void channel_server::raise_event(uint64_t client, proto_event_type type, uint64_t handle) {
    const std::lock_guard lock(_endpoints_mutex);
    const auto it = _endpoints.find(vnic_endpoint::client_slot(client));
    if (it != _endpoints.end()) {
        it->second->post_event(client, type, handle);
    }
}

}  // namespace jakiro::verbs
