// vnics[].qos, host.qos and vnics[].rdma in the host YAML: units, defaults, validation, and
// errors that name the file, line and field.

#include <gtest/gtest.h>

#include <string>

#include "dataplane/config/config_loader.hh"
#include "dataplane/config/qos_units.hh"
#include "tests/unit/dataplane/config/one_vnic_yaml.hh"

namespace jakiro {
namespace {

const char* base = test::one_vnic_yaml;

config_result load(const std::string& extra) {
    return test::load_with_vnic_keys(extra);
}

TEST(QosUnits, RatesAndSizesParseExactlyAndRefuseEverythingElse) {
    EXPECT_EQ(parse_rate_bps("5Gbit"), 5'000'000'000u);
    EXPECT_EQ(parse_rate_bps("500mbit"), 500'000'000u);
    EXPECT_EQ(parse_rate_bps("10gbps"), 10'000'000'000u);
    EXPECT_EQ(parse_rate_bps("100000"), 100000u);
    EXPECT_EQ(parse_bytes("64KiB"), 65536u);
    EXPECT_EQ(parse_bytes("1MB"), 1'000'000u);
    EXPECT_EQ(parse_bytes("9000"), 9000u);
    for (const char* bad :
         {"", "G", "5.5Gbit", "-1Gbit", "5 Gbit", "5Gbyte", "99999999999999999999"}) {
        EXPECT_FALSE(parse_rate_bps(bad)) << bad;
    }
    EXPECT_FALSE(parse_bytes("64KiBit"));
    EXPECT_FALSE(parse_rate_bps("20000000000Tbit")) << "overflow";
}

TEST(QosConfig, AVnicRateWithClassWeightsLoadsWithADefaultBurst) {
    const auto r = load(R"(    qos:
      rate: 5Gbit
      rdma: {weight: 3, min: 100Mbit}
      tcp: {weight: 1, max: 4Gbit}
)");
    ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
    ASSERT_TRUE(r.config.vnics[0].qos);
    const auto& q = *r.config.vnics[0].qos;
    EXPECT_EQ(q.rate_bps, 5'000'000'000u);
    EXPECT_EQ(q.burst_bytes, qos::default_burst_bytes(5'000'000'000u));
    EXPECT_EQ(q.classes[qos::index_of(qos::traffic_class::rdma)].weight, 3u);
    EXPECT_EQ(q.classes[qos::index_of(qos::traffic_class::rdma)].min_bps, 100'000'000u);
    EXPECT_EQ(q.classes[qos::index_of(qos::traffic_class::tcp)].max_bps, 4'000'000'000u);
}

TEST(QosConfig, KeysAClassLeavesOutKeepTheClassDefaults) {
    const auto r = load(R"(    qos:
      rate: 1Gbit
      rdma: {min: 100Mbit}
)");
    ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
    const auto& q = *r.config.vnics[0].qos;
    const qos::class_qos defaults;
    const auto& rdma = q.classes[qos::index_of(qos::traffic_class::rdma)];
    EXPECT_EQ(rdma.weight, defaults.weight);
    EXPECT_EQ(rdma.min_bps, 100'000'000u);
    EXPECT_EQ(rdma.max_bps, defaults.max_bps);
    const auto& tcp = q.classes[qos::index_of(qos::traffic_class::tcp)];
    EXPECT_EQ(tcp.weight, defaults.weight) << "a class not named at all";
    EXPECT_EQ(tcp.min_bps, defaults.min_bps);
}

TEST(QosConfig, WithoutQosAVnicIsNotShapedAndHasTheDefaultQpQuota) {
    const auto r = load("");
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r.config.vnics[0].qos);
    EXPECT_EQ(r.config.vnics[0].rdma.max_qps, rdma_config::max_qps_limit);
}

TEST(QosConfig, QpQuotaIsMaxQpsOrItsOlderNameMaxRcQps) {
    for (const char* key : {"max_qps", "max_rc_qps"}) {
        const auto r = load(std::string("    rdma: {") + key + ": 7}\n");
        ASSERT_TRUE(r.ok()) << key;
        EXPECT_EQ(r.config.vnics[0].rdma.max_qps, 7u) << key;
    }
}

TEST(QosConfig, EveryRdmaQuotaHasADefaultASmallHostSurvives) {
    const auto r = load("");
    ASSERT_TRUE(r.ok());
    const rdma_config& q = r.config.vnics[0].rdma;
    EXPECT_EQ(q.max_pds, 1024u);
    EXPECT_EQ(q.max_mrs, 1024u);
    EXPECT_EQ(q.max_mr_bytes, uint64_t{4} << 30);
    EXPECT_EQ(q.max_cqs, 1024u);
    EXPECT_EQ(q.max_cqes, 1u << 18);
    EXPECT_EQ(q.max_srqs, 256u);
    EXPECT_EQ(q.max_wqes, 1u << 17);
    EXPECT_EQ(q.max_contexts, 64u);
    EXPECT_EQ(q.max_local_work_rate, 100'000u);
}

TEST(QosConfig, RdmaQuotasAreReadFromTheRdmaMap) {
    const auto r = load(
        "    rdma: {max_qps: 8, max_pds: 2, max_mrs: 3, max_mr_bytes: 64MiB, max_cqs: 4,\n"
        "           max_cqes: 1024, max_srqs: 1, max_wqes: 2048, max_contexts: 5}\n");
    ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
    const rdma_config& q = r.config.vnics[0].rdma;
    EXPECT_EQ(q.max_qps, 8u);
    EXPECT_EQ(q.max_pds, 2u);
    EXPECT_EQ(q.max_mrs, 3u);
    EXPECT_EQ(q.max_mr_bytes, uint64_t{64} << 20);
    EXPECT_EQ(q.max_cqs, 4u);
    EXPECT_EQ(q.max_cqes, 1024u);
    EXPECT_EQ(q.max_srqs, 1u);
    EXPECT_EQ(q.max_wqes, 2048u);
    EXPECT_EQ(q.max_contexts, 5u);
    EXPECT_EQ(load("    rdma: {max_mr_bytes: 2GiB}\n").config.vnics[0].rdma.max_mr_bytes,
              uint64_t{2} << 30);
    EXPECT_EQ(
        load("    rdma: {max_local_work_rate: 5000}\n").config.vnics[0].rdma.max_local_work_rate,
        5000u);
}

// The rdma_cm and QP1 bounds (rnic/rdmacm, rnic/gsi_port): defaults that leave the vNIC's
// own processes most of its ids whatever its peers send, and each bound set in the rdma map.
TEST(QosConfig, RdmaCmAndQp1BoundsHaveSafeDefaultsAndAreReadFromTheRdmaMap) {
    const rdma_config defaults = load("").config.vnics[0].rdma;
    EXPECT_EQ(defaults.max_cm_ids, 1024u);
    EXPECT_EQ(defaults.max_cm_backlog, 128u);
    EXPECT_LT(defaults.max_cm_backlog, defaults.max_cm_ids);
    EXPECT_EQ(defaults.max_cm_held_reqs, 16u);
    EXPECT_EQ(defaults.max_qp1_queue, 256u);
    const auto r = load(
        "    rdma: {max_cm_ids: 64, max_cm_backlog: 8, max_cm_held_reqs: 2, max_qp1_queue: 32}\n");
    ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
    const rdma_config& q = r.config.vnics[0].rdma;
    EXPECT_EQ(q.max_cm_ids, 64u);
    EXPECT_EQ(q.max_cm_backlog, 8u);
    EXPECT_EQ(q.max_cm_held_reqs, 2u);
    EXPECT_EQ(q.max_qp1_queue, 32u);
    struct bad {
        const char* yaml;
        const char* field;
        const char* words;
    };
    const bad cases[] = {
        {"    rdma: {max_cm_ids: 70000}\n", "vnics[0].rdma.max_cm_ids", "[0, 65536]"},
        {"    rdma: {max_cm_backlog: -1}\n", "vnics[0].rdma.max_cm_backlog", "[0, 65536]"},
        {"    rdma: {max_cm_held_reqs: 2000}\n", "vnics[0].rdma.max_cm_held_reqs", "[0, 1024]"},
        {"    rdma: {max_qp1_queue: lots}\n", "vnics[0].rdma.max_qp1_queue", "[0, 65536]"},
    };
    for (const auto& c : cases) {
        const auto bad_load = load(c.yaml);
        ASSERT_EQ(bad_load.errors.size(), 1u) << c.yaml;
        EXPECT_EQ(bad_load.errors[0].field, c.field) << bad_load.errors[0].to_string();
        EXPECT_NE(bad_load.errors[0].to_string().find(c.words), std::string::npos)
            << bad_load.errors[0].to_string();
    }
}

TEST(QosConfig, ErrorsNameTheLineAndTheField) {
    struct bad {
        const char* yaml;
        int line;
        const char* field;
        const char* words;
    };
    const bad cases[] = {
        {"    qos: {rate: fast}\n", 12, "vnics[0].qos.rate", "not a rate"},
        {"    qos: {rate: 1Gbit, rdma: {weight: 0}}\n", 12, "vnics[0].qos.rdma.weight",
         "[1, 1000]"},
        {"    qos: {rate: 1Gbit, udp: {weight: 2}}\n", 12, "vnics[0].qos.udp", "unknown key"},
        {"    qos: {rate: 1Gbit, burst: lots}\n", 12, "vnics[0].qos.burst", "not a size"},
        {"    qos: {rate: 1Gbit, rdma: {min: 800Mbit}, tcp: {min: 800Mbit}}\n", 12, "vnics[0].qos",
         "min"},
        {"    qos: {burst: 1MB}\n", 12, "vnics[0].qos.rate", "missing"},
        {"    rdma: {max_qps: 5000}\n", 12, "vnics[0].rdma.max_qps", "[0, 1024]"},
        {"    rdma: {max_rc_qps: 5000}\n", 12, "vnics[0].rdma.max_rc_qps", "[0, 1024]"},
        {"    rdma: {max_qps: 5, max_rc_qps: 5}\n", 12, "vnics[0].rdma.max_rc_qps", "older name"},
        {"    rdma: {max_ud_qps: 5}\n", 12, "vnics[0].rdma.max_ud_qps", "unknown key"},
        {"    rdma: {max_pds: 2000}\n", 12, "vnics[0].rdma.max_pds", "[0, 1024]"},
        {"    rdma: {max_mrs: many}\n", 12, "vnics[0].rdma.max_mrs", "[0, 4096]"},
        {"    rdma: {max_mr_bytes: lots}\n", 12, "vnics[0].rdma.max_mr_bytes", "not a size"},
        {"    rdma: {max_mr_bytes: 5TiB}\n", 12, "vnics[0].rdma.max_mr_bytes", "4TiB"},
        {"    rdma: {max_cqs: 4096}\n", 12, "vnics[0].rdma.max_cqs", "[0, 2048]"},
        {"    rdma: {max_cqes: -1}\n", 12, "vnics[0].rdma.max_cqes", "[0, 134217728]"},
        {"    rdma: {max_srqs: 1025}\n", 12, "vnics[0].rdma.max_srqs", "[0, 1024]"},
        {"    rdma: {max_wqes: 99999999}\n", 12, "vnics[0].rdma.max_wqes", "[0, 16777216]"},
        {"    rdma: {max_contexts: 5000}\n", 12, "vnics[0].rdma.max_contexts", "[0, 4096]"},
        {"    rdma: {max_local_work_rate: 0}\n", 12, "vnics[0].rdma.max_local_work_rate",
         "[1, 10000000]"},
    };
    for (const auto& c : cases) {
        const auto r = load(c.yaml);
        ASSERT_EQ(r.errors.size(), 1u) << c.yaml;
        const auto& e = r.errors[0];
        EXPECT_EQ(e.file, "h1.yaml");
        EXPECT_EQ(e.line, c.line) << e.to_string();
        EXPECT_EQ(e.field, c.field) << e.to_string();
        EXPECT_NE(e.to_string().find(c.words), std::string::npos) << e.to_string();
    }
}

TEST(QosConfig, TheUplinkRateIsAHostSetting) {
    std::string text = base;
    text.replace(text.find("  name: h1\n"), 11, "  name: h1\n  qos: {uplink_rate: 10Gbit}\n");
    const auto r = load_host_config_text(text, "h1.yaml");
    ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
    ASSERT_TRUE(r.config.uplink_qos);
    EXPECT_EQ(r.config.uplink_qos->rate_bps, 10'000'000'000u);
}

}  // namespace
}  // namespace jakiro
