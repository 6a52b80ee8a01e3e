#include "dataplane/control/counter_reports.hh"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rte_byteorder.h>

#include <cstdio>
#include <sstream>
#include <string_view>

#include "dataplane/config/host_config.hh"
#include "dataplane/control/metric_places.hh"
#include "dataplane/control/report_text.hh"

namespace jakiro {

namespace {

double num(uint64_t value) {
    return static_cast<double>(value);
}

// A rule's row in `stats`: the identity its hits family names it by (metric_table.cc).
std::string rule_identity(const rule_snapshot& r) {
    return r.vpc + "/" + r.group + "/" + r.direction + "/" + std::to_string(r.index);
}

// A QP's IPv6 peer as `jakiroctl qps` prints it (RFC 5952 form).
std::string ipv6_text(const rnic::ipv6_address& a) {
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, a.data(), text, sizeof(text));
    return text;
}

const char* qp_state_name(uint8_t state) {
    static const char* states[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return state < 7 ? states[state] : "?";
}

const char* qp_type_name(uint8_t type) {
    return type == IBV_QPT_UD ? "UD" : type == IBV_QPT_UC ? "UC" : "RC";
}

// What a reason's number means, after it in `stats`; reasons nothing was dropped for are left
// out of the text (the JSON has them all).
bool drop_note(std::string_view reason, double value, std::string& note) {
    for (std::size_t r = 0; r < drop_reason_count; ++r) {
        if (reason == drop_reason_names[r]) {
            note = "  (" + std::string(drop_reason_texts[r]) + ")";
        }
    }
    return value != 0;
}

}  // namespace

report_node stats_report(const stats_snapshot& snapshot) {
    report_node root;
    root.set("host", snapshot.host);
    // Every section is there even when empty (tools index them); the order people read them in.
    for (const char* section : {"daemon", "ports", "vnics", "rdma_faces", "conntrack", "rules",
                                "overlay", "drops", "workers"}) {
        root.at(section);
    }
    // What describes a row and is no counter: a rule's match, a worker's vNICs.
    report_node& rules = root.at("rules").as_array();
    for (const auto& r : snapshot.rules) {
        rules.row(rule_identity(r))
            .set("vpc", r.vpc)
            .set("group", r.group)
            .set("direction", r.direction)
            .set("index", num(r.index))
            .set("line", num(r.line))
            .set("proto", r.proto)
            .set("ports", r.ports)
            .set("remote", r.remote);
    }
    report_node& workers = root.at("workers").as_array();
    for (const auto& w : snapshot.workers) {
        workers.row(std::to_string(w.id)).set("id", num(w.id)).set_strings("vnics", w.vnics);
    }
    place_samples(report::stats, snapshot, root);
    return root;
}

report_node qos_report(const stats_snapshot& snapshot) {
    report_node root;
    root.as_array();
    for (const auto& v : snapshot.qos) {
        // When the counters were read, on jakirod's monotonic clock: a rate is the difference
        // of two reports over the difference of their times, however long the client took.
        report_node& row =
            root.row(v.name).set("vnic", v.name).set("time_ns", num(snapshot.time_ns));
        report_node& classes = row.at("classes").as_array();
        for (const auto& c : v.classes) {
            const char* name = qos::class_name(c.cls);
            classes.row(name).set("class", name);
        }
    }
    place_samples(report::qos, snapshot, root);
    return root;
}

report_node qps_report(const stats_snapshot& snapshot, std::string_view vnic) {
    report_node root;
    report_node& qps = root.at("qps").as_array();
    for (const auto& q : snapshot.qps) {
        const std::string name =
            q.vnic < snapshot.slot_names.size() ? snapshot.slot_names[q.vnic] : "?";
        if (!vnic.empty() && name != vnic) {
            continue;
        }
        // One row per QP (a listing, as flows are): the per-vNIC totals are the table's.
        report_node& row = qps.row(std::to_string(qps.children().size()));
        row.set("vnic", name)
            .set("worker", num(snapshot.worker_of(q.vnic)))  // whose engine runs it
            .set("qpn", num(q.qpn))
            .set("type", qp_type_name(q.type))
            .set("state", qp_state_name(q.state))
            .set("remote", rnic::is_unspecified(q.remote_ip6)
                               ? format_ipv4(rte_be_to_cpu_32(q.remote_ip_be))
                               : ipv6_text(q.remote_ip6))
            .set("remote_qpn", num(q.remote_qpn))
            .set("next_psn", num(q.next_psn))
            .set("una_psn", num(q.una_psn))
            .set("expected_psn", num(q.expected_psn));
#define JAKIRO_QP_COUNTER(counter) row.set(#counter, num(q.counter));
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
        row.set("rate_bps", num(q.rate_bps));
    }
    report_node& engine = root.at("engine");
    if (snapshot.engine) {
        engine.set("engines", num(snapshot.engine->engines));
    }
    report_node& endpoints = root.at("endpoints");
    if (snapshot.rdma) {
        endpoints.at("vnics");
        report_node& reserve = root.at("rdma_reserve");
        for (const auto res : {verbs::host_resource::mappings, verbs::host_resource::descriptors}) {
            const auto& r = *snapshot.rdma;
            reserve.at(res == verbs::host_resource::mappings ? "mappings" : "descriptors")
                .set_flag("overcommitted", r.demand[res] > r.capacity[res]);
        }
    }
    root.at("vnics");
    place_samples(report::qps, snapshot, root, vnic);
    return root;
}

std::string render_stats(const stats_snapshot& snapshot, bool json) {
    const report_node root = stats_report(snapshot);
    if (json) {
        return root.json();
    }
    std::ostringstream text;
    for (const auto& [name, section] : root.children()) {
        if (section->type() == report_node::kind::text || section->children().empty()) {
            continue;
        }
        if (name == "rules") {
            text << "security-group rules                                   hits\n";
            for (const auto& entry : section->children()) {
                const report_node& rule = *entry.second;
                auto at = [&rule](const char* key) {
                    const report_node* leaf = rule.find(key);
                    return leaf != nullptr ? leaf_text(*leaf) : std::string("-");
                };
                const bool ingress = at("direction") == "ingress";
                char line[256];
                std::snprintf(line, sizeof(line), "  %s/%s %s[%s] %s %s %s %s%8s\n",
                              at("vpc").c_str(), at("group").c_str(), at("direction").c_str(),
                              at("index").c_str(), at("proto").c_str(), at("ports").c_str(),
                              ingress ? "from" : "to", at("remote").c_str(), at("hits").c_str());
                text << line;
            }
        } else if (name == "drops") {
            write_list(text, "drops by reason", *section, drop_note);
        } else if (name == "workers") {
            write_columns(text, "workers", *section, [](std::string_view id, const report_node&) {
                return "worker " + std::string(id);
            });
        } else if (section->children().front().second->type() == report_node::kind::object) {
            write_columns(text, name, *section);
        } else {
            write_list(text, name, *section);
        }
    }
    return text.str();
}

std::string render_qos(const stats_snapshot& snapshot, bool json) {
    const report_node root = qos_report(snapshot);
    if (json) {
        return root.json();
    }
    std::ostringstream text;
    for (const auto& [name, row] : root.children()) {
        const report_node* rate = row->find("rate_bps");
        text << "vnic " << name << ": rate "
             << (rate != nullptr ? static_cast<double>(rate->number()) / 1e6 : 0.0) << " Mbit/s\n";
        if (const report_node* classes = row->find("classes")) {
            write_columns(text, "  class", *classes);
        }
    }
    if (root.children().empty()) {
        text << "no vNIC has a qos rate (vnics[].qos in the host YAML)\n";
    }
    return text.str();
}

std::string render_qps(const stats_snapshot& snapshot, const std::string& vnic, bool json) {
    if (json) {
        return qps_report(snapshot, vnic).json();
    }
    // The text's lines are read by scripts ("engine: received N, ..."): their words stay.
    std::ostringstream text;
    text << "vnic     qpn      type state remote            rqpn     next-psn una-psn  exp-psn  "
            "pkts-out   pkts-in    retrans  timeouts naks-in naks-out rnr-in rnr-out dropped\n";
    for (const auto& q : snapshot.qps) {
        const std::string name =
            q.vnic < snapshot.slot_names.size() ? snapshot.slot_names[q.vnic] : "?";
        if (!vnic.empty() && name != vnic) {
            continue;
        }
        const std::string remote = rnic::is_unspecified(q.remote_ip6)
                                       ? format_ipv4(rte_be_to_cpu_32(q.remote_ip_be))
                                       : ipv6_text(q.remote_ip6);
        char line[320];
        std::snprintf(line, sizeof(line),
                      "%-8s 0x%06x %-4s %-5s %-17s 0x%06x 0x%06x 0x%06x 0x%06x %10lu %10lu %8lu "
                      "%8lu %7lu %8lu %6lu %7lu %7lu\n",
                      name.c_str(), q.qpn, qp_type_name(q.type), qp_state_name(q.state),
                      remote.c_str(), q.remote_qpn, q.next_psn, q.una_psn, q.expected_psn,
                      q.packets_sent, q.packets_received, q.retransmitted, q.timeouts,
                      q.naks_received, q.naks_sent, q.rnr_naks_received, q.rnr_naks_sent,
                      q.messages_dropped);
        text << line;
    }
    text << "engine:";
    if (snapshot.engine) {
        // Summed over the engines, one per worker; the engine count goes last.
        const engine_snapshot& c = *snapshot.engine;
        text << " received " << c.received << ", sent " << c.sent << ", doorbells " << c.doorbells
             << ", policy rechecks " << c.rechecks << ", QPs revoked " << c.qps_revoked << " ("
             << c.engines << (c.engines == 1 ? " engine)" : " engines)");
        for (std::size_t d = 0; d < static_cast<std::size_t>(rnic::engine_drop::count); ++d) {
            const auto reason = static_cast<rnic::engine_drop>(d);
            if (c.drops[d] > 0) {
                text << "\n  drop " << rnic::engine_drop_name(reason) << ": " << c.drops[d] << " ("
                     << rnic::engine_drop_text(reason) << ")";
            }
        }
    }
    text << "\n";
    if (snapshot.rdma) {
        const verbs::channel_stats& v = snapshot.rdma->stats;
        text << "endpoints: " << snapshot.rdma->clients << " clients, accepted " << v.faces.accepted
             << ", refused over limit " << v.faces.refused << ", refused foreign "
             << v.faces.refused_foreign << ", hello timeouts " << v.faces.hello_timeouts
             << ", bad requests " << v.faces.bad_requests << ", vNICs removed " << v.vnics_removed
             << "\n";
        for (const auto& r : snapshot.rdma->faces) {
            if (vnic.empty() || r.name == vnic) {
                text << "rdma face " << r.name << ": clients " << r.clients << "/"
                     << r.quota.max_contexts << ", rdma_cm ids " << r.cm_ids << "/"
                     << r.quota.max_cm_ids << " (refused " << r.cm.ids_refused
                     << "), requests over backlog " << r.cm.requests_over_backlog
                     << ", held REQs refused " << r.cm.held_reqs_refused << ", QP1 drops rx "
                     << r.qp1.rx_dropped << " tx " << r.qp1.tx_dropped << "\n";
            }
        }
        text << "rdma_cm: " << v.cm_commands << " commands (" << v.cm_bad_commands
             << " refused), MADs sent " << v.cm_mads_sent << ", received " << v.cm_mads_received
             << ", dropped " << v.cm_mads_dropped << ", retransmitted " << v.cm_retransmissions
             << ", timeouts " << v.cm_timeouts << ", REQs rejected by security groups "
             << v.cm_rejected_by_policy << ", with no listener " << v.cm_rejected_no_listener
             << ", forged REQs " << v.cm_mads_forged << "\n";
    }
    for (const auto& v : snapshot.vnics) {
        if (!v.rdma_memory || (!vnic.empty() && v.name != vnic)) {
            continue;
        }
        const verbs::memory_report& m = *v.rdma_memory;
        text << "memory " << v.name << ": " << m.mrs << " MRs (" << m.mrs_pinned
             << " pinned after dereg), " << m.held.mappings << "/" << m.share.mappings
             << " mappings, " << m.held.descriptors << "/" << m.share.descriptors
             << " descriptors, refused " << m.refused.mappings + m.refused.descriptors
             << " at the host reserve, " << m.quota_refusals << " over quota, " << m.cq_resizes
             << " CQ resizes\n";
    }
    return text.str();
}

}  // namespace jakiro
