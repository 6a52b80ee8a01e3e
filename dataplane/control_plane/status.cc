#include "dataplane/control_plane/status.hh"

#include <ctime>
#include <sstream>

#include "dataplane/control/json_writer.hh"

namespace jakiro::control_plane {

namespace {

std::string utc_text(std::chrono::system_clock::time_point at) {
    const std::time_t seconds = std::chrono::system_clock::to_time_t(at);
    std::tm tm{};
    gmtime_r(&seconds, &tm);
    char text[32];
    std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return text;
}

uint64_t seconds_since(std::chrono::system_clock::time_point at) {
    const auto elapsed = std::chrono::system_clock::now() - at;
    return static_cast<uint64_t>(
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(elapsed).count()));
}

std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& name : names) {
        out += (out.empty() ? "" : ", ") + name;
    }
    return out;
}

}  // namespace

std::string render_control_plane_text(const control_plane_status& s) {
    std::ostringstream out;
    out << "control plane: etcd " << joined(s.endpoints) << " ";
    if (s.connected) {
        out << "connected since " << utc_text(s.since) << ", revision " << s.revision_seen;
    } else {
        out << "DISCONNECTED (down) since " << utc_text(s.since) << " (" << seconds_since(s.since)
            << " s), last revision " << s.revision_seen << "; forwarding with the last state";
        if (!s.last_error.empty()) {
            out << "\n  last error: " << s.last_error;
        }
    }
    out << "\n  state in force: revision " << s.revision_applied << ", " << s.records
        << " records (" << s.record_bytes << " bytes), " << s.local_vnics << " local vNICs, "
        << s.peers << " remote vNICs\n"
        << "  VPCs followed: " << joined(s.vpcs) << "\n";
    if (s.legacy_keys) {
        out << "  vNIC keys: per-VPC and legacy (the cluster is not migrated yet: "
               "jakiroctl --etcd URL migrate)\n";
    }
    if (!s.stale_hosts.empty()) {
        out << "  stale hosts (lease expired; their vNICs stay reachable): "
            << joined(s.stale_hosts) << "\n";
    }
    if (!s.unplaced_vnics.empty()) {
        out << "  vNICs on unregistered hosts: " << joined(s.unplaced_vnics) << "\n";
    }
    if (!s.waiting_vnics.empty()) {
        out << "  local vNICs waiting for their port: " << joined(s.waiting_vnics) << "\n";
    }
    for (const auto& reason : s.rejected) {
        out << "  refused record " << reason << "\n";
    }
    return out.str();
}

void write_control_plane_json(json_writer& out, const control_plane_status& s) {
    out.begin_object("control_plane")
        .value("kind", "etcd")
        .value("endpoints", joined(s.endpoints))
        .value("connected", s.connected)
        .value("since", utc_text(s.since))
        .value("since_s", seconds_since(s.since))
        .value("last_error", s.last_error)
        .value("revision_seen", static_cast<uint64_t>(s.revision_seen))
        .value("revision_applied", static_cast<uint64_t>(s.revision_applied))
        .value("records", uint64_t{s.records})
        .value("record_bytes", uint64_t{s.record_bytes})
        .value("local_vnics", uint64_t{s.local_vnics})
        .value("peers", uint64_t{s.peers})
        .value("legacy_keys", s.legacy_keys)
        .value("views_applied", s.views_applied)
        .value("patched_publications", s.patched_publications)
        .value("apply_failures", s.apply_failures);
    auto list = [&](const char* key, const std::vector<std::string>& names) {
        out.begin_array(key);
        for (const auto& name : names) {
            out.value({}, name);
        }
        out.end_array();
    };
    list("vpcs", s.vpcs);
    out.begin_object("group_members");
    for (const auto& [group, count] : s.group_members) {
        out.value(group, uint64_t{count});
    }
    out.end_object();
    list("stale_hosts", s.stale_hosts);
    list("unplaced_vnics", s.unplaced_vnics);
    list("waiting_vnics", s.waiting_vnics);
    list("rejected", s.rejected);
    out.begin_array("publish_latency_us");
    for (const auto us : s.publish_latency_us) {
        out.value({}, us);
    }
    out.end_array().end_object();
}

}  // namespace jakiro::control_plane
