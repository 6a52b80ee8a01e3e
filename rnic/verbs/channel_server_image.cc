// channel_server across a restart (channel_server.hh; docs/restart.md): every vNIC's face into
// the state image's rdma_faces section, and back in the successor.
//
// The section: the server's client-id counter, then per face its configuration (so that the
// successor serves it whatever its own configuration says, and start() withdraws it as a
// removed vNIC if it is gone) and the face as vnic_endpoint::save wrote it.

#include <type_traits>

#include "rnic/verbs/channel_server.hh"

namespace jakiro::verbs {

namespace {

constexpr uint32_t max_listed_faces = 1u << 16;

static_assert(std::is_trivially_copyable_v<vnic_quota>);

void write_spec(handover::image_writer& w, const endpoint_config& spec) {
    const vnic_identity& v = spec.identity;
    w.string(v.name);
    w.pod(v.mac);
    w.u32(v.ip);
    w.u16(v.slot);
    w.pod(v.quota);
    w.u8(v.engine);
    w.pod(v.ip6);
    w.string(spec.netns);
    w.string(spec.port);
    w.boolean(spec.own_namespace);
}

endpoint_config read_spec(handover::section_reader& r) {
    endpoint_config spec;
    vnic_identity& v = spec.identity;
    v.name = r.string();
    v.mac = r.pod<std::array<uint8_t, 6>>();
    v.ip = r.u32();
    v.slot = r.u16();
    v.quota = r.pod<vnic_quota>();
    v.engine = r.u8();
    if (r.version() >= 2) {  // version 1 (before IPv6 GIDs): the vNIC had no IPv6 address
        v.ip6 = r.pod<rnic::ipv6_address>();
    }
    spec.netns = r.string();
    spec.port = r.string();
    spec.own_namespace = r.boolean();
    return spec;
}

}  // namespace

std::vector<vnic_endpoint*> channel_server::served_endpoints() const {
    const std::lock_guard lock(_endpoints_mutex);
    std::vector<vnic_endpoint*> out;
    for (const auto& [slot, ep] : _endpoints) {
        out.push_back(ep.get());
    }
    return out;
}

// Not under _endpoints_mutex: a face's thread may be waiting for a worker whose events need it
// (as retire() says); only changes remove an endpoint, and _changes_mutex holds them off.
void channel_server::freeze() {
    const std::lock_guard changes(_changes_mutex);
    for (vnic_endpoint* ep : served_endpoints()) {
        ep->freeze();
    }
}

bool channel_server::thaw(std::string& error) {
    const std::lock_guard changes(_changes_mutex);
    bool ok = true;
    for (vnic_endpoint* ep : served_endpoints()) {
        std::string why;
        if (ep->frozen() && !ep->thaw(why)) {
            error += (error.empty() ? "" : "; ") + why;
            ok = false;
        }
    }
    return ok;
}

bool channel_server::save(handover::image_writer& w, std::string& error) {
    const std::lock_guard changes(_changes_mutex);
    const std::vector<vnic_endpoint*> faces = served_endpoints();
    w.begin(handover::section_kind::rdma_faces);
    w.u64(_client_ids.load(std::memory_order_relaxed));
    w.u32(static_cast<uint32_t>(faces.size()));
    bool ok = true;
    for (vnic_endpoint* ep : faces) {
        write_spec(w, ep->spec());
        if (!ep->save(w, error)) {
            ok = false;
            break;
        }
    }
    w.end();
    return ok;
}

void channel_server::hand_over() {
    const std::lock_guard changes(_changes_mutex);
    std::map<uint16_t, std::unique_ptr<vnic_endpoint>> gone;
    {
        const std::lock_guard lock(_endpoints_mutex);
        gone.swap(_endpoints);
    }
    for (auto& [slot, ep] : gone) {
        ep->hand_over();
    }
}

bool channel_server::restore(handover::image_reader& image, std::string& error) {
    const std::lock_guard changes(_changes_mutex);
    handover::section_reader r = image.section(handover::section_kind::rdma_faces);
    const uint64_t client_ids = r.u64();
    uint64_t seen = _client_ids.load(std::memory_order_relaxed);
    while (r.ok() && seen < client_ids &&
           !_client_ids.compare_exchange_weak(seen, client_ids, std::memory_order_relaxed)) {
    }
    std::map<uint16_t, std::unique_ptr<vnic_endpoint>> restored;
    const uint32_t faces = r.count(max_listed_faces);
    for (uint32_t i = 0; i < faces && r.ok(); ++i) {
        const endpoint_config spec = read_spec(r);
        if (!r.ok()) {
            break;
        }
        if (restored.contains(spec.identity.slot) || serves(spec.identity.slot)) {
            r.fail("state section 'rdma_faces': two faces in slot " +
                   std::to_string(spec.identity.slot));
            break;
        }
        std::string why;
        auto ep = make_endpoint(spec, why, &r);
        if (ep == nullptr) {
            if (r.ok()) {
                r.fail(why);
            }
            break;
        }
        restored.emplace(spec.identity.slot, std::move(ep));
    }
    if (r.ok() && !r.done()) {
        r.fail("state section 'rdma_faces' has more than this binary reads");
    }
    if (r.ok()) {
        for (auto& [slot, ep] : restored) {
            std::string why;
            if (!ep->start(why)) {
                r.fail(why);
                break;
            }
        }
    }
    if (!r.ok()) {
        // All or nothing: the predecessor goes on serving what it froze.
        for (auto& [slot, ep] : restored) {
            ep->freeze();
            ep->hand_over();
        }
        error = image.error();
        return false;
    }
    const std::lock_guard lock(_endpoints_mutex);
    for (auto& [slot, ep] : restored) {
        _endpoints[slot] = std::move(ep);
    }
    return true;
}

}  // namespace jakiro::verbs
