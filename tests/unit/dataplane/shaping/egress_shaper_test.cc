// The DHTB egress stage in a worker: a shaped vNIC's tenant frames wait in its tcp class and
// leave at its rate; the rdma class is admitted against its weighted share; an unshaped vNIC
// is not touched; a live change takes effect on the next snapshot.

#include "dataplane/shaping/egress_shaper.hh"

#include "tests/unit/dataplane/shaping/shaped_host_fixture.hh"

namespace jakiro::test {
namespace {

struct ShaperTest : ShapedHostTest {
    ShaperTest() : ShapedHostTest("16KiB", "max_packet_buffers: 600") {}

    void SetUp() override {
        ShapedHostTest::SetUp();
        shaper = std::make_unique<egress_shaper>(now, 512);
        ctx->shaper = shaper.get();
        shaper->sync(*tables, *ctx, now);
    }
    // Publishes the host's YAML with `from` replaced by `to` (a live change of t1), as
    // `jakiroctl apply` would, and lets the shaper see it.
    void apply(const std::string& from, const std::string& to) {
        std::string yaml = config_yaml();
        const auto at = yaml.find(from);
        ASSERT_NE(at, std::string::npos) << from;
        yaml.replace(at, from.size(), to);
        const auto loaded = load_host_config_text(yaml, "h1.yaml");
        ASSERT_TRUE(loaded.ok()) << loaded.errors[0].to_string();
        port_assignment ports{uplink, h1_mac, {port_t1, port_t5, port_t3}};
        std::string error;
        tables = build_tables(loaded.config, ports, neighbors, ++generation, error);
        ASSERT_TRUE(tables) << error;
        shaper->sync(*tables, *ctx, now);
    }

    // Queues small frames from t1 to t5 until the tcp FIFO refuses one (at most `most`);
    // returns how many it took.
    uint32_t fill_t1_queue(uint32_t most) {
        const uint64_t drops_before = drops(drop_reason::qos_queue_full);
        for (uint32_t i = 0; i < most; ++i) {
            from_tenant(slot_t1, t1_packet("198.19.1.3"));
            if (drops(drop_reason::qos_queue_full) > drops_before) {
                return i;
            }
        }
        return most;
    }

    uint32_t generation = 1;
};

TEST_F(ShaperTest, AShapedVnicsFramesLeaveAtItsRate) {
    ASSERT_TRUE(shaper->shaped(slot_t1));
    EXPECT_FALSE(shaper->shaped(slot_t5));
    // 400 frames of ~1.1 KB queued at once: far more than 10 ms at the rate plus the burst.
    for (int i = 0; i < 400; ++i) {
        from_tenant(slot_t1, big_t1_frame());
    }
    EXPECT_TRUE(ctx->tx.queued(port_t5).empty()) << "nothing leaves before the scheduler runs";
    uint64_t sent = 0;
    // 10 ms of 100 µs iterations at 100 Mbit/s: 125 000 bytes plus the burst may leave.
    for (int step = 0; step < 100; ++step) {
        now += 100'000;
        shaper->run(*ctx, rdma_queues::of(nullptr), now);
        sent += drain_t5();
    }
    EXPECT_GT(sent, 125'000u * 9 / 10);
    EXPECT_LT(sent, 125'000u + 16384 + 2 * 1200);
    EXPECT_TRUE(shaper->has_queued());
}

TEST_F(ShaperTest, TcpAndUdpOverIpv6FromAShapedVnicAreItsTcpClassAndLeaveAtItsRate) {
    // The same 10 ms as above, of IPv6 frames: half TCP, half UDP.
    for (int i = 0; i < 400; ++i) {
        from_tenant(slot_t1, big_t1_frame6(i % 2 == 0 ? IPPROTO_TCP : IPPROTO_UDP));
    }
    EXPECT_TRUE(ctx->tx.queued(port_t5).empty()) << "queued in the tcp class, not sent";
    uint64_t sent = 0;
    for (int step = 0; step < 100; ++step) {
        now += 100'000;
        shaper->run(*ctx, rdma_queues::of(nullptr), now);
        sent += drain_t5();
    }
    EXPECT_GT(sent, 125'000u * 9 / 10);
    EXPECT_LT(sent, 125'000u + 16384 + 2 * 1200);
    EXPECT_GT(shaper->counters(slot_t1).tcp_busy_grants.read(), 0u);
    EXPECT_TRUE(shaper->has_queued());
}

TEST_F(ShaperTest, AFullTcpQueueTailDropsAndCounts) {
    for (uint32_t i = 0; i < 512 + 5; ++i) {
        from_tenant(slot_t1, t1_packet("198.19.1.3"));
    }
    EXPECT_EQ(drops(drop_reason::qos_queue_full), 5u);
    EXPECT_EQ(shaper->counters(slot_t1).tcp_queue_drops.read(), 5u);
}

// Backpressure: the worker stops reading a shaped vNIC's face once its queue is full and reads
// it again only when half has left (a burst's room, not one frame at a time); an unshaped
// vNIC is never held.
TEST_F(ShaperTest, AFullTcpQueueHoldsItsFaceUntilHalfHasLeft) {
    apply("limits: {max_packet_buffers: 600}", "limits: {max_packet_buffers: 40}");
    EXPECT_FALSE(shaper->tcp_queue_full(slot_t1));
    EXPECT_TRUE(shaper->tcp_queue_drained(slot_t1));
    ASSERT_EQ(fill_t1_queue(39), 39u);
    EXPECT_FALSE(shaper->tcp_queue_full(slot_t1)) << "one more frame fits";
    ASSERT_EQ(fill_t1_queue(1), 1u);
    EXPECT_TRUE(shaper->tcp_queue_full(slot_t1));
    EXPECT_FALSE(shaper->tcp_queue_drained(slot_t1));
    uint64_t left = 0;
    for (int step = 0; step < 10'000 && !shaper->tcp_queue_drained(slot_t1); ++step) {
        now += 100'000;
        shaper->run(*ctx, rdma_queues::of(nullptr), now);
        left += ctx->tx.queued(port_t5).size();
        drain_t5();
        EXPECT_TRUE(shaper->tcp_queue_drained(slot_t1) || left < 20) << "held until half left";
    }
    EXPECT_TRUE(shaper->tcp_queue_drained(slot_t1));
    EXPECT_GE(left, 20u);
    EXPECT_FALSE(shaper->tcp_queue_full(slot_t5)) << "t5 is not shaped";
    EXPECT_TRUE(shaper->tcp_queue_drained(slot_t5));
}

TEST_F(ShaperTest, AShapedVnicsQueueHoldsNoMoreFramesThanItsPacketBuffers) {
    apply("limits: {max_packet_buffers: 600}", "limits: {max_packet_buffers: 40}");
    EXPECT_EQ(fill_t1_queue(100), 40u);
    EXPECT_EQ(shaper->counters(slot_t1).tcp_queue_drops.read(), 1u);
    // Raised live: the queue takes more at once; lowered again, what it holds stays queued.
    apply("limits: {max_packet_buffers: 600}", "limits: {max_packet_buffers: 60}");
    EXPECT_EQ(fill_t1_queue(100), 20u);
    apply("limits: {max_packet_buffers: 600}", "limits: {max_packet_buffers: 10}");
    EXPECT_EQ(fill_t1_queue(100), 0u);
    EXPECT_TRUE(ctx->tx.queued(port_t5).empty()) << "nothing queued was let go or dropped";
}

TEST_F(ShaperTest, WithoutALimitAVnicsQueueHoldsAnEqualShareOfTheSuperframePool) {
    apply("limits: {max_packet_buffers: 600}", "limits: {}");
    // Three vNICs and the host itself share the pool.
    const uint32_t share = vnet_face::superframe_pool_buffers / 4;
    EXPECT_EQ(tables->vnics[slot_t1].max_packet_buffers, share);
    EXPECT_EQ(fill_t1_queue(share + 10), share);
}

TEST_F(ShaperTest, AShapedVnicsQueueHoldsTwentyMillisecondsOfItsRate) {
    // 100 Mbit/s: 250 000 bytes, far more than the 16 KiB burst or one super-frame.
    qos::vnic_qos q{100'000'000, 16384, {}};
    EXPECT_EQ(egress_shaper::queue_byte_limit(q), 250'000u);
    // 10 Mbit/s: 20 ms is 25 000 bytes, less than a 64 KB super-frame must find: that decides.
    q.rate_bps = 10'000'000;
    EXPECT_EQ(egress_shaper::queue_byte_limit(q), qos::largest_charged_frame_bytes);

    // Frames of 1000 bytes of payload, charged about 1.1 KB each: the queue takes 20 ms of
    // t1's 100 Mbit/s and refuses the next one.
    uint64_t queued = 0;
    const uint64_t drops_before = drops(drop_reason::qos_queue_full);
    while (drops(drop_reason::qos_queue_full) == drops_before) {
        rte_mbuf* m = big_t1_frame();
        const uint32_t charged = qos::charged_bytes(rte_pktmbuf_pkt_len(m));
        from_tenant(slot_t1, m);
        queued += charged;
        ASSERT_LT(queued, 300'000u);
    }
    const uint64_t frame = qos::charged_bytes(1000 + 42);
    EXPECT_LE(queued - frame, 250'000u);
    EXPECT_GT(queued, 250'000u - frame);
}

TEST_F(ShaperTest, UnshapedVnicsPassStraightThrough) {
    ipv4_frame_spec spec{t5_mac, gateway, ip("198.19.1.3"), ip("198.19.1.1")};
    from_tenant(slot_t5, ipv4_mbuf(pool, spec));
    EXPECT_EQ(ctx->tx.queued(port_t1).size(), 1u);
}

// 100 grant periods of 100 us with only t1's rdma class backlogged (a stand-in for the engine
// says its QPs could send 64 KB per poll; admission is asked directly, 1100-byte packets, each
// followed by `padding` bytes charged as a super-datagram's): the bytes it put on the wire.
uint64_t backlogged_rdma_on_wire(ShaperTest& t, uint32_t padding) {
    const rdma_queues t1_backlogged{[](uint16_t slot) { return slot == slot_t1 ? 65536u : 0u; },
                                    [](uint16_t) { return false; }};
    uint64_t on_wire = 0;
    for (int step = 0; step < 100; ++step) {
        t.now += 100'000;
        t.shaper->run(*t.ctx, t1_backlogged, t.now);
        while (t.shaper->admit_rdma(slot_t1, 1100)) {
            if (padding > 0) {
                t.shaper->charge_rdma(slot_t1, padding);
            }
            on_wire += 1100 + padding;
        }
        t.shaper->commit_rdma(t1_backlogged);
    }
    return on_wire;
}

TEST_F(ShaperTest, RdmaIsAdmittedAgainstItsShareAndNeverBeyondTheRate) {
    // Alone, rdma may use the whole rate, and is refused once the grant is spent until tokens
    // come back.
    const uint64_t admitted = backlogged_rdma_on_wire(*this, 0);
    EXPECT_GT(shaper->counters(slot_t1).rdma_waits.read(), 0u);
    EXPECT_GT(admitted, 125'000u * 9 / 10) << "alone, rdma may use the whole rate";
    EXPECT_LT(admitted, 125'000u + 16384 + 2 * 1100);
    EXPECT_TRUE(shaper->admit_rdma(slot_t5, 1 << 20)) << "an unshaped vNIC is never refused";
}

TEST_F(ShaperTest, PaddingTheRdmaClassPutOnTheWireCountsAgainstItsRate) {
    // 550 bytes of padding behind each packet (far more than the real 16, so that an uncharged
    // padding would show): packets and padding together stay within the rate.
    const uint64_t on_wire = backlogged_rdma_on_wire(*this, 550);
    EXPECT_GT(on_wire, 125'000u * 9 / 10);
    EXPECT_LT(on_wire, 125'000u + 16384 + 2 * 1650);
}

TEST_F(ShaperTest, RemovingTheRateReleasesQueuedFramesAtOnce) {
    for (int i = 0; i < 50; ++i) {
        from_tenant(slot_t1, t1_packet("198.19.1.3"));
    }
    auto unshaped = std::make_unique<datapath_tables>();
    // The same tables without QoS: a new snapshot, as `jakiroctl apply` publishes.
    const auto loaded = load_host_config_text(PipelineTest::config_yaml(), "h1.yaml");
    ASSERT_TRUE(loaded.ok());
    port_assignment ports{uplink, h1_mac, {port_t1, port_t5, port_t3}};
    std::string error;
    unshaped = build_tables(loaded.config, ports, neighbors, 2, error);
    ASSERT_TRUE(unshaped) << error;
    shaper->sync(*unshaped, *ctx, now);
    EXPECT_FALSE(shaper->shaped(slot_t1));
    EXPECT_EQ(ctx->tx.queued(port_t5).size(), 50u) << "nothing lost on a live change";
    EXPECT_FALSE(shaper->has_queued());
}

}  // namespace
}  // namespace jakiro::test
