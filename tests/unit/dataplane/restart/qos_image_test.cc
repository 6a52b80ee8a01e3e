// A restarted jakirod continues its predecessor's token buckets (the state image's QoS section):
// a shaped vNIC that was sending at its rate gets no fresh burst from the restart, so over any
// window that spans it the vNIC sends its rate and at most one burst, as it would have without
// the restart; the same holds for the ingress meters and the packet-rate allowance. An image
// without the section (an older predecessor's) is still read, and the buckets start full.

#include "dataplane/restart/qos_image.hh"

#include "dataplane/control/daemon_state.hh"
#include "dataplane/restart/daemon_image.hh"
#include "dataplane/shaping/ingress_policer.hh"
#include "tests/unit/dataplane/shaping/shaped_host_fixture.hh"

namespace jakiro::test {
namespace {

constexpr uint64_t ms = 1'000'000;
constexpr uint64_t rate_bytes_per_ms = 12'500;  // 100 Mbit/s
constexpr uint64_t burst = 64 * 1024;
constexpr uint64_t frame_slack = 2 * 1200;  // the last frame of a grant may overshoot

struct QosImageTest : ShapedHostTest {
    QosImageTest() : ShapedHostTest("64KiB", "max_packet_rate: 20000") {}

    void SetUp() override {
        ShapedHostTest::SetUp();
        start_process();
    }

    // A jakirod's worker as it starts: a fresh shaper, meters and packet-rate buckets.
    void start_process() {
        shaper = std::make_unique<egress_shaper>(now, 1024);
        policer = std::make_unique<ingress_policer>();
        ctx->shaper = shaper.get();
        ctx->policer = policer.get();
        ctx->packet_rates = packet_rate_buckets{};
    }
    // The worker's first sync with its snapshot.
    void first_sync() {
        shaper->sync(*tables, *ctx, now);
        policer->sync(*tables, ctx->id, now);
    }

    // The predecessor's QoS section, its workers stopped.
    handover::image_writer save() {
        handover::image_writer w("jakirod test");
        const std::vector<const worker_context*> workers{ctx.get()};
        write_qos_buckets(w, {names, slot_workers, workers});
        return w;
    }
    // The successor reads it into its fresh worker (before the worker's first sync).
    uint64_t restore(const handover::image_writer& w) {
        handover::image_reader r(w.data(), {});
        EXPECT_TRUE(r.open()) << r.error();
        const std::vector<worker_context*> workers{ctx.get()};
        uint64_t carried = 0;
        EXPECT_TRUE(read_qos_buckets(r, {names, slot_workers, workers}, now, carried)) << r.error();
        return carried;
    }

    // Keeps t1's tcp class backlogged for `span` ns of 100 µs iterations; bytes that left.
    uint64_t send_backlogged(uint64_t span) {
        uint64_t sent = 0;
        for (uint64_t t = 0; t < span; t += 100'000) {
            while (shaper->scheduler().backlog(slot_t1, qos::traffic_class::tcp) < 200'000) {
                from_tenant(slot_t1, big_t1_frame());
            }
            now += 100'000;
            shaper->run(*ctx, rdma_queues::of(nullptr), now);
            sent += drain_t5();
        }
        return sent;
    }

    std::vector<std::string> names{"t1", "t5", "t3"};
    std::vector<uint8_t> slot_workers{0, 0, 0};
    std::unique_ptr<ingress_policer> policer;
};

TEST_F(QosImageTest, AShapedVnicSendsItsRateAndOneBurstOverAWindowSpanningARestart) {
    first_sync();
    const uint64_t start = now;
    uint64_t sent = send_backlogged(20 * ms);
    const handover::image_writer image = save();
    now += 2 * ms;  // the blackout
    start_process();
    EXPECT_EQ(restore(image), 1u);
    first_sync();
    sent += send_backlogged(20 * ms);
    const uint64_t window_ms = (now - start) / ms;
    EXPECT_LE(sent, window_ms * rate_bytes_per_ms + burst + frame_slack)
        << "the restart gave the vNIC a second burst";
    // The blackout's tokens are the vNIC's, as any idle time's: its rate is not cut either.
    EXPECT_GE(sent, window_ms * rate_bytes_per_ms);
}

TEST_F(QosImageTest, TheIngressMetersContinueTheirBuckets) {
    first_sync();
    qos::ingress_meter* meter = policer->meter(slot_t1);
    ASSERT_NE(meter, nullptr);
    // 200 KB arriving at once: the meter's buckets are in debt.
    for (int i = 0; i < 200; ++i) {
        (void)meter->on_packet(now, qos::traffic_class::tcp, 1000, qos::ecn::ect0, nullptr);
    }
    const qos::meter_bucket_states before = meter->buckets();
    ASSERT_LT(before.vnic.units, 0);
    const handover::image_writer image = save();
    start_process();
    restore(image);
    first_sync();
    const qos::meter_bucket_states after = policer->meter(slot_t1)->buckets();
    EXPECT_EQ(after.vnic.units, before.vnic.units);
    EXPECT_EQ(after.vnic.at_ns, before.vnic.at_ns);
    for (std::size_t c = 0; c < qos::class_count; ++c) {
        EXPECT_EQ(after.share[c].units, before.share[c].units) << c;
    }
}

TEST_F(QosImageTest, ThePacketRateAllowanceContinues) {
    first_sync();
    // 20 000 frames a second, 200 a burst: the burst read, 5 ms later 100 more came due.
    ctx->packet_rates.charge(slot_t1, ctx->packet_rates.available(slot_t1, 20'000, now));
    const handover::image_writer image = save();
    now += 5 * ms;
    start_process();
    restore(image);
    EXPECT_EQ(ctx->packet_rates.available(slot_t1, 20'000, now), 100u)
        << "a full bucket (200) would be a second burst";
}

TEST_F(QosImageTest, AVnicTheSuccessorNoLongerHasIsNotCarried) {
    first_sync();
    (void)send_backlogged(5 * ms);
    const handover::image_writer image = save();
    names = {"t9", "t5", "t3"};  // t1's slot holds another vNIC now
    start_process();
    EXPECT_EQ(restore(image), 0u);
    first_sync();
    EXPECT_EQ(shaper->scheduler().buckets(slot_t1).vnic.units,
              static_cast<int64_t>(burst) * qos::units_per_byte)
        << "a vNIC new to the slot starts full";
}

TEST_F(QosImageTest, AnUnknownKindOfBucketFailsTheImage) {
    handover::image_writer w("jakirod test");
    w.begin(handover::section_kind::qos_buckets);
    w.u32(0);  // no worker's uplink
    w.u32(1);
    w.string("t1");
    w.u8(0x80);
    w.end();
    handover::image_reader r(w.data(), {});
    ASSERT_TRUE(r.open());
    const std::vector<worker_context*> workers{ctx.get()};
    uint64_t carried = 0;
    EXPECT_FALSE(read_qos_buckets(r, {names, slot_workers, workers}, now, carried));
    EXPECT_NE(r.error().find("unknown kinds"), std::string::npos) << r.error();
}

// A predecessor that wrote no QoS section (an older jakirod): the image is read, and the
// buckets start full as they did before the section existed.
TEST_F(QosImageTest, AnImageWithoutTheSectionIsReadAndTheBucketsStartFull) {
    daemon_state state;
    state.config.name = "h1";
    state.neighbors = &neighbors;
    state.slot_names = names;
    state.slot_workers = slot_workers;
    handover::image_writer w("jakirod older");
    w.begin(handover::section_kind::daemon);
    w.string("h1");
    w.i64(static_cast<int64_t>(now));
    for (std::size_t i = 0; i < state.restarts.counts.size(); ++i) {
        w.u64(0);
    }
    w.u32(static_cast<uint32_t>(names.size()));
    for (const auto& name : names) {
        w.string(name);
    }
    w.end();
    handover::image_reader r(w.data(), {});
    ASSERT_TRUE(r.open()) << r.error();
    ASSERT_TRUE(read_image_late(r, state, {ctx.get()})) << r.error();
    EXPECT_EQ(state.restarts.carried.count("qos_buckets"), 0u);
    first_sync();
    EXPECT_EQ(shaper->scheduler().buckets(slot_t1).vnic.units,
              static_cast<int64_t>(burst) * qos::units_per_byte);
}

}  // namespace
}  // namespace jakiro::test
