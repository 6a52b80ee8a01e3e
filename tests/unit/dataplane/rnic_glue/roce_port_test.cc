#include "dataplane/rnic_glue/roce_port.hh"

#include "dataplane/worker/handoff.hh"
#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

// h1 of the test bed with two workers, as jakirod runs it: t1 and t3 on worker 0, t5 on
// worker 1, each worker with its own RoCE engine and roce_port. This is worker 0's port.
struct RocePortTwoWorkers : PipelineTest {
    std::unique_ptr<worker_handoff> handoff;
    std::unique_ptr<roce_port> port;
    static inline int created = 0;

    RocePortTwoWorkers() { vnic_workers = {0, 1, 0}; }
    void SetUp() override {
        PipelineTest::SetUp();
        std::string error;
        handoff = worker_handoff::create(2, "rp" + std::to_string(created++), error);
        ASSERT_TRUE(handoff) << error;
        ctx->id = 0;
        ctx->handoff = handoff.get();
        port = std::make_unique<roce_port>(*ctx);
        port->use(tables.get());
    }
    void TearDown() override {
        port.reset();     // frees what it still queues
        handoff.reset();  // and what is left in the rings
        PipelineTest::TearDown();
    }
    // What t1's QP would emit: RoCEv2 (UDP 4791) from 198.19.1.1 to `dst`.
    void send_from_t1(const char* dst) {
        ipv4_frame_spec spec{t1_mac, t5_mac, ip("198.19.1.1"), ip(dst)};
        spec.dst_port = 4791;
        spec.payload = 200;
        uint8_t frame[512];
        const uint32_t len = write_ipv4_frame(frame, spec);
        uint8_t* out = port->begin_frame(len);
        ASSERT_NE(out, nullptr);
        std::memcpy(out, frame, len);
        port->end_frame(slot_t1, ip(dst), len);
    }
};

TEST_F(RocePortTwoWorkers, AVnicOfTheOtherWorkerIsNoLocalPeerOfThisEngine) {
    // Its QPs live in worker 1's engine: the memory-to-memory path must not look for them here.
    EXPECT_EQ(port->local_vnic(slot_t1, ip("198.19.1.3")), rnic::packet_port::no_local_vnic);
}

TEST_F(RocePortTwoWorkers, FramesForAnotherWorkersVnicGoToItsRoceRingMarkedWithItsPort) {
    send_from_t1("198.19.1.3");
    send_from_t1("198.19.1.3");
    rte_mbuf* out[8];
    EXPECT_EQ(handoff->take_roce(1, out, 8), 0) << "handed over once per iteration, in flush()";
    port->flush();
    const uint16_t n = handoff->take_roce(1, out, 8);
    ASSERT_EQ(n, 2);
    for (uint16_t i = 0; i < n; ++i) {
        EXPECT_EQ(out[i]->port, port_t5);
    }
    EXPECT_EQ(handoff->take_port(1, out + n, 6), 0) << "not through the Ethernet hand-off";
    EXPECT_EQ(ctx->counters.handed_roce.read(), 2u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1].rdma_tx_packets.read(), 2u);
    rte_pktmbuf_free_bulk(out, n);
}

TEST_F(RocePortTwoWorkers, EachFrameFollowsItsOwnDestinationsRoute) {
    // The port keeps the route of the frame sent last; interleaved peers must not share it.
    for (const char* dst :
         {"198.19.1.3", "198.19.1.2", "198.19.9.9", "198.19.1.3", "198.19.1.2", "198.19.1.2"}) {
        send_from_t1(dst);
    }
    port->flush();
    rte_mbuf* out[8];
    const uint16_t handed = handoff->take_roce(1, out, 8);
    EXPECT_EQ(handed, 2) << "t5's frames to worker 1";
    rte_pktmbuf_free_bulk(out, handed);
    EXPECT_EQ(drops(drop_reason::vlt_miss), 1u) << "no such address in the VPC";
    EXPECT_EQ(ctx->counters.vnics[slot_t1].rdma_tx_packets.read(), 5u)
        << "t2's three to the uplink, t5's two";
}

TEST_F(RocePortTwoWorkers, AHandedFrameForAVnicThisWorkerDoesNotOwnIsDropped) {
    // Worker 0 is handed a frame marked for t5's port (worker 1's vNIC): t5 cannot be served
    // here (its QPs are not in this engine), so it is a counted drop, not a delivery.
    ipv4_frame_spec spec{t1_mac, t5_mac, ip("198.19.1.1"), ip("198.19.1.3")};
    spec.dst_port = 4791;
    rte_mbuf* m = ipv4_mbuf(pool, spec);
    m->port = port_t5;
    port->receive_handed(&m, 1, 0);
    EXPECT_EQ(drops(drop_reason::port_removed), 1u);
}

struct RocePortOneWorker : RocePortTwoWorkers {
    RocePortOneWorker() { vnic_workers = {0, 0, 0}; }
};

TEST_F(RocePortOneWorker, AVnicOfTheSameWorkerIsALocalPeerAndLoopsBack) {
    EXPECT_EQ(port->local_vnic(slot_t1, ip("198.19.1.3")), slot_t5);
    send_from_t1("198.19.1.3");
    port->flush();
    rte_mbuf* out[4];
    EXPECT_EQ(handoff->take_roce(1, out, 4), 0);
    EXPECT_EQ(ctx->counters.handed_roce.read(), 0u);
    // It waits in the loopback queue for this worker's engine; without one it is freed.
    EXPECT_EQ(ctx->counters.switched_locally.read(), 1u);
}

}  // namespace
}  // namespace jakiro::test
