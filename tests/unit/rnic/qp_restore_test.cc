// A QP across a restart of jakirod (rnic/qp_handover.cc): two QPs of one engine exchange real
// RoCEv2 frames over a test wire; mid-traffic one of them (or both) is saved into a state image,
// destroyed, and restored into a new queue_pair over the same ring memfd, CQs and MRs, the frames
// in flight meanwhile lost. Work requests go into the shared rings and completions come out of
// the CQ rings as the shim writes and reads them, so what is checked is what a tenant sees.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <vector>

#include "handover/image.hh"
#include "rnic/engine.hh"
#include "rnic/queue_pair.hh"
#include "rnic/wire/psn.hh"
#include "tests/unit/rnic/qp_setup.hh"

namespace jakiro::rnic {
namespace {

namespace proto = verbs_proto;
using test::wqe;

constexpr std::size_t region_bytes = 4 << 20;
constexpr uint64_t region_iova = 0x10000000;
constexpr uint32_t sq_depth = 256;
constexpr uint32_t rq_depth = 256;
constexpr uint32_t cq_depth = 4096;
constexpr uint32_t ip_a = 0xC6130101;  // 198.19.1.1
constexpr uint32_t ip_b = 0xC6130102;  // 198.19.1.2
constexpr uint32_t qkey = 0x11112222;
// The QP's fields go inside whichever section its caller opened; the test takes one.
constexpr auto section = handover::section_kind::daemon;

// The fabric: frames wait here until the test delivers or drops them.
class test_wire final : public packet_port {
  public:
    struct frame {
        uint16_t from;
        uint32_t dst_ip_be;
        std::vector<uint8_t> bytes;
    };
    uint8_t* begin_frame(uint32_t len) override {
        _building.assign(len, 0xEE);
        return _building.data();
    }
    void end_frame(uint16_t vnic, uint32_t dst_ip_be, uint32_t len) override {
        EXPECT_EQ(len, _building.size());
        frames.push_back({vnic, dst_ip_be, _building});
    }
    uint16_t local_vnic(uint16_t, uint32_t dst_ip_be) const override {
        if (!same_host) {
            return no_local_vnic;
        }
        return dst_ip_be == htonl(ip_a) ? 0 : dst_ip_be == htonl(ip_b) ? 1 : no_local_vnic;
    }
    std::deque<frame> frames;
    bool same_host = false;  // the intra-host shortcut

  private:
    std::vector<uint8_t> _building;
};

// One QP with its vNIC's MR table, region, ring and CQs, and the test's (the shim's) view of
// them. The QP is rebuilt by restart(); everything else stays, as shared memory does.
struct side {
    uint16_t vnic = 0;
    uint32_t ip = 0;
    uint32_t qpn = 0;
    ibv_qp_type type = IBV_QPT_RC;
    uint32_t pd = 7;
    uint32_t mr = 0;
    std::shared_ptr<verbs::mr_table> mrs = std::make_shared<verbs::mr_table>(64);
    int region_fd = -1;
    std::byte* region = nullptr;
    int ring_fd = -1;
    proto::qp_ring_header* ring = nullptr;
    std::size_t ring_bytes = 0;
    std::shared_ptr<verbs::completion_queue> scq, rcq;
    proto::cq_ring_header* scq_view = nullptr;
    proto::cq_ring_header* rcq_view = nullptr;
    std::size_t cq_bytes = 0;
    std::shared_ptr<verbs::shared_receive_queue> srq;  // receives come from here, if set
    uint32_t srq_posted = 0;
    std::shared_ptr<queue_pair> qp;
    uint32_t sq_posted = 0, rq_posted = 0, send_consumed = 0, recv_consumed = 0;

    ~side() {
        if (qp) {
            qp->ring().leave_pages_to_successor();
        }
        qp.reset();
        munmap(region, region_bytes);
        munmap(ring, ring_bytes);
        munmap(scq_view, cq_bytes);
        munmap(rcq_view, cq_bytes);
        close(region_fd);
        close(ring_fd);
    }

    uint64_t iova(std::size_t offset) const { return region_iova + offset; }

    queue_pair_setup setup(std::unique_ptr<verbs::qp_ring> r) const {
        queue_pair_setup s;
        s.type = type;
        s.local.vnic = vnic;
        s.local.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(vnic + 1)};
        s.local.ip_be = htonl(ip);
        s.qpn = qpn;
        s.pd = pd;
        s.owner = 1;
        s.send_cq = scq;
        s.recv_cq = rcq;
        s.ring = std::move(r);
        s.mrs = mrs;
        s.srq = srq;
        s.max_send_sge = 4;
        s.max_recv_sge = 4;
        s.max_inline = 64;
        s.limits.max_mtu = IBV_MTU_4096;
        return s;
    }

    void post_send(const proto::send_wqe& w) {
        proto::sq_slots(ring)[sq_posted & (sq_depth - 1)] = w;
        proto::publish_wqes(ring->sq_producer, ++sq_posted);
    }
    void post_recv(uint64_t wr_id, std::size_t offset, uint32_t length) {
        proto::recv_wqe w{};
        w.wr_id = wr_id;
        w.num_sge = 1;
        w.sg[0] = {iova(offset), length, mr};
        proto::rq_slots(ring, sq_depth)[rq_posted & (rq_depth - 1)] = w;
        proto::publish_wqes(ring->rq_producer, ++rq_posted);
    }
    void post_srq(uint64_t wr_id, std::size_t offset, uint32_t length) {
        proto::recv_wqe w{};
        w.wr_id = wr_id;
        w.num_sge = 1;
        w.sg[0] = {iova(offset), length, mr};
        proto::srq_slots(srq->header())[srq_posted & (srq->capacity() - 1)] = w;
        proto::publish_wqes(srq->header()->producer, ++srq_posted);
    }
    static bool poll(proto::cq_ring_header* cq, uint32_t& consumed, proto::cqe& out) {
        if (proto::load_producer_acquire(*cq) == consumed) {
            return false;
        }
        out = proto::cq_slots(cq)[consumed & (cq_depth - 1)];
        proto::release_slots(*cq, ++consumed);
        return true;
    }
    std::vector<proto::cqe> drain_send() {
        std::vector<proto::cqe> out;
        proto::cqe c{};
        while (poll(scq_view, send_consumed, c)) {
            out.push_back(c);
        }
        return out;
    }
    std::vector<proto::cqe> drain_recv() {
        std::vector<proto::cqe> out;
        proto::cqe c{};
        while (poll(rcq_view, recv_consumed, c)) {
            out.push_back(c);
        }
        return out;
    }
    uint64_t word(std::size_t offset) const {
        uint64_t v = 0;
        std::memcpy(&v, region + offset, sizeof v);
        return v;
    }
    void set_word(std::size_t offset, uint64_t v) { std::memcpy(region + offset, &v, sizeof v); }
};

class QpRestoreTest : public ::testing::Test {
  protected:
    void make(side& s, uint16_t vnic, uint32_t ip, ibv_qp_type type, bool on_srq = false) {
        s.vnic = vnic;
        s.ip = ip;
        s.type = type;
        s.qpn = ((uint32_t{vnic} + 1) << 8) | 0x11;
        s.region_fd = memfd_create("test-mr", MFD_CLOEXEC);
        ASSERT_EQ(ftruncate(s.region_fd, region_bytes), 0);
        s.region = static_cast<std::byte*>(
            mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.region_fd, 0));
        ASSERT_NE(s.region, MAP_FAILED);
        auto entry = std::make_shared<verbs::mr_entry>();
        entry->pd = s.pd;
        entry->owner = 1;
        entry->access = proto::mr_access_all;
        entry->iova = region_iova;
        entry->addr = region_iova;
        entry->length = region_bytes;
        entry->data = s.region;
        ASSERT_TRUE(s.mrs->insert(entry));
        s.mr = entry->key;
        std::unique_ptr<verbs::cq_ring> scq_ring, rcq_ring;
        int scq_fd = -1, rcq_fd = -1;
        ASSERT_EQ(verbs::cq_ring::create(cq_depth, scq_ring, scq_fd), 0);
        ASSERT_EQ(verbs::cq_ring::create(cq_depth, rcq_ring, rcq_fd), 0);
        s.cq_bytes = proto::cq_ring_bytes(cq_depth);
        s.scq_view = test::map_shared<proto::cq_ring_header>(scq_fd, s.cq_bytes);
        s.rcq_view = test::map_shared<proto::cq_ring_header>(rcq_fd, s.cq_bytes);
        close(scq_fd);
        close(rcq_fd);
        s.scq = std::make_shared<verbs::completion_queue>(std::move(scq_ring), 1, 1, -1,
                                                          verbs::cq_error_sink{});
        s.rcq = std::make_shared<verbs::completion_queue>(std::move(rcq_ring), 2, 1, -1,
                                                          verbs::cq_error_sink{});
        if (on_srq) {
            int srq_fd = -1;
            ASSERT_EQ(verbs::shared_receive_queue::create(64, 1, 1, s.pd, 4, {}, s.srq, srq_fd), 0);
            close(srq_fd);
        }
        std::unique_ptr<verbs::qp_ring> ring;
        ASSERT_EQ(verbs::qp_ring::create(sq_depth, rq_depth, s.qpn, ring, s.ring_fd), 0);
        s.ring_bytes = ring->bytes();
        s.ring = test::map_shared<proto::qp_ring_header>(s.ring_fd, s.ring_bytes);
        s.qp = std::make_shared<queue_pair>(s.setup(std::move(ring)));
        eng.add_qp(s.qp);
    }

    void make_pair(ibv_qp_type type) {
        make(a, 0, ip_a, type);
        make(b, 1, ip_b, type);
    }

    static void to_init(side& s) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        if (s.type == IBV_QPT_UD) {
            attr.qkey = qkey;
            mask |= IBV_QP_QKEY;
        } else {
            attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
            mask |= IBV_QP_ACCESS_FLAGS;
        }
        ASSERT_EQ(s.qp->modify(attr, mask), 0);
    }
    static void to_rtr(side& s, const side& peer) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_RTR;
        if (s.type == IBV_QPT_UD) {
            ASSERT_EQ(s.qp->modify(attr, IBV_QP_STATE), 0);
            return;
        }
        // The PSN wraps within the streams below.
        attr = test::rtr_attr(peer.qpn, peer.ip, 0xFFFF00 ^ peer.qpn);
        const int rc_only =
            s.type == IBV_QPT_RC ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0;
        ASSERT_EQ(s.qp->modify(attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                         IBV_QP_RQ_PSN | rc_only),
                  0);
    }
    static void to_rts(side& s) {
        const uint8_t timeout_1ms = 8;  // 4.096 us * 2^8
        const ibv_qp_attr attr = test::rts_attr(0xFFFF00 ^ s.qpn, timeout_1ms, 7, 7);
        const int rc_only = s.type == IBV_QPT_RC ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                                       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC
                                                 : 0;
        ASSERT_EQ(s.qp->modify(attr, IBV_QP_STATE | IBV_QP_SQ_PSN | rc_only), 0);
    }
    void connect_both() {
        for (auto [s, peer] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
            ASSERT_NO_FATAL_FAILURE(to_init(*s));
            ASSERT_NO_FATAL_FAILURE(to_rtr(*s, *peer));
            ASSERT_NO_FATAL_FAILURE(to_rts(*s));
        }
    }

    void deliver(const std::function<bool(const test_wire::frame&)>& keep = {}) {
        std::deque<test_wire::frame> batch;
        batch.swap(wire.frames);
        for (auto& f : batch) {
            if (keep && !keep(f)) {
                continue;
            }
            const uint16_t to = f.dst_ip_be == htonl(ip_a) ? 0 : 1;
            eng.receive(to, f.bytes.data() + 14, static_cast<uint32_t>(f.bytes.size() - 14), wire,
                        now);
        }
    }
    // One engine pass and the wire's delivery, `step_ns` of virtual time.
    void step(const std::function<bool(const test_wire::frame&)>& keep = {}) {
        now += step_ns;
        eng.poll(wire, now);
        deliver(keep);
    }
    // One engine pass whose frames are still on the wire when the process stops.
    void poll_only() {
        now += step_ns;
        eng.poll(wire, now);
    }
    void run(unsigned steps, const std::function<bool(const test_wire::frame&)>& keep = {}) {
        for (unsigned i = 0; i < steps; ++i) {
            step(keep);
        }
    }
    bool run_until(const std::function<bool()>& done, unsigned max_steps,
                   const std::function<bool(const test_wire::frame&)>& keep = {}) {
        for (unsigned i = 0; i < max_steps; ++i) {
            if (done()) {
                return true;
            }
            step(keep);
        }
        return done();
    }

    // The old process saves the QP and goes (its QP destroyed, the frames on the wire lost);
    // the new one attaches the same ring memfd and restores the QP into its engine.
    void restart(side& s) {
        handover::image_writer w("jakirod test");
        w.begin(section);
        s.qp->save(w);
        w.end();
        eng.remove_qp(s.vnic, s.qpn);
        s.qp->ring().leave_pages_to_successor();
        s.qp.reset();
        wire.frames.clear();
        std::unique_ptr<verbs::qp_ring> ring;
        ASSERT_EQ(verbs::qp_ring::attach(s.ring_fd, sq_depth, rq_depth, ring), 0);
        handover::image_reader image(w.data(), {});
        ASSERT_TRUE(image.open()) << image.error();
        handover::section_reader r = image.section(section);
        std::unique_ptr<queue_pair> restored = queue_pair::restore(s.setup(std::move(ring)), r);
        ASSERT_NE(restored, nullptr) << image.error();
        EXPECT_TRUE(r.done()) << "every field the writer wrote is read";
        s.qp = std::move(restored);
        eng.add_qp(s.qp);
        ++restarts;
    }

    void fill(side& s, std::size_t offset, std::size_t length, uint32_t seed) {
        std::mt19937 rng(seed);
        for (std::size_t i = 0; i < length; ++i) {
            s.region[offset + i] = static_cast<std::byte>(rng());
        }
    }
    static bool same(const side& x, std::size_t xo, const side& y, std::size_t yo,
                     std::size_t len) {
        return std::memcmp(x.region + xo, y.region + yo, len) == 0;
    }
    // PSN `k` packets after the first one `s` sent.
    static uint32_t sent_psn(const side& s, uint32_t k) { return psn_add(0xFFFF00 ^ s.qpn, k); }
    static bool psn_within(uint32_t psn, uint32_t first, uint32_t count) {
        return psn_diff(psn, first) > 0 && psn_diff(psn, psn_add(first, count)) < 0;
    }

    engine eng{2, 16};
    test_wire wire;
    side a, b;
    uint64_t now = 1'000'000'000;
    uint64_t step_ns = 10'000;
    unsigned restarts = 0;
};

// ---- RC: one stream of every operation, with the requester or the responder restarted in it

// The stream a sends b: a WRITE of 384 packets, a SEND of 256, a READ of 192, eight
// FETCH_ADDs and a CMP_SWAP on b's words, a WRITE with immediate. Path MTU 1024.
struct rc_stream {
    static constexpr std::size_t write_at = 0, write_len = 384 << 10;
    static constexpr std::size_t send_at = 384 << 10, send_len = 256 << 10;
    static constexpr std::size_t recv_at = 1 << 20;
    static constexpr std::size_t read_at = 2 << 20, read_len = 192 << 10;
    static constexpr std::size_t counter_at = 3 << 20, swap_at = (3 << 20) + 64;
    static constexpr std::size_t results_at = (3 << 20) + 4096;
    static constexpr std::size_t imm_at = 640 << 10, imm_len = 60 << 10;
    static constexpr uint32_t adds = 8;
    static constexpr uint64_t counter_start = 1000;
    // First PSN (counted from a's sq_psn) of each message.
    static constexpr uint32_t write_psn = 0, send_psn = 384, read_psn = 640, atomic_psn = 832;
    static constexpr uint32_t wrs = 5 + adds;
};

class RcRestoreTest : public QpRestoreTest {
  protected:
    void SetUp() override {
        make_pair(IBV_QPT_RC);
        connect_both();
    }

    void post_stream() {
        using st = rc_stream;
        fill(a, st::write_at, st::write_len, 1);
        fill(a, st::send_at, st::send_len, 2);
        fill(b, st::read_at, st::read_len, 3);
        fill(a, st::imm_at, st::imm_len, 4);
        b.set_word(st::counter_at, st::counter_start);
        b.set_word(st::swap_at, 0);
        b.post_recv(100, st::recv_at, st::send_len);
        b.post_recv(101, st::recv_at + st::send_len, 16);  // the WRITE with immediate's
        uint64_t id = 1;
        a.post_send(wqe(id++, IBV_WR_RDMA_WRITE, a.iova(st::write_at), st::write_len, a.mr,
                        b.iova(st::write_at), b.mr));
        a.post_send(wqe(id++, IBV_WR_SEND, a.iova(st::send_at), st::send_len, a.mr));
        a.post_send(wqe(id++, IBV_WR_RDMA_READ, a.iova(st::read_at), st::read_len, a.mr,
                        b.iova(st::read_at), b.mr));
        for (uint32_t i = 0; i < st::adds; ++i) {
            auto w = wqe(id++, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(st::results_at + 8 * i), 8, a.mr,
                         b.iova(st::counter_at), b.mr);
            w.compare_add = i + 1;
            a.post_send(w);
        }
        auto cas = wqe(id++, IBV_WR_ATOMIC_CMP_AND_SWP, a.iova(st::results_at + 8 * st::adds), 8,
                       a.mr, b.iova(st::swap_at), b.mr);
        cas.compare_add = 0;
        cas.swap = 0xDEAD;
        a.post_send(cas);
        auto imm = wqe(id++, IBV_WR_RDMA_WRITE_WITH_IMM, a.iova(st::imm_at), st::imm_len, a.mr,
                       b.iova(st::imm_at), b.mr);
        imm.imm_data = htonl(0xABCD);
        a.post_send(imm);
    }

    // What the tenant checks once the stream is over: every WR completed once, in order,
    // successfully; every byte in place; each atomic executed exactly once.
    void expect_stream_delivered() {
        using st = rc_stream;
        ASSERT_TRUE(run_until([&] { return a.qp->stats().completions.read() >= st::wrs; }, 20000))
            << "completions " << a.qp->stats().completions.read();
        run(500);  // anything more (a duplicate completion, a late retransmission) shows now
        std::vector<proto::cqe> sends = seen_sends;
        for (const proto::cqe& c : a.drain_send()) {
            sends.push_back(c);
        }
        ASSERT_EQ(sends.size(), st::wrs);
        for (uint32_t i = 0; i < sends.size(); ++i) {
            EXPECT_EQ(sends[i].wr_id, i + 1u) << "in order";
            EXPECT_EQ(sends[i].status, IBV_WC_SUCCESS) << "WR " << i + 1;
        }
        EXPECT_EQ(sends[0].opcode, IBV_WC_RDMA_WRITE);
        EXPECT_EQ(sends[1].opcode, IBV_WC_SEND);
        EXPECT_EQ(sends[2].opcode, IBV_WC_RDMA_READ);
        EXPECT_EQ(sends[3].opcode, IBV_WC_FETCH_ADD);
        EXPECT_EQ(sends[3 + st::adds].opcode, IBV_WC_COMP_SWAP);
        const auto recvs = b.drain_recv();
        ASSERT_EQ(recvs.size(), 2u);
        EXPECT_EQ(recvs[0].wr_id, 100u);
        EXPECT_EQ(recvs[0].status, IBV_WC_SUCCESS);
        EXPECT_EQ(recvs[0].opcode, IBV_WC_RECV);
        EXPECT_EQ(recvs[0].byte_len, st::send_len);
        EXPECT_EQ(recvs[1].wr_id, 101u);
        EXPECT_EQ(recvs[1].status, IBV_WC_SUCCESS);
        EXPECT_EQ(recvs[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        EXPECT_EQ(recvs[1].imm_data, htonl(0xABCD));
        EXPECT_TRUE(same(a, st::write_at, b, st::write_at, st::write_len)) << "WRITE";
        EXPECT_TRUE(same(a, st::send_at, b, st::recv_at, st::send_len)) << "SEND";
        EXPECT_TRUE(same(b, st::read_at, a, st::read_at, st::read_len)) << "READ";
        EXPECT_TRUE(same(a, st::imm_at, b, st::imm_at, st::imm_len)) << "WRITE with immediate";
        // Each FETCH_ADD saw the sum of those before it: none executed twice, none lost.
        uint64_t expected = st::counter_start;
        for (uint32_t i = 0; i < st::adds; ++i) {
            EXPECT_EQ(a.word(st::results_at + 8 * i), expected) << "FETCH_ADD " << i;
            expected += i + 1;
        }
        EXPECT_EQ(b.word(st::counter_at), expected) << "every add once";
        EXPECT_EQ(a.word(st::results_at + 8 * st::adds), 0u) << "CMP_SWAP found 0";
        EXPECT_EQ(b.word(st::swap_at), 0xDEADu);
        EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
        EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
    }

    std::vector<proto::cqe> seen_sends;  // completions the test took before the end
};

TEST_F(RcRestoreTest, RequesterRestartedMidSendAndMidReadDeliversEveryByteOnce) {
    using st = rc_stream;
    post_stream();
    step();       // the first 256 packets of the WRITE arrive
    poll_only();  // the WRITE's tail and the SEND's head are on the wire when jakirod stops
    const queue_pair_stats& before = a.qp->stats();
    const uint64_t sent_before = before.packets_sent.read();
    const uint32_t next_before = before.next_psn.load();
    ASSERT_TRUE(psn_within(next_before, sent_psn(a, st::send_psn), st::read_psn - st::send_psn))
        << "stopped inside the SEND";
    ASSERT_NO_FATAL_FAILURE(restart(a));
    EXPECT_EQ(a.qp->stats().packets_sent.read(), sent_before) << "counters never go down";
    EXPECT_EQ(a.qp->stats().next_psn.load(), next_before);
    // Again while READ responses are coming in: half of them landed, the rest are lost.
    auto is_read_response = [](const test_wire::frame& f) {
        return f.bytes[42] >= opcode::rc_read_response_first &&
               f.bytes[42] <= opcode::rc_read_response_only;
    };
    bool split = false;
    for (int i = 0; i < 5000 && !split; ++i) {
        poll_only();
        const auto responses =
            std::count_if(wire.frames.begin(), wire.frames.end(), is_read_response);
        if (responses < 2) {
            deliver();
            continue;
        }
        // Everything up to the middle READ response arrives; what follows is in flight.
        std::deque<test_wire::frame> arrived;
        for (long seen = 0; seen < responses / 2;) {
            seen += is_read_response(wire.frames.front()) ? 1 : 0;
            arrived.push_back(std::move(wire.frames.front()));
            wire.frames.pop_front();
        }
        std::swap(arrived, wire.frames);
        deliver();
        wire.frames = std::move(arrived);
        split = true;
    }
    ASSERT_TRUE(split);
    EXPECT_TRUE(same(b, st::read_at, a, st::read_at, 1024)) << "the READ's first response landed";
    EXPECT_FALSE(
        same(b, st::read_at + st::read_len - 1024, a, st::read_at + st::read_len - 1024, 1024))
        << "its last did not";
    ASSERT_NO_FATAL_FAILURE(restart(a));
    ASSERT_NO_FATAL_FAILURE(expect_stream_delivered());
    EXPECT_GT(a.qp->stats().retransmitted.read(), 0u) << "what was lost was sent again";
}

TEST_F(RcRestoreTest, ResponderRestartedMidWriteMidSendAndAfterAtomicsExecutesOnce) {
    using st = rc_stream;
    post_stream();
    // Mid-WRITE: what a sent so far (less than the WRITE) placed, the rest still to come.
    step();
    ASSERT_GT(a.qp->stats().packets_sent.read(), st::write_psn);
    ASSERT_LT(a.qp->stats().packets_sent.read(), st::send_psn);
    ASSERT_NO_FATAL_FAILURE(restart(b));
    // Mid-SEND: its receive WQE taken and partly filled.
    step();
    ASSERT_GT(a.qp->stats().packets_sent.read(), st::send_psn);
    ASSERT_LT(a.qp->stats().packets_sent.read(), st::read_psn);
    ASSERT_EQ(b.qp->stats().completions.read(), 0u);
    ASSERT_NO_FATAL_FAILURE(restart(b));
    // Every atomic executed, and none of their answers reached the requester: it asks again
    // after the restart, and only the replay cache may answer.
    auto no_atomic_acks = [](const test_wire::frame& f) {
        return f.bytes[42] != opcode::rc_atomic_acknowledge;
    };
    uint64_t all_added = st::counter_start;
    for (uint32_t i = 0; i < st::adds; ++i) {
        all_added += i + 1;
    }
    ASSERT_TRUE(
        run_until([&] { return b.word(st::counter_at) == all_added; }, 5000, no_atomic_acks));
    ASSERT_NO_FATAL_FAILURE(restart(b));
    ASSERT_NO_FATAL_FAILURE(expect_stream_delivered());
    EXPECT_GT(b.qp->stats().duplicates.read(), 0u) << "the atomics came again";
}

TEST_F(RcRestoreTest, BothEndsRestartedTogetherMidStreamDeliverEveryByteOnce) {
    post_stream();
    step();
    poll_only();
    ASSERT_NO_FATAL_FAILURE(restart(a));
    ASSERT_NO_FATAL_FAILURE(restart(b));
    run(30);
    ASSERT_NO_FATAL_FAILURE(restart(b));
    ASSERT_NO_FATAL_FAILURE(restart(a));
    ASSERT_NO_FATAL_FAILURE(expect_stream_delivered());
}

// Both QPs on one host: the message moves memory to memory in slices, and jakirod stops
// between two slices (both ends restarted, as a daemon restart restarts every QP).
TEST_F(RcRestoreTest, IntraHostMessagesRestartedBetweenSlicesCompleteWhole) {
    wire.same_host = true;
    post_stream();
    step();  // a slice of the WRITE moved, the rest to come
    ASSERT_EQ(a.drain_send().size(), 0u) << "the WRITE is still under way";
    ASSERT_NO_FATAL_FAILURE(restart(a));
    ASSERT_NO_FATAL_FAILURE(restart(b));
    step();  // the rest of the WRITE, then a slice of the SEND into b's receive WQE
    seen_sends = a.drain_send();
    ASSERT_EQ(seen_sends.size(), 1u) << "the WRITE completed";
    ASSERT_EQ(b.qp->stats().completions.read(), 0u) << "the SEND is still under way";
    ASSERT_NO_FATAL_FAILURE(restart(b));
    ASSERT_NO_FATAL_FAILURE(restart(a));
    ASSERT_NO_FATAL_FAILURE(expect_stream_delivered());
    EXPECT_TRUE(wire.frames.empty());
}

// A QP on a shared receive queue, restarted mid-SEND: the receive WQE it had taken from the
// SRQ (whose slot is free again, so it lives only in the QP's state) is the one the rest of the
// message fills and completes.
TEST_F(QpRestoreTest, AQpOnAnSrqRestartedMidSendCompletesTheWqeItHadTaken) {
    make(a, 0, ip_a, IBV_QPT_RC);
    make(b, 1, ip_b, IBV_QPT_RC, true);
    connect_both();
    constexpr uint32_t first = 512 << 10, second = 100 << 10;
    fill(a, 0, first + second, 77);
    b.post_srq(500, 1 << 20, first);
    b.post_srq(501, 2 << 20, second);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), first, a.mr));
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(first), second, a.mr));
    step();
    ASSERT_LT(a.qp->stats().packets_sent.read(), first / 1024) << "inside the first SEND";
    ASSERT_NO_FATAL_FAILURE(restart(b));
    ASSERT_TRUE(run_until([&] { return a.qp->stats().completions.read() == 2; }, 5000));
    run(200);
    const auto sends = a.drain_send();
    ASSERT_EQ(sends.size(), 2u);
    EXPECT_EQ(sends[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(sends[1].status, IBV_WC_SUCCESS);
    const auto recvs = b.drain_recv();
    ASSERT_EQ(recvs.size(), 2u);
    EXPECT_EQ(recvs[0].wr_id, 500u);
    EXPECT_EQ(recvs[0].byte_len, first);
    EXPECT_EQ(recvs[1].wr_id, 501u);
    EXPECT_EQ(recvs[1].byte_len, second);
    EXPECT_TRUE(same(a, 0, b, 1 << 20, first));
    EXPECT_TRUE(same(a, first, b, 2 << 20, second));
}

// The MRs a restored WQE names are pinned again: deregistered while the WR is outstanding,
// the memory stays (and stays charged) until the WR completes, as before the restart.
TEST_F(RcRestoreTest, ARestoredWqePinsItsMemoryUntilItCompletes) {
    auto entry = std::make_shared<verbs::mr_entry>();
    std::vector<std::byte> second(64 << 10);
    entry->pd = a.pd;
    entry->access = proto::mr_access_all;
    entry->iova = 0x90000000;
    entry->length = second.size();
    entry->data = second.data();
    ASSERT_TRUE(a.mrs->insert(entry));
    const uint32_t key = entry->key;
    std::weak_ptr<const verbs::mr_entry> pinned = entry;
    entry.reset();
    std::mt19937 rng(9);
    for (auto& byte : second) {
        byte = static_cast<std::byte>(rng());
    }
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, 0x90000000, 64 << 10, key, b.iova(0), b.mr));
    poll_only();  // sent, never delivered: outstanding
    ASSERT_NO_FATAL_FAILURE(restart(a));
    a.mrs->erase(key);  // ibv_dereg_mr with the WR still out
    EXPECT_FALSE(pinned.expired()) << "the restored WQE holds the MR";
    ASSERT_TRUE(run_until([&] { return a.qp->stats().completions.read() == 1; }, 2000));
    const auto c = a.drain_send();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(second.data(), b.region, second.size()), 0);
    EXPECT_TRUE(pinned.expired()) << "released with the completion";
}

// The rate a CNP cut, the policy generation the peer was admitted under and the RNR wait
// survive; the timers restart.
TEST_F(RcRestoreTest, DcqcnRateAndAdmittedGenerationCarryOver) {
    a.qp->on_cnp(now);
    a.qp->on_cnp(now + 1000);
    const uint64_t cut = a.qp->rate_bps();
    ASSERT_LT(cut, a.qp->line_rate_bps());
    const uint32_t generation = a.qp->admitted_generation();
    ASSERT_NO_FATAL_FAILURE(restart(a));
    EXPECT_EQ(a.qp->rate_bps(), cut);
    EXPECT_EQ(a.qp->stats().rate_bps.load(), cut);
    EXPECT_EQ(a.qp->admitted_generation(), generation);
    EXPECT_EQ(a.qp->stats().cnps_received.read(), 2u);
}

// ---- UC and UD

class UcRestoreTest : public QpRestoreTest {
  protected:
    static constexpr uint32_t messages = 8;
    static constexpr std::size_t message_len = 100 << 10;  // 100 packets
    static constexpr std::size_t recv_at = 2 << 20;

    void SetUp() override {
        make_pair(IBV_QPT_UC);
        connect_both();
        for (uint32_t m = 0; m < messages; ++m) {
            fill(a, m * message_len, message_len, 50 + m);
            b.post_recv(200 + m, recv_at + m * message_len, message_len);
            a.post_send(wqe(m + 1, IBV_WR_SEND, a.iova(m * message_len), message_len, a.mr));
        }
    }

    // Every WR completes at the requester; at the responder every receive that completes holds
    // one whole message, in order, and at most `lost` messages are missing.
    void expect_delivered(uint32_t lost) {
        run(2000);
        const auto sends = a.drain_send();
        ASSERT_EQ(sends.size(), messages);
        for (uint32_t i = 0; i < messages; ++i) {
            EXPECT_EQ(sends[i].wr_id, i + 1u);
            EXPECT_EQ(sends[i].status, IBV_WC_SUCCESS);
        }
        const auto recvs = b.drain_recv();
        EXPECT_GE(recvs.size(), messages - lost);
        EXPECT_LE(recvs.size(), messages);
        uint32_t next_message = 0;
        for (uint32_t r = 0; r < recvs.size(); ++r) {
            EXPECT_EQ(recvs[r].wr_id, 200u + r) << "receives complete in order";
            EXPECT_EQ(recvs[r].status, IBV_WC_SUCCESS);
            EXPECT_EQ(recvs[r].byte_len, message_len);
            while (next_message < messages && !same(a, next_message * message_len, b,
                                                    recv_at + r * message_len, message_len)) {
                ++next_message;
            }
            EXPECT_LT(next_message, messages) << "receive " << r << " holds a whole message";
            ++next_message;
        }
        EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
        EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
    }
};

TEST_F(UcRestoreTest, RequesterRestartedMidMessageLosesAtMostThatMessage) {
    step();
    poll_only();
    // The packets of the message in progress the old process sent last are still on the wire
    // when it stops: lost. Everything before them (whole messages) arrived.
    const auto in_progress =
        static_cast<std::ptrdiff_t>(a.qp->stats().packets_sent.read() % (message_len / 1024));
    ASSERT_GT(in_progress, 0);
    ASSERT_GT(wire.frames.size(), static_cast<std::size_t>(in_progress));
    std::deque<test_wire::frame> in_flight(wire.frames.end() - in_progress, wire.frames.end());
    wire.frames.erase(wire.frames.end() - in_progress, wire.frames.end());
    deliver();
    wire.frames = std::move(in_flight);
    ASSERT_NO_FATAL_FAILURE(restart(a));
    ASSERT_NO_FATAL_FAILURE(expect_delivered(1));
}

TEST_F(UcRestoreTest, ResponderRestartedMidMessageWithNothingInFlightLosesNothing) {
    step();  // everything sent so far arrived: b is inside a message
    ASSERT_LT(b.qp->stats().completions.read(), messages);
    ASSERT_NO_FATAL_FAILURE(restart(b));
    ASSERT_NO_FATAL_FAILURE(expect_delivered(0));
}

TEST_F(QpRestoreTest, UdDatagramsAfterARestartOfBothEndsArriveWhole) {
    make_pair(IBV_QPT_UD);
    for (side* s : {&a, &b}) {
        ASSERT_NO_FATAL_FAILURE(to_init(*s));
        ASSERT_NO_FATAL_FAILURE(to_rtr(*s, *s));
        ASSERT_NO_FATAL_FAILURE(to_rts(*s));
    }
    constexpr uint32_t datagrams = 40, len = 1000, grh = 40;
    auto send = [&](uint32_t i) {
        fill(a, i * 1024, len, 700 + i);
        auto w = wqe(i, IBV_WR_SEND, a.iova(i * 1024), len, a.mr);
        w.ud_remote_ip = htonl(ip_b);
        w.ud_remote_qpn = b.qpn;
        w.ud_remote_qkey = qkey;
        a.post_send(w);
    };
    for (uint32_t i = 0; i < datagrams; ++i) {
        b.post_recv(300 + i, (1 << 20) + i * 2048, 2048);
    }
    for (uint32_t i = 0; i < datagrams / 2; ++i) {
        send(i);
    }
    step();
    for (uint32_t i = datagrams / 2; i < datagrams; ++i) {
        send(i);
    }
    ASSERT_NO_FATAL_FAILURE(restart(a));
    ASSERT_NO_FATAL_FAILURE(restart(b));
    run(100);
    const auto sends = a.drain_send();
    ASSERT_EQ(sends.size(), datagrams);
    for (uint32_t i = 0; i < datagrams; ++i) {
        EXPECT_EQ(sends[i].wr_id, i);
        EXPECT_EQ(sends[i].status, IBV_WC_SUCCESS);
    }
    const auto recvs = b.drain_recv();
    ASSERT_EQ(recvs.size(), datagrams) << "none was in flight at the restart";
    for (uint32_t r = 0; r < recvs.size(); ++r) {
        EXPECT_EQ(recvs[r].status, IBV_WC_SUCCESS);
        EXPECT_EQ(recvs[r].byte_len, grh + len);
        EXPECT_EQ(recvs[r].src_qp, a.qpn);
        EXPECT_TRUE(same(a, r * 1024, b, (1 << 20) + r * 2048 + grh, len)) << r;
    }
}

// ---- every state, and query() the same after

void expect_same_attributes(const ibv_qp_attr& x, const ibv_qp_attr& y) {
    EXPECT_EQ(x.qp_state, y.qp_state);
    EXPECT_EQ(x.cur_qp_state, y.cur_qp_state);
    EXPECT_EQ(x.path_mtu, y.path_mtu);
    EXPECT_EQ(x.qkey, y.qkey);
    EXPECT_EQ(x.rq_psn, y.rq_psn);
    EXPECT_EQ(x.sq_psn, y.sq_psn);
    EXPECT_EQ(x.dest_qp_num, y.dest_qp_num);
    EXPECT_EQ(x.qp_access_flags, y.qp_access_flags);
    EXPECT_EQ(x.cap.max_send_wr, y.cap.max_send_wr);
    EXPECT_EQ(x.cap.max_recv_wr, y.cap.max_recv_wr);
    EXPECT_EQ(x.cap.max_send_sge, y.cap.max_send_sge);
    EXPECT_EQ(x.cap.max_recv_sge, y.cap.max_recv_sge);
    EXPECT_EQ(x.cap.max_inline_data, y.cap.max_inline_data);
    EXPECT_EQ(std::memcmp(x.ah_attr.grh.dgid.raw, y.ah_attr.grh.dgid.raw, 16), 0);
    EXPECT_EQ(x.ah_attr.is_global, y.ah_attr.is_global);
    EXPECT_EQ(x.ah_attr.port_num, y.ah_attr.port_num);
    EXPECT_EQ(x.pkey_index, y.pkey_index);
    EXPECT_EQ(x.sq_draining, y.sq_draining);
    EXPECT_EQ(x.max_rd_atomic, y.max_rd_atomic);
    EXPECT_EQ(x.max_dest_rd_atomic, y.max_dest_rd_atomic);
    EXPECT_EQ(x.min_rnr_timer, y.min_rnr_timer);
    EXPECT_EQ(x.port_num, y.port_num);
    EXPECT_EQ(x.timeout, y.timeout);
    EXPECT_EQ(x.retry_cnt, y.retry_cnt);
    EXPECT_EQ(x.rnr_retry, y.rnr_retry);
}

class StateRestoreTest : public QpRestoreTest, public ::testing::WithParamInterface<ibv_qp_type> {
  protected:
    // Restarts `a` and checks it is in `state` with the attributes query() gave before.
    void restart_in(ibv_qp_state state) {
        ASSERT_EQ(a.qp->state(), state);
        ibv_qp_attr before{}, after{};
        ibv_qp_cap cap_before{}, cap_after{};
        bool sig_before = true, sig_after = true;
        a.qp->query(before, cap_before, sig_before);
        ASSERT_NO_FATAL_FAILURE(restart(a));
        a.qp->query(after, cap_after, sig_after);
        EXPECT_EQ(a.qp->state(), state);
        EXPECT_EQ(a.qp->stats().state.load(), static_cast<uint32_t>(state));
        expect_same_attributes(before, after);
        EXPECT_EQ(sig_before, sig_after);
    }
};

TEST_P(StateRestoreTest, AQpInEachStateRestoresToItWithTheSameAttributes) {
    make_pair(GetParam());
    ASSERT_NO_FATAL_FAILURE(restart_in(IBV_QPS_RESET));
    ASSERT_NO_FATAL_FAILURE(to_init(a));
    ASSERT_NO_FATAL_FAILURE(restart_in(IBV_QPS_INIT));
    ASSERT_NO_FATAL_FAILURE(to_rtr(a, GetParam() == IBV_QPT_UD ? a : b));
    ASSERT_NO_FATAL_FAILURE(restart_in(IBV_QPS_RTR));
    ASSERT_NO_FATAL_FAILURE(to_rts(a));
    ASSERT_NO_FATAL_FAILURE(restart_in(IBV_QPS_RTS));
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_SQD;
    ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE), 0);
    ASSERT_NO_FATAL_FAILURE(restart_in(IBV_QPS_SQD));
    // The restored machine goes on from where it was: SQD -> RTS -> ERR -> RESET.
    attr.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE), 0);
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE), 0);
    ASSERT_NO_FATAL_FAILURE(restart_in(IBV_QPS_ERR));
    attr.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(a.qp->modify(attr, IBV_QP_STATE), 0);
    EXPECT_EQ(a.qp->state(), IBV_QPS_RESET);
}

INSTANTIATE_TEST_SUITE_P(Types, StateRestoreTest,
                         ::testing::Values(IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD),
                         [](const auto& info) {
                             return info.param == IBV_QPT_RC   ? std::string("rc")
                                    : info.param == IBV_QPT_UC ? std::string("uc")
                                                               : std::string("ud");
                         });

// ---- a record that is not a QP's fails cleanly

class CorruptRestoreTest : public RcRestoreTest {
  protected:
    // A's record, saved mid-stream (WQEs outstanding, READs owed, a message in progress).
    std::vector<std::byte> saved_record() {
        post_stream();
        step();
        poll_only();
        handover::image_writer w("t");
        const std::size_t header = w.data().size() + 2 + 2 + 8;
        w.begin(section);
        a.qp->save(w);
        w.end();
        return {w.data().begin() + static_cast<std::ptrdiff_t>(header), w.data().end()};
    }
    // restore() of `record` into a QP with a's number over a fresh ring: null with the
    // reader's error, or a QP; never a crash.
    std::unique_ptr<queue_pair> try_restore(const std::vector<std::byte>& record,
                                            std::string& error) {
        handover::image_writer w("t");
        w.begin(section);
        for (std::byte byte : record) {
            w.u8(static_cast<uint8_t>(byte));
        }
        w.end();
        handover::image_reader image(w.data(), {});
        EXPECT_TRUE(image.open());
        handover::section_reader r = image.section(section);
        std::unique_ptr<verbs::qp_ring> ring;
        EXPECT_EQ(verbs::qp_ring::attach(a.ring_fd, sq_depth, rq_depth, ring), 0);
        std::unique_ptr<queue_pair> qp = queue_pair::restore(a.setup(std::move(ring)), r);
        error = image.error();
        if (qp != nullptr) {
            qp->ring().leave_pages_to_successor();
        }
        return qp;
    }
};

TEST_F(CorruptRestoreTest, ATruncatedRecordIsRefusedWithTheReadersError) {
    const std::vector<std::byte> record = saved_record();
    ASSERT_GT(record.size(), 1000u);
    std::string error;
    ASSERT_NE(try_restore(record, error), nullptr) << error;
    EXPECT_EQ(error, "");
    for (std::size_t len = 0; len < record.size(); len += len < 400 ? 1 : 61) {
        const std::vector<std::byte> cut(record.begin(),
                                         record.begin() + static_cast<std::ptrdiff_t>(len));
        EXPECT_EQ(try_restore(cut, error), nullptr) << len;
        EXPECT_NE(error, "") << len;
    }
}

TEST_F(CorruptRestoreTest, ADamagedRecordIsRefusedOrRestoredNeverACrash) {
    const std::vector<std::byte> record = saved_record();
    std::mt19937 rng(17);
    unsigned refused = 0;
    for (int i = 0; i < 3000; ++i) {
        std::vector<std::byte> damaged = record;
        const int flips = 1 + static_cast<int>(rng() % 3);
        for (int f = 0; f < flips; ++f) {
            damaged[rng() % damaged.size()] = static_cast<std::byte>(rng());
        }
        std::string error;
        std::unique_ptr<queue_pair> qp = try_restore(damaged, error);
        if (qp == nullptr) {
            EXPECT_NE(error, "");
            ++refused;
        } else {
            EXPECT_EQ(error, "");
        }
    }
    EXPECT_GT(refused, 0u);
}

TEST_F(CorruptRestoreTest, AnotherQpsRecordOrVersionIsRefusedByName) {
    const std::vector<std::byte> record = saved_record();
    std::string error;
    // b's setup, a's record.
    handover::image_writer w("t");
    w.begin(section);
    a.qp->save(w);
    w.end();
    handover::image_reader image(w.data(), {});
    ASSERT_TRUE(image.open());
    handover::section_reader r = image.section(section);
    std::unique_ptr<verbs::qp_ring> ring;
    ASSERT_EQ(verbs::qp_ring::attach(b.ring_fd, sq_depth, rq_depth, ring), 0);
    EXPECT_EQ(queue_pair::restore(b.setup(std::move(ring)), r), nullptr);
    EXPECT_NE(image.error().find("another QP"), std::string::npos) << image.error();
    // A record version this binary does not read (the u16 after the tag).
    std::vector<std::byte> newer = record;
    newer[4] = std::byte{99};
    EXPECT_EQ(try_restore(newer, error), nullptr);
    EXPECT_NE(error.find("version 99"), std::string::npos) << error;
    // Not a QP record at all.
    std::vector<std::byte> other = record;
    other[0] = std::byte{0};
    EXPECT_EQ(try_restore(other, error), nullptr);
    EXPECT_NE(error.find("not a QP record"), std::string::npos) << error;
    // The old QP is untouched by all this: the stream still completes.
    ASSERT_NO_FATAL_FAILURE(expect_stream_delivered());
}

}  // namespace
}  // namespace jakiro::rnic
