// The metric table and the Prometheus families rendered from it: every family is served with
// the labels the table names, in the table's order; families of parts the daemon does not run
// are left out; and a few readers pick the counter their name promises.

#include "dataplane/control/metric_table.hh"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <string>

#include "dataplane/control/metrics.hh"
#include "dataplane/control/restart_report.hh"
#include "tests/unit/dataplane/control/example_snapshot.hh"

namespace jakiro {
namespace {

const metric_def& def_of(const std::string& name) {
    const auto& table = metric_table();
    const auto it =
        std::find_if(table.begin(), table.end(), [&](const auto& d) { return d.name == name; });
    if (it == table.end()) {
        throw std::runtime_error("no metric " + name);
    }
    return *it;
}

std::vector<metric_sample> samples_of(const std::string& name, const stats_snapshot& s) {
    std::vector<metric_sample> out;
    def_of(name).read(s, out);
    return out;
}

double value_of(const std::string& name, const std::vector<std::string>& labels,
                const stats_snapshot& s) {
    for (const auto& sample : samples_of(name, s)) {
        if (sample.labels == labels) {
            return sample.value;
        }
    }
    ADD_FAILURE() << name << " has no sample for those labels";
    return -1;
}

TEST(MetricTable, EachOverlayPeerShowsItsEpochsAndDrops) {
    const stats_snapshot s = full_snapshot();
    EXPECT_EQ(value_of("jakiro_overlay_sa_epoch", {"198.18.0.2", "required", "tx"}, s), 1800000000);
    EXPECT_EQ(value_of("jakiro_overlay_auth_failed_total", {"198.18.0.2", "required"}, s), 3);
    stats_snapshot plain;
    std::vector<metric_sample> none;
    EXPECT_FALSE(def_of("jakiro_overlay_auth_failed_total").read(plain, none));
}

TEST(MetricTable, NamesAreUniqueValidAndCountersEndInTotal) {
    const std::regex valid("[a-zA-Z_:][a-zA-Z0-9_:]*");
    const std::regex label("[a-zA-Z_][a-zA-Z0-9_]*");
    std::set<std::string> seen;
    for (const auto& def : metric_table()) {
        const std::string name = def.name;
        EXPECT_TRUE(seen.insert(name).second) << name << " twice";
        EXPECT_TRUE(std::regex_match(name, valid)) << name;
        EXPECT_EQ(name.rfind("jakiro_", 0), 0u) << name;
        const bool total = name.size() > 6 && name.substr(name.size() - 6) == "_total";
        EXPECT_EQ(total, def.type == metric_type::counter) << name;
        EXPECT_FALSE(std::string(def.help).empty()) << name;
        for (const char* l : def.labels) {
            EXPECT_TRUE(std::regex_match(l, label)) << name << " label " << l;
        }
    }
}

TEST(MetricTable, EveryFamilyIsServedWithTheLabelsItNames) {
    const stats_snapshot s = full_snapshot();
    const auto families = metric_families(s);
    const auto& table = metric_table();
    ASSERT_EQ(families.size(), table.size());
    for (std::size_t i = 0; i < table.size(); ++i) {
        const auto& def = table[i];
        const auto& family = families[i];
        EXPECT_EQ(family.name, def.name);
        EXPECT_EQ(family.help, def.help);
        EXPECT_FALSE(family.metric.empty()) << def.name << " has no sample";
        for (const auto& m : family.metric) {
            ASSERT_EQ(m.label.size(), def.labels.size()) << def.name;
            for (std::size_t l = 0; l < m.label.size(); ++l) {
                EXPECT_EQ(m.label[l].name, def.labels[l]) << def.name;
            }
        }
        // The readers give exactly one value per label name (none dropped, none spare).
        for (const auto& sample : samples_of(def.name, s)) {
            EXPECT_EQ(sample.labels.size(), def.labels.size()) << def.name;
        }
    }
}

TEST(MetricTable, LeavesOutTheFamiliesOfPartsTheDaemonDoesNotRun) {
    stats_snapshot s = full_snapshot();
    s.engine.reset();
    s.rdma.reset();
    std::set<std::string> served;
    for (const auto& f : metric_families(s)) {
        served.insert(f.name);
    }
    for (const char* engine_only : {"jakiro_rdma_engine_packets_total", "jakiro_rdma_drops_total",
                                    "jakiro_rdma_doorbells_total"}) {
        EXPECT_FALSE(served.count(engine_only)) << engine_only;
    }
    for (const char* faces_only : {"jakiro_rdma_clients", "jakiro_rdma_mrs",
                                   "jakiro_rdma_host_capacity", "jakiro_rdma_cm_refused_total"}) {
        EXPECT_FALSE(served.count(faces_only)) << faces_only;
    }
    // The per-vNIC QP totals stay: a host without engines still has vNICs.
    EXPECT_TRUE(served.count("jakiro_rdma_naks_total"));
    EXPECT_TRUE(served.count("jakiro_vnic_packets_total"));
}

TEST(MetricTable, IngressIsToTheTenantAndEgressFromIt) {
    const stats_snapshot s = full_snapshot();
    EXPECT_EQ(value_of("jakiro_vnic_packets_total", {"ingress", "t1"}, s), 11);
    EXPECT_EQ(value_of("jakiro_vnic_packets_total", {"egress", "t1"}, s), 12);
    EXPECT_EQ(value_of("jakiro_sg_allowed_total", {"ingress", "t1"}, s), 21);
    EXPECT_EQ(value_of("jakiro_sg_allowed_total", {"egress", "t1"}, s), 22);
    EXPECT_EQ(value_of("jakiro_sg_denied_total", {"ingress", "t1"}, s), 23);
    EXPECT_EQ(value_of("jakiro_sg_denied_total", {"egress", "t1"}, s), 24);
}

TEST(MetricTable, ReadsEachSampleFromItsOwnCounter) {
    const stats_snapshot s = full_snapshot();
    EXPECT_EQ(value_of("jakiro_port_packets_total", {"rx", "uplink"}, s), 1);
    EXPECT_EQ(value_of("jakiro_port_bytes_total", {"tx", "uplink"}, s), 4);
    EXPECT_EQ(value_of("jakiro_port_missed_total", {"uplink"}, s), 5);
    EXPECT_EQ(value_of("jakiro_port_errors_total", {"tx", "uplink"}, s), 7);
    EXPECT_EQ(value_of("jakiro_port_superframes_total", {"rx", "uplink"}, s), 8);
    EXPECT_EQ(value_of("jakiro_rdma_naks_total", {"tx", "t1"}, s), 31);
    EXPECT_EQ(value_of("jakiro_rdma_naks_total", {"rx", "t1"}, s), 32);
    EXPECT_EQ(value_of("jakiro_rdma_host_held", {"mappings", "t1"}, s), 41);
    EXPECT_EQ(value_of("jakiro_rdma_host_held", {"descriptors", "t1"}, s), 42);
    EXPECT_EQ(value_of("jakiro_worker_busy_polls_total", {"0"}, s), 51);
    EXPECT_EQ(value_of("jakiro_underlay_neighbors", {"unresolved"}, s), 1);
    EXPECT_EQ(value_of("jakiro_rdma_qps", {"RTS", "RC", "t1"}, s), 1);
    EXPECT_EQ(value_of("jakiro_sg_rule_hits_total", {"egress", "default", "10", "0", "blue"}, s),
              5);
    EXPECT_EQ(value_of("jakiro_qos_weight", {"tcp", "t1"}, s), 1);
    EXPECT_EQ(value_of("jakiro_restarts_total", {"restart"}, s), 2);
    EXPECT_EQ(value_of("jakiro_restarts_total", {"upgrade"}, s), 1);
    EXPECT_EQ(value_of("jakiro_last_restart_carried", {"flows"}, s), 7);
    // What a vNIC's QPs cost the worker, per vNIC.
    EXPECT_EQ(value_of("jakiro_rdma_silent_wrs_total", {"t1"}, s),
              s.vnics[0].qps[qp_totals::silent_wrs]);
    EXPECT_EQ(value_of("jakiro_vnic_rdma_sleep_asks_total", {"t1"}, s),
              s.vnics[0].bounds.rdma_sleep_asks);
    // Its share of the sealed overlay's work.
    EXPECT_EQ(value_of("jakiro_vnic_sealed_frames_total", {"t1"}, s), s.vnics[0].sealed_frames);
    EXPECT_EQ(value_of("jakiro_vnic_sealed_bytes_total", {"t1"}, s), s.vnics[0].sealed_bytes);
}

TEST(MetricTable, TheLastRestartSaysHowItsStateCameAcross) {
    stats_snapshot s = full_snapshot();
    s.restarts.from_version = "0.9";
    s.restarts.via = "fd store";
    EXPECT_EQ(value_of("jakiro_last_restart_info", {"0.9", "upgrade", "fd store"}, s), 1);
    s.restarts.via = "take-over";
    EXPECT_EQ(value_of("jakiro_last_restart_info", {"0.9", "upgrade", "take-over"}, s), 1);
    s.restarts.last = restart_kind::crash;
    s.restarts.from_version.clear();
    s.restarts.via.clear();
    EXPECT_EQ(value_of("jakiro_last_restart_info", {"", "crash", "cold"}, s), 1);
}

TEST(MetricFamilies, AddAPredecessorsCountersButNotItsRestartCount) {
    stats_snapshot s = full_snapshot();
    const auto before = metric_families(s);
    s.counter_bases[counter_key("jakiro_port_missed_total", {{"port", "uplink"}})] = 100;
    s.counter_bases[counter_key("jakiro_restarts_total", {{"kind", "restart"}})] = 100;
    for (const auto& f : metric_families(s)) {
        for (const auto& m : f.metric) {
            if (f.name == "jakiro_port_missed_total" && m.label[0].value == "uplink") {
                EXPECT_EQ(m.counter.value, 105);
            }
            if (f.name == "jakiro_restarts_total" && m.label[0].value == "restart") {
                EXPECT_EQ(m.counter.value, 2) << "the history carries the count already";
            }
        }
    }
}

}  // namespace
}  // namespace jakiro
