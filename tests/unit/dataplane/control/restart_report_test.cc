#include "control/restart_report.hh"

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

}  // namespace
}  // namespace jakiro
