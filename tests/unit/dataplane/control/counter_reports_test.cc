// `jakiroctl stats`, `qos` and `qps` and /metrics are one table: every sample a scrape serves
// shows in a report, at its family's place, with the same value; every number a report holds is
// one of them (or describes its row); the keys tools read stay where they are; the text shows
// what the JSON shows.

#include "dataplane/control/counter_reports.hh"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dataplane/control/metric_places.hh"
#include "dataplane/control/metrics.hh"
#include "tests/unit/dataplane/control/example_snapshot.hh"

namespace jakiro {
namespace {

const char* name_of(report r) {
    return r == report::stats ? "stats" : r == report::qos ? "qos" : "qps";
}

report_node report_of(report r, const stats_snapshot& s) {
    return r == report::stats ? stats_report(s)
           : r == report::qos ? qos_report(s)
                              : qps_report(s, {});
}

const metric_def& def_of(const std::string& name) {
    for (const auto& def : metric_table()) {
        if (name == def.name) {
            return def;
        }
    }
    throw std::runtime_error("no metric " + name);
}

std::string joined(const std::vector<std::string>& keys) {
    std::string out;
    for (const auto& k : keys) {
        out += (out.empty() ? "" : "/") + k;
    }
    return out;
}

// The node at `keys` (a row's key in brackets), or nullptr.
const report_node* find_path(const report_node& root, const std::vector<std::string>& keys) {
    const report_node* node = &root;
    for (const auto& k : keys) {
        const bool row = k.size() >= 2 && k.front() == '[' && k.back() == ']';
        node = node->find(row ? k.substr(1, k.size() - 2) : k);
        if (node == nullptr) {
            return nullptr;
        }
    }
    return node;
}

struct expected_leaf {
    std::string family;
    double value = 0;
};
using place_map = std::map<std::pair<report, std::string>, expected_leaf>;

// Where every sample /metrics serves should show, and what each place should hold: the sum of
// the samples of its family that land there.
place_map expected_places(const stats_snapshot& s) {
    place_map out;
    for (const auto& family : metric_families(s)) {
        const metric_def& def = def_of(family.name);
        for (const auto& m : family.metric) {
            std::vector<std::string> values;
            for (const auto& label : m.label) {
                values.push_back(label.value);
            }
            const double value = def.type == metric_type::counter ? m.counter.value : m.gauge.value;
            for (const auto& place : def.shown) {
                const auto keys = place_keys(place.path, def.labels, values);
                auto& leaf = out[{place.in, joined(keys)}];
                EXPECT_TRUE(leaf.family.empty() || leaf.family == def.name)
                    << joined(keys) << " is both " << leaf.family << " and " << def.name;
                leaf.family = def.name;
                leaf.value += value;
            }
        }
    }
    return out;
}

// Every number under `node`, by its path (rows in brackets).
void numbers(const report_node& node, std::vector<std::string>& path,
             std::vector<std::pair<std::vector<std::string>, double>>& out) {
    for (const auto& [key, child] : node.children()) {
        path.push_back(node.type() == report_node::kind::array ? "[" + key + "]" : key);
        if (child->type() == report_node::kind::number) {
            out.emplace_back(path, child->number());
        } else {
            numbers(*child, path, out);
        }
        path.pop_back();
    }
}

// What a report says about a row that is no counter: where a rule stands, which worker a row
// is, when the QoS counters were read, the QP listing (one row per QP, as flows are), how many
// engines the QP listing reads.
bool describes_its_row(report r, const std::vector<std::string>& keys) {
    const std::string& first = keys.front();
    const std::string& last = keys.back();
    switch (r) {
        case report::stats:
            return (first == "rules" && (last == "index" || last == "line")) ||
                   (first == "workers" && last == "id");
        case report::qos:
            return last == "time_ns";
        case report::qps:
            return first == "qps" || joined(keys) == "engine/engines";
    }
    return false;
}

TEST(CounterReports, EverySampleAScrapeServesShowsInJakiroctlWithTheSameValue) {
    const stats_snapshot s = full_snapshot();
    const place_map expected = expected_places(s);
    std::map<report, report_node> reports;
    for (const report r : {report::stats, report::qos, report::qps}) {
        reports.emplace(r, report_of(r, s));
    }
    ASSERT_GT(expected.size(), 200u) << "the example snapshot fills every family";
    for (const auto& [where, leaf] : expected) {
        // A row identity may hold '/' (a rule's): look the path up as the table wrote it.
        const report_node* node =
            find_path(reports.at(where.first), place_keys(where.second.c_str(), {}, {}));
        ASSERT_NE(node, nullptr) << leaf.family << " is not in `jakiroctl " << name_of(where.first)
                                 << " --json` at " << where.second;
        EXPECT_EQ(node->type(), report_node::kind::number) << where.second;
        EXPECT_DOUBLE_EQ(node->number(), leaf.value) << leaf.family << " at " << where.second;
    }
}

TEST(CounterReports, EveryFamilyOnMetricsShowsInAReport) {
    for (const auto& family : metric_families(full_snapshot())) {
        const metric_def& def = def_of(family.name);
        const bool info =
            family.name.size() > 5 && family.name.compare(family.name.size() - 5, 5, "_info") == 0;
        EXPECT_TRUE(info || !def.shown.empty())
            << family.name << " is served on /metrics but shown by no jakiroctl report";
        EXPECT_FALSE(info && def.type == metric_type::counter) << family.name;
    }
}

TEST(CounterReports, EveryNumberJakiroctlReportsIsAMetricOrDescribesItsRow) {
    const stats_snapshot s = full_snapshot();
    const place_map expected = expected_places(s);
    for (const report r : {report::stats, report::qos, report::qps}) {
        std::vector<std::string> path;
        std::vector<std::pair<std::vector<std::string>, double>> found;
        numbers(report_of(r, s), path, found);
        ASSERT_FALSE(found.empty()) << name_of(r);
        for (const auto& [keys, value] : found) {
            if (describes_its_row(r, keys)) {
                continue;
            }
            EXPECT_TRUE(expected.count({r, joined(keys)}))
                << "`jakiroctl " << name_of(r) << " --json` has " << joined(keys)
                << ", which no family of the metric table serves on /metrics";
        }
    }
}

uint64_t worker_counter(const worker_snapshot& w, const std::string& key) {
#define JAKIRO_DATAPATH_COUNTER(name) \
    if (key == #name) {               \
        return w.counters.name;       \
    }
#include "dataplane/control/datapath_counters.def"
#undef JAKIRO_DATAPATH_COUNTER
    return ~uint64_t{0};
}

// The keys that tests, perf scripts and the test bed read (tests/integration/, perf/).
TEST(CounterReports, StatsJsonKeepsTheKeysToolsRead) {
    const stats_snapshot s = full_snapshot();
    const YAML::Node j = YAML::Load(render_stats(s, true));
    EXPECT_EQ(j["host"].as<std::string>(), "h1");
    for (const char* key : {"rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_missed",
                            "rx_errors", "tx_errors", "rx_superframes", "tx_superframes"}) {
        EXPECT_TRUE(j["ports"]["uplink"][key].IsScalar()) << key;
    }
    EXPECT_EQ(j["ports"]["uplink"]["rx_packets"].as<uint64_t>(), 1u);
    const YAML::Node t1 = j["vnics"]["t1"];
#define JAKIRO_VNIC_COUNTER(name, field) \
    EXPECT_EQ(t1[#name].as<uint64_t>(), s.vnics[0].name) << #name;
#include "dataplane/control/vnic_counters.def"
#undef JAKIRO_VNIC_COUNTER
    const vnic_bounds& b = s.vnics[0].bounds;
    const std::map<std::string, uint64_t> bounds = {
        {"conntrack_flows", b.flows},
        {"max_flows", b.max_flows},
        {"conntrack_allowance_exceeded", b.flows_refused},
        {"packet_buffers", b.packet_buffers},
        {"max_packet_buffers", b.max_packet_buffers},
        {"buffer_allowance_exceeded", b.buffers_refused},
        {"max_packet_rate", b.max_packet_rate},
        {"packet_rate_exceeded", b.packet_rate_exceeded},
        {"qos_queue_drops", b.qos_queue_drops},
        {"qos_queue_holds", b.qos_queue_holds},
        {"rdma_max_local_work_rate", b.max_local_work_rate},
        {"rdma_local_work_over_allowance", b.local_work_over_allowance},
        {"rdma_qp_visits", b.rdma_qp_visits},
        {"rdma_poller_wakes", b.rdma_poller_wakes},
        {"rdma_sleep_asks", b.rdma_sleep_asks}};
    for (const auto& [key, value] : bounds) {
        EXPECT_EQ(t1[key].as<uint64_t>(), value) << key;
    }
    const verbs::memory_report& m = *s.vnics[0].rdma_memory;
    EXPECT_EQ(t1["rdma_memory"]["mrs"].as<uint64_t>(), m.mrs);
    EXPECT_EQ(t1["rdma_memory"]["mrs_pinned_after_dereg"].as<uint64_t>(), m.mrs_pinned);
    EXPECT_EQ(t1["rdma_memory"]["mappings"].as<uint64_t>(), 41u);
    EXPECT_EQ(t1["rdma_memory"]["descriptors"].as<uint64_t>(), 42u);
    EXPECT_EQ(t1["rdma_memory"]["mappings_share"].as<uint64_t>(), m.share.mappings);
    EXPECT_EQ(t1["rdma_memory"]["refused_mappings"].as<uint64_t>(), m.refused.mappings);
    for (const char* key : {"quota_refusals", "cq_resizes", "cq_entries_moved",
                            "cq_resizes_refused", "mr_bytes", "mr_bytes_pinned_after_dereg"}) {
        EXPECT_TRUE(t1["rdma_memory"][key].IsScalar()) << key;
    }
    const YAML::Node face = j["rdma_faces"]["t1"];
    const auto& f = s.rdma->faces[0];
    EXPECT_EQ(face["refused_over_limit"].as<uint64_t>(), f.counters.refused);
    EXPECT_EQ(face["hello_timeouts"].as<uint64_t>(), f.counters.hello_timeouts);
    EXPECT_EQ(face["rdma_cm"]["ids"].as<uint64_t>(), 2u);
    EXPECT_EQ(face["rdma_cm"]["requests_over_backlog"].as<uint64_t>(), f.cm.requests_over_backlog);
    EXPECT_EQ(face["rdma_cm"]["held_reqs_refused"].as<uint64_t>(), f.cm.held_reqs_refused);
    EXPECT_EQ(face["rdma_cm"]["commands"].as<uint64_t>(), f.cm.commands);
    EXPECT_EQ(face["qp1"]["rx_dropped"].as<uint64_t>(), f.qp1.rx_dropped);
    EXPECT_EQ(j["conntrack"]["created"].as<uint64_t>(), s.conntrack.created);
    EXPECT_EQ(j["conntrack"]["capacity"].as<uint64_t>(), s.conntrack.capacity);
    EXPECT_EQ(j["conntrack"]["classifications"].as<uint64_t>(), s.conntrack.classifications);
    ASSERT_EQ(j["rules"].size(), 2u);
    EXPECT_EQ(j["rules"][0]["direction"].as<std::string>(), "egress");
    EXPECT_EQ(j["rules"][0]["index"].as<uint64_t>(), 0u);
    EXPECT_EQ(j["rules"][0]["line"].as<uint64_t>(), 10u);
    EXPECT_EQ(j["rules"][0]["hits"].as<uint64_t>(), 5u);
    EXPECT_EQ(j["rules"][1]["hits"].as<uint64_t>(), s.rules[1].hits);
    // "overlay" is the host's datapath totals, no more (test_service holds each to a metric).
    std::set<std::string> overlay;
    for (const auto& kv : j["overlay"]) {
        overlay.insert(kv.first.as<std::string>());
    }
    std::set<std::string> datapath;
#define JAKIRO_DATAPATH_COUNTER(name) \
    datapath.insert(#name);           \
    EXPECT_EQ(j["overlay"][#name].as<uint64_t>(), s.datapath.name) << #name;
#include "dataplane/control/datapath_counters.def"
#undef JAKIRO_DATAPATH_COUNTER
    EXPECT_EQ(overlay, datapath);
    for (std::size_t r = 0; r < drop_reason_count; ++r) {
        EXPECT_EQ(j["drops"][std::string(drop_reason_names[r])].as<uint64_t>(), s.drops[r]);
    }
    ASSERT_EQ(j["workers"].size(), 2u);
    EXPECT_EQ(j["workers"][0]["id"].as<unsigned>(), 0u);
    EXPECT_EQ(j["workers"][0]["vnics"][0].as<std::string>(), "t1");
    for (const char* key : {"encapsulated", "decapsulated", "handed_fabric", "handed_port",
                            "handed_roce", "taken_handoffs", "idle_sleeps", "busy_polls"}) {
        EXPECT_EQ(j["workers"][1][key].as<uint64_t>(), worker_counter(s.workers[1], key)) << key;
    }
    EXPECT_EQ(j["workers"][1]["from_tenant_pkts"].as<uint64_t>(), s.workers[1].from_tenant_packets);
    EXPECT_EQ(j["workers"][1]["to_tenant_pkts"].as<uint64_t>(), s.workers[1].to_tenant_packets);
}

TEST(CounterReports, QosJsonIsAListOfVnicsWithTheirClasses) {
    const stats_snapshot s = full_snapshot();
    const YAML::Node j = YAML::Load(render_qos(s, true));
    ASSERT_TRUE(j.IsSequence());
    ASSERT_EQ(j.size(), 1u);
    EXPECT_EQ(j[0]["vnic"].as<std::string>(), "t1");
    EXPECT_EQ(j[0]["time_ns"].as<uint64_t>(), s.time_ns);
    EXPECT_EQ(j[0]["rate_bps"].as<uint64_t>(), 100000000u);
    ASSERT_EQ(j[0]["classes"].size(), 2u);
    for (std::size_t c = 0; c < 2; ++c) {
        const YAML::Node k = j[0]["classes"][c];
        const qos_class_snapshot& e = s.qos[0].classes[c];
        EXPECT_EQ(k["class"].as<std::string>(), c == 0 ? "rdma" : "tcp");
        EXPECT_EQ(k["weight"].as<uint64_t>(), e.weight);
        EXPECT_EQ(k["share_bps"].as<uint64_t>(), e.share_bps);
        EXPECT_EQ(k["sent_bytes"].as<uint64_t>(), e.sent.bytes);
        EXPECT_EQ(k["sent_packets"].as<uint64_t>(), e.sent.packets);
        EXPECT_EQ(k["received_bytes"].as<uint64_t>(), e.received.bytes);
        EXPECT_EQ(k["grants"].as<uint64_t>(), s.qos[0].grants);
        EXPECT_EQ(k["busy_grants"].as<uint64_t>(), e.busy_grants);
        EXPECT_EQ(k["tail_drops"].as<uint64_t>(), e.tail_drops);
        EXPECT_EQ(k["ce_marked"].as<uint64_t>(), e.received.ce_marked);
        EXPECT_EQ(k["ingress_dropped"].as<uint64_t>(), e.received.dropped);
        EXPECT_EQ(k["cnps"].as<uint64_t>(), e.received.cnps);
    }
    EXPECT_EQ(j[0]["classes"][0]["rdma_waits"].as<uint64_t>(), s.qos[0].rdma_waits);
    EXPECT_EQ(j[0]["classes"][0]["rdma_granted"].as<uint64_t>(), s.qos[0].classes[0].rdma_granted);
}

TEST(CounterReports, QpsJsonKeepsItsEngineEndpointsAndReserve) {
    const stats_snapshot s = full_snapshot();
    const YAML::Node j = YAML::Load(render_qps(s, "", true));
    ASSERT_EQ(j["qps"].size(), 1u);
    EXPECT_EQ(j["qps"][0]["qpn"].as<uint64_t>(), 17u);
    EXPECT_EQ(j["qps"][0]["state"].as<std::string>(), "RTS");
    EXPECT_EQ(j["qps"][0]["packets_sent"].as<uint64_t>(), s.qps[0].packets_sent);
    EXPECT_EQ(j["engine"]["engines"].as<unsigned>(), 2u);
    EXPECT_EQ(j["engine"]["received"].as<uint64_t>(), s.engine->received);
    EXPECT_EQ(j["engine"]["qps_revoked"].as<uint64_t>(), s.engine->qps_revoked);
    EXPECT_EQ(j["engine"]["drops"][rnic::engine_drop_name(rnic::engine_drop{})].as<uint64_t>(),
              s.engine->drops[0]);
    EXPECT_EQ(j["endpoints"]["refused_foreign"].as<uint64_t>(),
              s.rdma->stats.faces.refused_foreign);
    EXPECT_EQ(j["endpoints"]["hello_timeouts"].as<uint64_t>(), s.rdma->stats.faces.hello_timeouts);
    EXPECT_EQ(j["endpoints"]["vnics"]["t1"]["rdma_cm"]["held_reqs_refused"].as<uint64_t>(),
              s.rdma->faces[0].cm.held_reqs_refused);
    EXPECT_EQ(j["rdma_reserve"]["mappings"]["capacity"].as<uint64_t>(), s.rdma->capacity.mappings);
    EXPECT_EQ(j["rdma_reserve"]["mappings"]["held"].as<uint64_t>(), s.rdma->held.mappings);
    EXPECT_TRUE(j["rdma_reserve"]["descriptors"]["overcommitted"].IsScalar());
    EXPECT_EQ(j["vnics"]["t1"]["rdma_memory"]["mrs"].as<uint64_t>(), s.vnics[0].rdma_memory->mrs);

    const YAML::Node other = YAML::Load(render_qps(s, "t2", true));
    EXPECT_EQ(other["qps"].size(), 0u);
    EXPECT_FALSE(other["vnics"]["t1"].IsDefined()) << "--vnic t2 shows t1's memory";
    EXPECT_FALSE(other["endpoints"]["vnics"]["t1"].IsDefined()) << "--vnic t2 shows t1's face";
}

TEST(CounterReports, StatsTextShowsEveryCounterTheJsonHas) {
    const stats_snapshot s = full_snapshot();
    const std::string text = render_stats(s, false);
    const report_node root = stats_report(s);
    for (const char* section : {"ports", "vnics", "rdma_faces", "workers", "conntrack", "overlay",
                                "daemon", "sealed_overlay", "restarts", "last_restart"}) {
        std::vector<std::string> path;
        std::vector<std::pair<std::vector<std::string>, double>> found;
        numbers(*root.find(section), path, found);
        ASSERT_FALSE(found.empty()) << section;
        for (const auto& [keys, value] : found) {
            // A row's counters are named without the row (its name heads a column).
            EXPECT_NE(text.find(keys.back()), std::string::npos)
                << section << ": " << joined(keys) << " is not in `jakiroctl stats`";
        }
    }
    // Scripts read a host total as a line of two words, its name and its value.
    std::istringstream lines(text);
    bool seen = false;
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string name, value, more;
        if ((words >> name >> value) && !(words >> more) && name == "busy_polls") {
            EXPECT_EQ(value, std::to_string(s.datapath.busy_polls));
            seen = true;
            break;
        }
    }
    EXPECT_TRUE(seen) << text;
    EXPECT_NE(text.find("blue/default egress[0] tcp any to 0.0.0.0/0"), std::string::npos) << text;
}

TEST(CounterReports, QosTextShowsEachClassInAColumn) {
    const std::string text = render_qos(full_snapshot(), false);
    EXPECT_NE(text.find("vnic t1: rate 100 Mbit/s"), std::string::npos) << text;
    for (const char* word : {"rdma", "tcp", "weight", "share_bps", "sent_bytes", "cnps"}) {
        EXPECT_NE(text.find(word), std::string::npos) << word << "\n" << text;
    }
    EXPECT_NE(render_qos(stats_snapshot{}, false).find("no vNIC has a qos rate"),
              std::string::npos);
}

TEST(MetricPlaces, PutTheSamplesLabelsIntoThePath) {
    EXPECT_EQ(place_keys("vnics/{vnic}/{direction:ingress=to_tenant,egress=from_tenant}_packets",
                         {"direction", "vnic"}, {"egress", "t1"}),
              (std::vector<std::string>{"vnics", "t1", "from_tenant_packets"}));
    EXPECT_EQ(place_keys("ports/{port}/{direction}_bytes", {"direction", "port"}, {"rx", "up"}),
              (std::vector<std::string>{"ports", "up", "rx_bytes"}));
    // A row's identity keeps its '/' and its brackets.
    EXPECT_EQ(place_keys("rules/[{vpc}/{group}]/hits", {"group", "vpc"}, {"web", "blue"}),
              (std::vector<std::string>{"rules", "[blue/web]", "hits"}));
}

TEST(MetricPlaces, SumTheSamplesOfALabelThePlaceLeavesOut) {
    const stats_snapshot s = full_snapshot();
    const report_node root = stats_report(s);
    EXPECT_EQ(
        root.find("overlay")->find("idle_sleeps")->number(),
        static_cast<double>(s.workers[0].counters.idle_sleeps + s.workers[1].counters.idle_sleeps));
}

}  // namespace
}  // namespace jakiro
