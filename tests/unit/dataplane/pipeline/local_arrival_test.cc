#include "dataplane/pipeline/local_arrival.hh"

#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

// h1 with two workers: t1 (slot 0) on worker 0, t5 (slot 1) on worker 1. `ctx` is worker 0;
// `other` is worker 1 with its own flow table.
struct LocalArrival : PipelineTest {
    std::unique_ptr<worker_context> other = std::make_unique<worker_context>();

    LocalArrival() { vnic_workers = {0, 1, 0}; }

    void SetUp() override {
        PipelineTest::SetUp();
        std::string error;
        other->id = 1;
        other->neighbors = &neighbors;
        other->pool = pool;
        other->flows = secgroup::flow_table::create(1024, {}, rte_get_tsc_hz(), error);
        ASSERT_TRUE(other->flows) << error;
    }
    void TearDown() override {
        for (rte_mbuf* m : other->tx.queued(port_t5)) {
            rte_pktmbuf_free(m);
        }
        other->tx.discard_all();
        PipelineTest::TearDown();
    }
    // What worker 0 queued for t5's port, as worker 1 would take it from its ring.
    void hand_to_other() {
        auto queued = ctx->tx.queued(port_t5);
        std::vector<rte_mbuf*> pkts(queued.begin(), queued.end());
        ctx->tx.discard_all();
        for (rte_mbuf* m : pkts) {
            m->port = port_t5;  // as worker_handoff::give_port marks it
        }
        process_local_arrivals(*other, *tables, pkts.data(), static_cast<uint16_t>(pkts.size()));
    }
};

TEST_F(LocalArrival, TheSendersWorkerLeavesTheReceiversHalfToTheReceiversWorker) {
    from_tenant(slot_t1, t1_packet("198.19.1.3"));
    ASSERT_EQ(ctx->tx.queued(port_t5).size(), 1u) << "queued for t5's port, to be handed";
    const auto& t5_on_worker_0 = ctx->counters.vnics[slot_t5];
    EXPECT_EQ(t5_on_worker_0.sg_allowed[0].read(), 0u) << "t5's ingress not judged by worker 0";
    EXPECT_EQ(t5_on_worker_0.to_tenant_packets.read(), 0u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1].sg_allowed[1].read(), 1u) << "t1's egress judged";

    hand_to_other();
    const auto delivered = other->tx.queued(port_t5);
    ASSERT_EQ(delivered.size(), 1u);
    const auto* eth = rte_pktmbuf_mtod(delivered[0], const rte_ether_hdr*);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &t5_mac));
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->src_addr, &gateway));
    EXPECT_EQ(other->counters.vnics[slot_t5].sg_allowed[0].read(), 1u) << "judged by worker 1";
    EXPECT_EQ(other->counters.vnics[slot_t5].to_tenant_packets.read(), 1u);
    EXPECT_EQ(other->counters.switched_locally.read(), 1u);
    EXPECT_EQ(other->flows->size(), 1u) << "t5's side of the flow lives on t5's worker";
}

TEST_F(LocalArrival, AReceiverThatNoLongerBelongsToThisWorkerIsACountedDrop) {
    from_tenant(slot_t1, t1_packet("198.19.1.3"));
    auto queued = ctx->tx.queued(port_t5);
    std::vector<rte_mbuf*> pkts(queued.begin(), queued.end());
    ctx->tx.discard_all();
    pkts[0]->port = port_t5;
    process_local_arrivals(*ctx, *tables, pkts.data(), 1);  // worker 0 does not own t5
    EXPECT_EQ(drops(drop_reason::port_removed), 1u);
    EXPECT_TRUE(ctx->tx.queued(port_t5).empty());
}

TEST_F(LocalArrival, VnicsOfOneWorkerStillSwitchDirectly) {
    // t1 and t5 both on worker 0: the intra-host shortcut as with a single worker.
    const auto loaded = load_host_config_text(config_yaml(), "h1.yaml");
    port_assignment ports{uplink, h1_mac, {port_t1, port_t5, port_t3}, {}, {0, 0, 0}};
    std::string error;
    tables = build_tables(loaded.config, ports, neighbors, 1, error);
    ASSERT_TRUE(tables) << error;
    from_tenant(slot_t1, t1_packet("198.19.1.3"));
    ASSERT_EQ(ctx->tx.queued(port_t5).size(), 1u);
    EXPECT_EQ(ctx->counters.vnics[slot_t5].to_tenant_packets.read(), 1u) << "delivered at once";
    EXPECT_EQ(ctx->counters.switched_locally.read(), 1u);
}

}  // namespace
}  // namespace jakiro::test
