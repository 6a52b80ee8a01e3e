#include "dataplane/control/restart_report.hh"

#include <gtest/gtest.h>

namespace jakiro {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily counter(const std::string& name,
                     std::vector<std::pair<std::vector<ClientMetric::Label>, double>> samples) {
    MetricFamily f{name, "help", MetricType::Counter, {}};
    for (auto& [labels, value] : samples) {
        ClientMetric m;
        m.label = labels;
        m.counter.value = value;
        f.metric.push_back(m);
    }
    return f;
}

TEST(CounterBases, APredecessorsCountersAreAddedToTheSuccessorsSoNoneGoesDown) {
    // The predecessor's scrape, labels in one order...
    const auto before = counter_values(
        {counter("jakiro_port_packets_total", {{{{"port", "t1"}, {"direction", "rx"}}, 1000},
                                               {{{"port", "t1"}, {"direction", "tx"}}, 500}})});
    // ...and the successor's, labels in another, counting from zero again.
    std::vector<MetricFamily> after = {
        counter("jakiro_port_packets_total", {{{{"direction", "rx"}, {"port", "t1"}}, 7},
                                              {{{"direction", "tx"}, {"port", "t1"}}, 0},
                                              {{{"direction", "rx"}, {"port", "t5"}}, 3}})};
    add_counter_bases(before, after);
    EXPECT_EQ(after[0].metric[0].counter.value, 1007);
    EXPECT_EQ(after[0].metric[1].counter.value, 500);
    EXPECT_EQ(after[0].metric[2].counter.value, 3);  // a series the predecessor did not have
}

TEST(CounterBases, GaugesAndTheRestartHistoryGetNoBase) {
    MetricFamily gauge{"jakiro_vnics", "help", MetricType::Gauge, {}};
    ClientMetric g;
    g.gauge.value = 3;
    gauge.metric.push_back(g);
    std::vector<MetricFamily> before = {
        gauge, counter("jakiro_restarts_total", {{{{"kind", "restart"}}, 2}})};
    const auto bases = counter_values(before);
    EXPECT_TRUE(bases.empty());
    // The restart history is carried in the image, not as a base: a base would count twice.
    std::vector<MetricFamily> after = {
        counter("jakiro_restarts_total", {{{{"kind", "restart"}}, 3}})};
    add_counter_bases({{counter_key("jakiro_restarts_total", {{"kind", "restart"}}), 2}}, after);
    EXPECT_EQ(after[0].metric[0].counter.value, 3);
}

// A vNIC removed after a take-over leaves no base behind: one added later under its name is
// another vNIC and counts from 0; the others keep theirs, and so do counters of no vNIC.
TEST(CounterBases, ARemovedVnicsBasesGoAndTheOthersStay) {
    auto bases = counter_values(
        {counter("jakiro_vnic_rdma_qp_visits_total",
                 {{{{"vnic", "t3"}}, 25000}, {{{"vnic", "t30"}}, 4}}),
         counter("jakiro_vnic_drops_total", {{{{"vnic", "t3"}, {"reason", "sg"}}, 9},
                                             {{{"reason", "sg"}, {"peer_vnic", "t3"}}, 5}}),
         counter("jakiro_port_packets_total", {{{{"port", "t3"}}, 7}})});
    forget_counter_bases_of_vnic(bases, "t3");
    std::vector<MetricFamily> after = {
        counter("jakiro_vnic_rdma_qp_visits_total",
                {{{{"vnic", "t3"}}, 0}, {{{"vnic", "t30"}}, 1}}),
        counter("jakiro_vnic_drops_total", {{{{"vnic", "t3"}, {"reason", "sg"}}, 0},
                                            {{{"reason", "sg"}, {"peer_vnic", "t3"}}, 0}}),
        counter("jakiro_port_packets_total", {{{{"port", "t3"}}, 1}})};
    add_counter_bases(bases, after);
    EXPECT_EQ(after[0].metric[0].counter.value, 0) << "the new t3 starts at 0";
    EXPECT_EQ(after[0].metric[1].counter.value, 5) << "t30 is another vNIC";
    EXPECT_EQ(after[1].metric[0].counter.value, 0);
    EXPECT_EQ(after[1].metric[1].counter.value, 5) << "a label that only ends in vnic";
    EXPECT_EQ(after[2].metric[0].counter.value, 8) << "no vNIC label: kept";
}

// A successor whose configuration no longer has a vNIC keeps only the bases of those it carries.
TEST(CounterBases, ASuccessorKeepsTheBasesOfTheVnicsItCarriesOnly) {
    auto bases = counter_values({counter("jakiro_vnic_rdma_poller_wakes_total",
                                         {{{{"vnic", "t1"}}, 10}, {{{"vnic", "t3"}}, 20}}),
                                 counter("jakiro_port_packets_total", {{{{"port", "t3"}}, 7}})});
    keep_counter_bases_of_vnics(bases, {"t1", "t5"});
    EXPECT_EQ(bases.size(), 2u);
    EXPECT_EQ(bases.at(counter_key("jakiro_vnic_rdma_poller_wakes_total", {{"vnic", "t1"}})), 10);
    EXPECT_FALSE(
        bases.contains(counter_key("jakiro_vnic_rdma_poller_wakes_total", {{"vnic", "t3"}})));
    EXPECT_EQ(bases.at(counter_key("jakiro_port_packets_total", {{"port", "t3"}})), 7);
}

}  // namespace
}  // namespace jakiro
