#pragma once
// A host like h1 of the test bed, with its tables built from YAML and fake port ids, so the
// pipelines run without ports: tests read what they queued for transmission.

#include <gtest/gtest.h>
#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <memory>

#include "dataplane/config/config_loader.hh"
#include "dataplane/control/table_builder.hh"
#include "dataplane/pipeline/egress.hh"
#include "dataplane/pipeline/ingress.hh"
#include "dataplane/worker/overlay_reply_buckets.hh"
#include "tests/unit/frames.hh"

namespace jakiro::test {

constexpr uint16_t uplink = 0, port_t1 = 1, port_t5 = 2, port_t3 = 3;
constexpr uint16_t slot_t1 = 0, slot_t5 = 1, slot_t3 = 2;

struct PipelineTest : testing::Test {
    static inline rte_mempool* pool = nullptr;
    overlay::underlay_neighbors neighbors;
    std::unique_ptr<datapath_tables> tables;
    std::unique_ptr<worker_context> ctx = std::make_unique<worker_context>();

    const rte_ether_addr h1_mac = mac("02:00:00:00:00:01");
    const rte_ether_addr h2_mac = mac("02:00:00:00:00:02");
    const rte_ether_addr gateway = mac("02:6a:6b:00:00:01");
    const rte_ether_addr t1_mac = mac("02:00:c6:13:01:01");
    const rte_ether_addr t5_mac = mac("02:00:c6:13:01:03");

    static void SetUpTestSuite() {
        if (pool == nullptr) {
            pool = rte_pktmbuf_pool_create("pipeline_test", 1023, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                           SOCKET_ID_ANY);
        }
    }

    // The host's YAML; tests of the security groups replace it.
    virtual const char* config_yaml() const {
        return R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - {name: blue-open, vpc: blue, ingress: [{proto: any, from: 0.0.0.0/0}]}
  - {name: red-open, vpc: red, ingress: [{proto: any, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "net_null1", security_groups: [blue-open]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, port: "net_null2", security_groups: [blue-open]}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, port: "net_null3", security_groups: [red-open]}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2}
  - {vpc: red, ip: 198.19.1.2, host: 198.18.0.2}
  - {vpc: blue, ip: 198.19.1.9, host: 198.18.0.9, mac: "02:00:c6:13:01:09"}
)";
    }

    // The worker of each vNIC (t1, t5, t3); empty: worker 0 for all. A fixture for two
    // workers sets it before SetUp.
    std::vector<uint8_t> vnic_workers;

    void SetUp() override {
        ASSERT_NE(pool, nullptr);
        const auto loaded = load_host_config_text(config_yaml(), "h1.yaml");
        ASSERT_TRUE(loaded.ok()) << loaded.errors[0].to_string();
        port_assignment ports{uplink, h1_mac, {port_t1, port_t5, port_t3}, {}, vnic_workers};
        std::string error;
        tables = build_tables(loaded.config, ports, neighbors, 1, error);
        ASSERT_TRUE(tables) << error;
        ctx->neighbors = &neighbors;
        ctx->pool = pool;
        ctx->flows = secgroup::flow_table::create(1024, {}, rte_get_tsc_hz(), error);
        ASSERT_TRUE(ctx->flows) << error;
    }

    void TearDown() override {
        for (uint16_t port = 0; port < 4; ++port) {
            for (rte_mbuf* m : ctx->tx.queued(port)) {
                rte_pktmbuf_free(m);
            }
        }
        ctx->tx.discard_all();
        EXPECT_EQ(rte_mempool_in_use_count(pool), 0u) << "every mbuf freed or queued";
    }

    uint64_t drops(drop_reason reason) const {
        return ctx->counters.drops[static_cast<std::size_t>(reason)].read();
    }

    void from_tenant(uint16_t slot, rte_mbuf* m) {
        process_tenant_burst(*ctx, *tables, slot, &m, 1);
    }
    void from_uplink(rte_mbuf* m) { process_uplink_burst(*ctx, *tables, &m, 1); }

    // `flood` questions from one host that jakirod answers into the tunnel (ARP requests,
    // neighbour solicitations), each made by `question()` and sent from the uplink. Returns how
    // many were answered, having checked that they are the per-host allowance's burst and what
    // its rate refilled while the flood went on (worker/overlay_reply_buckets.hh).
    template <typename Question>
    uint64_t answered_of_a_flood(unsigned flood, Question question) {
        const uint64_t before = ctx->tx.queued(uplink).size();
        const uint64_t began = now_ns();
        for (unsigned i = 0; i < flood; ++i) {
            from_uplink(question());
        }
        const uint64_t took = now_ns() - began;
        const uint64_t answered = ctx->tx.queued(uplink).size() - before;
        EXPECT_GE(answered, overlay_reply_buckets::burst);
        EXPECT_LE(answered, overlay_reply_buckets::burst +
                                took * overlay_reply_buckets::per_s / 1'000'000'000 + 1);
        return answered;
    }

    // A frame from tenant t1 (blue) to `dst`.
    rte_mbuf* t1_packet(const char* dst, uint8_t tos = 0) {
        ipv4_frame_spec spec{t1_mac, gateway, ip("198.19.1.1"), ip(dst)};
        spec.tos = tos;
        return ipv4_mbuf(pool, spec);
    }

    // A VXLAN frame from host `from_host` carrying `src` -> `dst` in VNI `vni`.
    rte_mbuf* tunnelled(const char* from_host, uint32_t vni, const char* src, const char* dst,
                        uint8_t inner_tos = 0, uint8_t outer_tos = 0) {
        ipv4_frame_spec spec{mac("02:00:c6:13:01:02"), gateway, ip(src), ip(dst)};
        spec.tos = inner_tos;
        rte_mbuf* m = ipv4_mbuf(pool, spec);
        vxlan_wrap(m, {h2_mac, h1_mac, ip(from_host), ip("198.18.0.1")}, vni, outer_tos);
        return m;
    }
};

}  // namespace jakiro::test
