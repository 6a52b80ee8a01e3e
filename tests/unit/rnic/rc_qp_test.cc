// The RC transport end to end inside one engine: two vNICs' QPs (made through vnic_resources,
// as the channel server makes them) exchange real RoCEv2 frames over a test wire that can
// lose, duplicate and reorder them, on a virtual clock. Work requests go into the shared rings
// and completions come out of the CQ rings exactly as the shim writes and reads them.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "rnic/engine.hh"
#include "rnic/queues/memory_window.hh"
#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/resources.hh"
#include "rnic/wire/aeth.hh"
#include "rnic/wire/icrc.hh"
#include "verbs_abi/qp_attr_wire.hh"

namespace jakiro::roce {
namespace {

namespace proto = verbs_proto;

constexpr std::size_t region_bytes = 1 << 20;
constexpr uint64_t region_iova = 0x10000000;

// The fabric between the two vNICs: frames wait here until delivered; a policy may drop,
// duplicate or hold them back.
class test_wire final : public packet_port {
  public:
    struct frame {
        uint16_t from;
        uint32_t dst_ip_be;
        std::vector<uint8_t> bytes;
    };

    uint8_t* begin_frame(uint32_t len) override {
        if (refuse_buffers || sent >= accept_until) {
            return nullptr;
        }
        _building.assign(len, 0xEE);
        return _building.data();
    }
    void end_frame(uint16_t vnic, uint32_t dst_ip_be, uint32_t len) override {
        EXPECT_EQ(len, _building.size());
        frames.push_back({vnic, dst_ip_be, _building});
        ++sent;
    }

    uint16_t local_vnic(uint16_t, uint32_t dst_ip_be) const override {
        if (!same_host) {
            return no_local_vnic;
        }
        return dst_ip_be == htonl(0xC6130101)   ? 0
               : dst_ip_be == htonl(0xC6130102) ? 1
                                                : no_local_vnic;
    }
    void count_local(uint16_t, uint16_t, uint64_t bytes) override { local_bytes += bytes; }
    qos::ingress_meter* receiving_meter(uint16_t vnic) override {
        return vnic < meters.size() ? meters[vnic] : nullptr;
    }
    // The security groups after a policy change: (vNIC, peer) pairs no longer allowed.
    bool admits_connection(uint16_t vnic, uint32_t remote_ip_be) override {
        ++connection_checks;
        return std::find(refused.begin(), refused.end(), std::make_pair(vnic, remote_ip_be)) ==
               refused.end();
    }

    std::deque<frame> frames;
    uint64_t sent = 0;
    uint64_t local_bytes = 0;
    bool refuse_buffers = false;
    uint64_t accept_until = UINT64_MAX;  // the port is full once `sent` reaches it
    bool same_host = false;              // local_vnic() finds the peer: the intra-host shortcut
    std::array<qos::ingress_meter*, 2> meters{};  // each vNIC's ingress meter, if shaped
    std::vector<std::pair<uint16_t, uint32_t>> refused;
    uint64_t connection_checks = 0;

  private:
    std::vector<uint8_t> _building;
};

// One side of a connection: a vNIC's resources, a registered region, CQs and a QP, plus the
// test's own mappings of the region, the QP ring and the CQ rings (the shim's view).
struct side {
    uint64_t client = 0;
    uint16_t vnic = 0;  // its slot: QP numbers are per vNIC, so two sides' may be equal
    std::unique_ptr<verbs::vnic_resources> res;
    uint32_t pd = 0, mr = 0, scq = 0, rcq = 0, qp = 0;
    int region_fd = -1;
    std::byte* region = nullptr;  // the test's mapping of the MR's pages
    proto::qp_ring_header* ring = nullptr;
    std::size_t ring_bytes = 0;
    proto::cq_ring_header* send_cq = nullptr;
    proto::cq_ring_header* recv_cq = nullptr;
    std::size_t send_cq_bytes = 0, recv_cq_bytes = 0;
    uint32_t cq_capacity = 0;
    uint32_t sq_posted = 0, rq_posted = 0;
    uint32_t send_consumed = 0, recv_consumed = 0;

    ~side() {
        if (res) {
            res->release_client(client);
        }
        munmap(region, region_bytes);
        munmap(ring, ring_bytes);
        munmap(send_cq, send_cq_bytes);
        munmap(recv_cq, recv_cq_bytes);
        close(region_fd);
    }

    uint64_t iova(std::size_t offset) const { return region_iova + offset; }

    void post_send(const proto::send_wqe& w) {
        proto::sq_slots(ring)[sq_posted & (ring->sq_capacity - 1)] = w;
        proto::publish_wqes(ring->sq_producer, ++sq_posted);
    }
    void post_recv(uint64_t wr_id, std::size_t offset, uint32_t length) {
        proto::recv_wqe w{};
        w.wr_id = wr_id;
        w.num_sge = 1;
        w.sg[0] = {iova(offset), length, mr};
        proto::rq_slots(ring, ring->sq_capacity)[rq_posted & (ring->rq_capacity - 1)] = w;
        proto::publish_wqes(ring->rq_producer, ++rq_posted);
    }
    bool poll(proto::cq_ring_header* cq, uint32_t& consumed, proto::cqe& out) {
        if (proto::load_producer_acquire(*cq) == consumed) {
            return false;
        }
        out = proto::cq_slots(cq)[consumed & (cq_capacity - 1)];
        proto::release_slots(*cq, ++consumed);
        return true;
    }
    bool poll_send(proto::cqe& out) { return poll(send_cq, send_consumed, out); }
    bool poll_recv(proto::cqe& out) { return poll(recv_cq, recv_consumed, out); }
};

proto::send_wqe wqe(uint64_t wr_id, ibv_wr_opcode op, uint64_t local, uint32_t length,
                    uint32_t lkey, uint64_t remote = 0, uint32_t rkey = 0) {
    proto::send_wqe w{};
    w.wr_id = wr_id;
    w.opcode = op;
    w.send_flags = IBV_SEND_SIGNALED;
    w.num_sge = 1;
    w.sg[0] = {local, length, lkey};
    w.remote_addr = remote;
    w.rkey = rkey;
    return w;
}

class rc_qp_test : public ::testing::Test {
  protected:
    // JAKIRO_TEST_SEED reruns the randomised tests with another seed.
    static uint32_t GetParamSeed() {
        const char* env = std::getenv("JAKIRO_TEST_SEED");
        return env != nullptr ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : 42;
    }

    static constexpr uint32_t ip_a = 0xC6130101;  // 198.19.1.1
    static constexpr uint32_t ip_b = 0xC6130102;  // 198.19.1.2
    static constexpr uint32_t ip_stranger = 0xC6130109;

    void SetUp() override {
        make_side(a, 0, ip_a, 101);
        make_side(b, 1, ip_b, 202);
    }

    void make_side(side& s, uint16_t slot, uint32_t ip, uint64_t client, uint32_t quota = 4) {
        s.client = client;
        s.vnic = slot;
        verbs::vnic_quota limits;
        limits.max_qps = quota;
        s.res = std::make_unique<verbs::vnic_resources>(verbs::engine_limits(),
                                                        verbs::cq_error_sink{}, limits);
        verbs::qp_support support;
        support.engine = &eng;
        support.local.vnic = slot;
        support.local.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(slot + 1)};
        support.local.ip_be = htonl(ip);
        support.limits.max_mtu = IBV_MTU_4096;
        support.events = {[](void* self, uint64_t, uint32_t type, uint32_t) {
                              static_cast<rc_qp_test*>(self)->events.push_back(type);
                          },
                          this};
        // The security groups as ibv_modify_qp meets them: `denied` peers get EACCES.
        support.admit = [this, slot](uint32_t remote_ip_be) {
            return std::find(denied.begin(), denied.end(), std::make_pair(slot, remote_ip_be)) !=
                           denied.end()
                       ? EACCES
                       : 0;
        };
        s.res->enable_qps(support);
        ASSERT_EQ(s.res->alloc_pd(client, s.pd), 0);
        s.region_fd = memfd_create("test-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ASSERT_EQ(ftruncate(s.region_fd, region_bytes), 0);
        ASSERT_EQ(fcntl(s.region_fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
        s.region = static_cast<std::byte*>(
            mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.region_fd, 0));
        auto mr = proto::make_message<proto::reg_mr_request>(
            static_cast<uint16_t>(proto::opcode::reg_mr), 1);
        mr.pd_handle = s.pd;
        mr.access = proto::mr_access_all;
        mr.addr = region_iova;
        mr.iova = region_iova;
        mr.length = region_bytes;
        ASSERT_EQ(s.res->reg_mr(client, mr, s.region_fd, s.mr), 0);
        verbs::cq_created scq, rcq;
        auto cq = proto::make_message<proto::create_cq_request>(
            static_cast<uint16_t>(proto::opcode::create_cq), 1);
        cq.cqe = 4096;
        int no_channel = -1;
        ASSERT_EQ(s.res->create_cq(client, cq, no_channel, scq), 0);
        ASSERT_EQ(s.res->create_cq(client, cq, no_channel, rcq), 0);
        s.scq = scq.handle;
        s.rcq = rcq.handle;
        s.cq_capacity = scq.capacity;
        s.send_cq_bytes = scq.ring_bytes;
        s.recv_cq_bytes = rcq.ring_bytes;
        s.send_cq = static_cast<proto::cq_ring_header*>(
            mmap(nullptr, scq.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, scq.ring_fd, 0));
        s.recv_cq = static_cast<proto::cq_ring_header*>(
            mmap(nullptr, rcq.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, rcq.ring_fd, 0));
        close(scq.ring_fd);
        close(rcq.ring_fd);
        verbs::qp_created q;
        ASSERT_EQ(s.res->create_qp(client, qp_request(s), q), 0);
        s.qp = q.handle;
        s.ring_bytes = q.ring_bytes;
        s.ring = static_cast<proto::qp_ring_header*>(
            mmap(nullptr, q.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, q.ring_fd, 0));
        close(q.ring_fd);
        close(q.doorbell_fd);
    }

    proto::create_qp_request qp_request(const side& s) const {
        auto r = proto::make_message<proto::create_qp_request>(
            static_cast<uint16_t>(proto::opcode::create_qp), 1);
        r.pd_handle = s.pd;
        r.send_cq = s.scq;
        r.recv_cq = s.rcq;
        r.max_send_wr = 512;
        r.max_recv_wr = 512;
        r.max_send_sge = 4;
        r.max_recv_sge = 4;
        r.max_inline_data = 64;
        r.qp_type = qp_type;
        return r;
    }

    int modify(side& s, const ibv_qp_attr& attr, int mask) {
        return s.res->modify_qp(s.client, s.qp, verbs_proto::to_wire(attr), mask);
    }

    // RESET -> INIT -> RTR -> RTS towards `peer` at `peer_ip`, path MTU 1024.
    void connect(side& s, const side& peer, uint32_t peer_ip, uint8_t retry_cnt = 7,
                 uint8_t rnr_retry = 7, uint8_t timeout = 14) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qp_access_flags = qp_access;
        ASSERT_EQ(
            modify(s, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
        attr = {};
        attr.qp_state = IBV_QPS_RTR;
        attr.path_mtu = IBV_MTU_1024;
        attr.dest_qp_num = peer.qp;
        attr.rq_psn = 0x123456 ^ peer.qp;
        attr.max_dest_rd_atomic = 16;
        attr.min_rnr_timer = 1;
        attr.ah_attr.is_global = 1;
        attr.ah_attr.port_num = 1;
        attr.ah_attr.grh.dgid.raw[10] = 0xff;
        attr.ah_attr.grh.dgid.raw[11] = 0xff;
        const uint32_t be = htonl(peer_ip);
        std::memcpy(attr.ah_attr.grh.dgid.raw + 12, &be, 4);
        // UC has no responder resources and no RNR (IB spec 11.2.4.2's tables).
        const int rc_only =
            qp_type == proto::qpt_uc ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        ASSERT_EQ(modify(s, attr,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | rc_only),
                  0);
        attr = {};
        attr.qp_state = IBV_QPS_RTS;
        attr.timeout = timeout;
        attr.retry_cnt = retry_cnt;
        attr.rnr_retry = rnr_retry;
        attr.sq_psn = 0x123456 ^ s.qp;
        attr.max_rd_atomic = 16;
        const int rc_only_rts =
            qp_type == proto::qpt_uc
                ? 0
                : IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE | IBV_QP_SQ_PSN | rc_only_rts), 0);
    }

    // Fresh sides (a new QP pair) for tests that run several connections.
    void TearDownSides() {
        a.~side();
        new (&a) side();
        b.~side();
        new (&b) side();
    }

    void connect_both() {
        connect(a, b, ip_b);
        connect(b, a, ip_a);
    }

    // Runs the engine and the wire for `steps` iterations of `step_ns` virtual time each;
    // `keep` decides the fate of each frame (true: deliver).
    void run(unsigned steps, uint64_t step_ns = 10'000,
             const std::function<bool(const test_wire::frame&)>& keep = {}) {
        for (unsigned i = 0; i < steps; ++i) {
            now += step_ns;
            eng.poll(wire, now);
            std::deque<test_wire::frame> batch;
            batch.swap(wire.frames);
            if (reorder) {
                // netem-style: some frames overtake the one before them.
                for (std::size_t k = 1; k < batch.size(); ++k) {
                    if (reorder_rng() % 100 < 10) {
                        std::swap(batch[k - 1], batch[k]);
                    }
                }
            }
            for (auto& f : batch) {
                const bool kept = !keep || keep(f);
                if (std::getenv("JAKIRO_TRACE") != nullptr) {
                    const uint8_t* bth = f.bytes.data() + 42;
                    std::printf("%s %u->%s op %02x psn %06x%s\n", kept ? "  " : "XX", f.from,
                                f.dst_ip_be == htonl(ip_a) ? "a" : "b", bth[0],
                                (bth[9] << 16) | (bth[10] << 8) | bth[11],
                                bth[0] == 0x11 ? (bth[12] == 0 ? " ack" : " nak") : "");
                }
                if (!kept) {
                    continue;
                }
                const uint16_t to = f.dst_ip_be == htonl(ip_a) ? 0 : 1;
                const uint8_t* ip = f.bytes.data() + 14;
                eng.receive(to, ip, static_cast<uint32_t>(f.bytes.size() - 14), wire, now);
            }
        }
    }

    void fill(side& s, std::size_t offset, std::size_t length, uint32_t seed) {
        std::mt19937 rng(seed);
        for (std::size_t i = 0; i < length; ++i) {
            s.region[offset + i] = static_cast<std::byte>(rng());
        }
    }
    bool same(const side& x, std::size_t xo, const side& y, std::size_t yo, std::size_t len) {
        return std::memcmp(x.region + xo, y.region + yo, len) == 0;
    }

    uint8_t qp_type = proto::qpt_rc;  // of the QPs make_side creates
    // What connect() lets peers do (IBV_QP_ACCESS_FLAGS).
    unsigned qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC;
    std::vector<std::pair<uint16_t, uint32_t>> denied;  // (vNIC slot, peer) for admit
    engine eng{3, 16};  // vNIC slots 0 (a), 1 (b) and 2 (a third tenant)
    test_wire wire;
    side a, b;
    uint64_t now = 1'000'000'000;
    bool reorder = false;
    std::mt19937 reorder_rng{GetParamSeed() + 1};
    std::vector<uint32_t> events;
};

TEST_F(rc_qp_test, send_of_every_size_lands_in_the_receive_buffer_with_its_length) {
    connect_both();
    const uint32_t sizes[] = {0, 1, 2, 3, 4, 1023, 1024, 1025, 4096, 65536};
    uint64_t id = 0;
    for (uint32_t size : sizes) {
        fill(a, 0, size, size);
        std::memset(b.region + 0x80000, 0, 65536 + 16);
        b.post_recv(1000 + id, 0x80000, 65536 + 16);
        a.post_send(wqe(id, IBV_WR_SEND, a.iova(0), size, a.mr));
        run(200);
        proto::cqe c{};
        for (int d = 0; d < static_cast<int>(engine_drop::count); ++d) {
            EXPECT_EQ(eng.counters().drops[d].load(), 0u)
                << engine_drop_name(static_cast<engine_drop>(d));
        }
        ASSERT_TRUE(a.poll_send(c)) << size << " sent " << wire.sent;
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.opcode, IBV_WC_SEND);
        ASSERT_TRUE(b.poll_recv(c)) << size;
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.wr_id, 1000 + id);
        EXPECT_EQ(c.opcode, IBV_WC_RECV);
        EXPECT_EQ(c.byte_len, size);
        EXPECT_EQ(c.qp_num, b.qp);
        EXPECT_EQ(c.src_qp, a.qp);
        EXPECT_TRUE(same(a, 0, b, 0x80000, size)) << size;
        EXPECT_EQ(static_cast<uint8_t>(b.region[0x80000 + size]), 0) << "nothing past the message";
        ++id;
    }
}

// jakirod removes a vNIC while its worker is stalled for longer than a verbs call waits: the
// vNIC's QPs leave the engine only when the worker comes back, after the vNIC's objects went.
// A packet the worker meets first (it receives before it runs queued calls) still reaches such
// a QP: it must find no key in the vNIC's MR table (kept alive by the QP, emptied), never a
// freed table, and write nothing into the tenant's memory.
TEST_F(rc_qp_test, a_vnic_removed_while_its_worker_is_stalled_leaves_its_qps_no_freed_table) {
    connect_both();
    fill(a, 0, 8192, 5);
    std::memset(b.region, 0, 8192);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 8192, a.mr, b.iova(0), b.mr));
    now += 10'000;
    eng.poll(wire, now);  // a's WRITE leaves; b's side has not received it
    ASSERT_FALSE(wire.frames.empty());
    // The worker stalls: calls wait 20 ms for it, then give up (removals stay queued).
    eng.set_call_timeout(std::chrono::milliseconds(20));
    eng.attach();
    b.res->release_client(b.client);  // the channel server drops the vNIC's clients...
    b.res.reset();                    // ...and its objects go
    ASSERT_NE(eng.find(1, b.qp), nullptr) << "the worker has not run the removal yet";
    // The worker comes back and receives before it polls.
    for (const auto& f : wire.frames) {
        eng.receive(1, f.bytes.data() + 14, static_cast<uint32_t>(f.bytes.size() - 14), wire, now);
    }
    wire.frames.clear();
    EXPECT_EQ(std::count(b.region, b.region + 8192, std::byte{0}), 8192)
        << "nothing lands in the memory of a vNIC that is gone";
    eng.poll(wire, now);  // the queued removal runs
    EXPECT_EQ(eng.find(1, b.qp), nullptr);
    eng.detach();
}

TEST_F(rc_qp_test, write_and_read_move_scattered_buffers_and_write_with_imm_completes_a_recv) {
    connect_both();
    fill(a, 0, 70000, 7);
    auto w = wqe(1, IBV_WR_RDMA_WRITE_WITH_IMM, a.iova(0), 30000, a.mr, b.iova(0x10000), b.mr);
    w.num_sge = 3;
    w.sg[1] = {a.iova(40000), 20000, a.mr};
    w.sg[2] = {a.iova(0), 5000, a.mr};
    w.imm_data = htonl(0xCAFE);
    b.post_recv(77, 0x90000, 16);
    a.post_send(w);
    run(300);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_TRUE(same(a, 0, b, 0x10000, 30000));
    EXPECT_TRUE(same(a, 40000, b, 0x10000 + 30000, 20000));
    EXPECT_TRUE(same(a, 0, b, 0x10000 + 50000, 5000));
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(c.wr_id, 77u);
    EXPECT_EQ(c.imm_data, htonl(0xCAFE));
    EXPECT_NE(c.wc_flags & IBV_WC_WITH_IMM, 0u);

    fill(b, 0x40000, 65536, 9);
    a.post_send(wqe(2, IBV_WR_RDMA_READ, a.iova(0xA0000), 65536, a.mr, b.iova(0x40000), b.mr));
    run(300);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(c.byte_len, 65536u);
    EXPECT_TRUE(same(a, 0xA0000, b, 0x40000, 65536));
}

// The initiator depth: with max_rd_atomic 16, a 17th READ waits until one of the 16 has its
// responses, though the send window has room for all 24 (8 KiB, 8 packets each). A requester
// that sent them all would exceed the responder's max_dest_rd_atomic, which refuses the rest.
TEST_F(rc_qp_test, a_requester_keeps_no_more_reads_outstanding_than_max_rd_atomic) {
    connect_both();
    constexpr uint32_t reads = 24, bytes = 8192;
    fill(b, 0, reads * bytes, 5);
    for (uint32_t i = 0; i < reads; ++i) {
        a.post_send(wqe(100 + i, IBV_WR_RDMA_READ, a.iova(0x80000 + i * bytes), bytes, a.mr,
                        b.iova(i * bytes), b.mr));
    }
    unsigned requests = 0;
    run(1, 10'000, [&](const test_wire::frame& f) {  // b has answered none of them yet
        requests += f.bytes[42] == opcode::rc_read_request ? 1 : 0;
        return true;
    });
    EXPECT_EQ(requests, 16u) << "max_rd_atomic is 16";
    run(3000);
    for (uint32_t i = 0; i < reads; ++i) {
        proto::cqe c{};
        ASSERT_TRUE(a.poll_send(c)) << i;
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << i;
        EXPECT_EQ(c.wr_id, 100u + i);
    }
    EXPECT_TRUE(same(a, 0x80000, b, 0, reads * bytes));
}

TEST_F(rc_qp_test, the_engines_sent_counter_counts_every_packet_on_the_wire_acks_included) {
    connect_both();
    const uint64_t before = eng.counters().sent.load();
    const uint64_t wire_before = wire.sent;
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 20000, a.mr, b.iova(0), b.mr));
    run(300);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    // The WRITE's packets come from polls, its ACKs from receiving them: one counter for both.
    EXPECT_GT(wire.sent - wire_before, 20000u / 4096);
    EXPECT_EQ(eng.counters().sent.load() - before, wire.sent - wire_before);
}

TEST_F(rc_qp_test, loss_duplication_and_reordering_lose_duplicate_and_corrupt_nothing) {
    connect_both();
    reorder = true;
    std::mt19937 rng(GetParamSeed());
    uint64_t frames = 0;
    auto lossy = [&](const test_wire::frame& f) {
        (void)f;
        ++frames;
        return rng() % 100 >= 5;  // 5 % loss, both directions, ACKs included
    };
    constexpr int ops = 120;
    std::uniform_int_distribution<uint32_t> size(1, 20000);
    std::vector<uint32_t> sizes;
    for (int i = 0; i < ops; ++i) {
        sizes.push_back(size(rng));
    }
    // Each op has its own 24 KiB window on both sides, so every byte can be checked at the end.
    for (int i = 0; i < ops; ++i) {
        const std::size_t off = static_cast<std::size_t>(i % 40) * 24576;
        fill(a, off, sizes[i], 100 + i);
        switch (i % 3) {
            case 0:
                b.post_recv(i, off, 24576);
                a.post_send(wqe(i, IBV_WR_SEND, a.iova(off), sizes[i], a.mr));
                break;
            case 1:
                a.post_send(
                    wqe(i, IBV_WR_RDMA_WRITE, a.iova(off), sizes[i], a.mr, b.iova(off), b.mr));
                break;
            default:
                fill(b, off, sizes[i], 500 + i);
                a.post_send(
                    wqe(i, IBV_WR_RDMA_READ, a.iova(off), sizes[i], a.mr, b.iova(off), b.mr));
                break;
        }
        if (i % 40 == 39 || i == ops - 1) {
            // Drain before the windows are reused.
            int expected = i % 40 + 1;
            int got = 0;
            for (int round = 0; round < 2000 && got < expected; ++round) {
                run(10, 100'000, lossy);
                proto::cqe c{};
                while (a.poll_send(c)) {
                    ASSERT_EQ(c.status, IBV_WC_SUCCESS) << "wr " << c.wr_id;
                    ASSERT_EQ(c.wr_id, static_cast<uint64_t>(i - expected + 1 + got)) << "in order";
                    ++got;
                }
            }
            if (got != expected) {
                for (const auto& r : eng.report()) {
                    std::printf(
                        "qp %x state %u next %x una %x epsn %x sent %lu rx %lu rtx %lu to %lu nak "
                        "%lu/%lu dup %lu oos %lu rnr %lu/%lu\n",
                        r.qpn, r.state, r.next_psn, r.una_psn, r.expected_psn, r.packets_sent,
                        r.packets_received, r.retransmitted, r.timeouts, r.naks_sent,
                        r.naks_received, r.duplicates, r.out_of_sequence, r.rnr_naks_sent,
                        r.rnr_naks_received);
                }
            }
            ASSERT_EQ(got, expected);
            for (int j = i - expected + 1; j <= i; ++j) {
                const std::size_t off = static_cast<std::size_t>(j % 40) * 24576;
                EXPECT_TRUE(same(a, off, b, off, sizes[j])) << "op " << j;
            }
        }
    }
    run(200, 100'000, lossy);
    proto::cqe c{};
    int recvs = 0;
    while (b.poll_recv(c)) {
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.byte_len, sizes[c.wr_id]) << "each SEND delivered exactly once";
        ++recvs;
    }
    EXPECT_EQ(recvs, ops / 3);
    const auto reports = eng.report();
    uint64_t retransmitted = 0;
    for (const auto& r : reports) {
        retransmitted += r.retransmitted;
    }
    EXPECT_GT(retransmitted, 0u);
}

TEST_F(rc_qp_test, protection_violations_complete_with_the_matching_status_and_touch_nothing) {
    struct violation {
        const char* what;
        std::function<proto::send_wqe(side&, side&)> make;
        ibv_wc_status expected;
    };
    const violation cases[] = {
        {"bad rkey",
         [](side& x, side& y) {
             return wqe(1, IBV_WR_RDMA_WRITE, x.iova(0), 64, x.mr, y.iova(0), y.mr ^ 0x55);
         },
         IBV_WC_REM_ACCESS_ERR},
        {"out of bounds",
         [](side& x, side& y) {
             return wqe(1, IBV_WR_RDMA_WRITE, x.iova(0), 64, x.mr, y.iova(region_bytes - 32), y.mr);
         },
         IBV_WC_REM_ACCESS_ERR},
        {"bad lkey",
         [](side& x, side& y) {
             return wqe(1, IBV_WR_RDMA_WRITE, x.iova(0), 64, x.mr + 0x100, y.iova(0), y.mr);
         },
         IBV_WC_LOC_PROT_ERR},
    };
    for (const auto& v : cases) {
        SCOPED_TRACE(v.what);
        TearDownSides();
        make_side(a, 0, ip_a, 101);
        make_side(b, 1, ip_b, 202);
        connect_both();
        fill(a, 0, 64, 1);
        std::memset(b.region, 0x5A, region_bytes);
        a.post_send(v.make(a, b));
        a.post_send(wqe(2, IBV_WR_SEND, a.iova(0), 8, a.mr));
        run(100);
        proto::cqe c{};
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, 1u);
        EXPECT_EQ(c.status, v.expected);
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, 2u);
        EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR) << "the QP is in error: the rest is flushed";
        for (std::size_t i = 0; i < region_bytes; i += 97) {
            ASSERT_EQ(static_cast<uint8_t>(b.region[i]), 0x5A) << "responder memory untouched";
        }
    }
}

TEST_F(rc_qp_test, a_write_to_a_region_without_remote_write_access_is_refused) {
    // b registers a second, read-only region (remote read only) and a targets it.
    auto mr =
        proto::make_message<proto::reg_mr_request>(static_cast<uint16_t>(proto::opcode::reg_mr), 1);
    mr.pd_handle = b.pd;
    mr.access = proto::access_remote_read;
    mr.addr = mr.iova = region_iova;
    mr.length = 4096;
    uint32_t ro = 0;
    ASSERT_EQ(b.res->reg_mr(b.client, mr, b.region_fd, ro), 0);
    connect_both();
    std::memset(b.region, 0x33, 4096);
    a.post_send(wqe(9, IBV_WR_RDMA_WRITE, a.iova(0), 16, a.mr, b.iova(0), ro));
    run(100);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0x33);
    EXPECT_NE(std::find(events.begin(), events.end(),
                        static_cast<uint32_t>(proto::event_type::qp_access_err)),
              events.end())
        << "the responder's owner hears IBV_EVENT_QP_ACCESS_ERR";
}

// IB spec C9-88: a zero-length RDMA WRITE or READ is not checked against any MR, whatever its
// R_Key and VA. UCX's rc_verbs flushes an endpoint with a zero-length WRITE, rkey 0, VA 0.
TEST_F(rc_qp_test, zero_length_writes_and_reads_need_no_valid_rkey_over_the_wire_or_on_one_host) {
    for (const bool same_host : {false, true}) {
        SCOPED_TRACE(same_host ? "on one host" : "over the wire");
        TearDownSides();
        make_side(a, 0, ip_a, 101);
        make_side(b, 1, ip_b, 202);
        wire.same_host = same_host;
        connect_both();
        auto write = wqe(1, IBV_WR_RDMA_WRITE, 0, 0, 0, 0, 0);
        write.num_sge = 0;
        auto read = wqe(2, IBV_WR_RDMA_READ, 0, 0, 0, 0, 0);
        read.num_sge = 0;
        a.post_send(write);
        a.post_send(read);
        a.post_send(wqe(3, IBV_WR_RDMA_WRITE, a.iova(0), 16, a.mr, b.iova(0), b.mr));
        run(100);
        proto::cqe c{};
        for (uint64_t id = 1; id <= 3; ++id) {
            ASSERT_TRUE(a.poll_send(c));
            EXPECT_EQ(c.wr_id, id);
            EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "WR " << id;
        }
        EXPECT_TRUE(events.empty()) << "no access error event at the responder";
    }
}

TEST_F(rc_qp_test, rnr_naks_wait_for_a_receive_and_give_up_after_rnr_retry) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    run(50);
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "no receive posted: RNR NAK, retry";
    b.post_recv(5, 0, 4096);
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.byte_len, 100u);

    TearDownSides();
    make_side(a, 0, ip_a, 101);
    make_side(b, 1, ip_b, 202);
    connect(a, b, ip_b, 7, /*rnr_retry=*/2);
    connect(b, a, ip_a);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    run(100);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(rc_qp_test, a_silent_peer_exhausts_retry_cnt_after_the_local_ack_timeout) {
    connect(a, b, ip_b, /*retry_cnt=*/3, 7, /*timeout=*/8);  // 4.096 µs << 8 ≈ 1 ms
    connect(b, a, ip_a);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 10, a.mr, b.iova(0), b.mr));
    run(100, 10'000, [](const test_wire::frame&) { return false; });
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "1 ms: still retrying";
    run(1000, 10'000, [](const test_wire::frame&) { return false; });
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_RETRY_EXC_ERR);
    const auto r = eng.report();
    EXPECT_GE(r[0].timeouts + r[1].timeouts, 4u);
}

TEST_F(rc_qp_test, packets_from_anyone_but_the_connected_peer_are_dropped_and_counted) {
    connect_both();
    b.post_recv(1, 0, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 64, a.mr));
    eng.poll(wire, now);
    ASSERT_EQ(wire.frames.size(), 1u);
    auto forged = wire.frames.front();
    wire.frames.clear();
    // The same packet from another address of the VPC: RCFT mismatch.
    uint8_t* ip = forged.bytes.data() + 14;
    const uint32_t stranger = htonl(ip_stranger);
    std::memcpy(ip + 12, &stranger, 4);
    uint16_t sum = 0;
    std::memcpy(ip + 10, &sum, 2);
    store_icrc(ip + forged.bytes.size() - 14 - 4, *compute_icrc(ip, forged.bytes.size() - 14 - 4));
    eng.receive(1, ip, static_cast<uint32_t>(forged.bytes.size() - 14), wire, now);
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::not_connected)].load(), 1u);
    // To a QP number that does not exist.
    ip[20 + 8 + 7] ^= 0x7F;  // BTH DestQP, low byte
    eng.receive(1, ip, static_cast<uint32_t>(forged.bytes.size() - 14), wire, now);
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::bad_icrc)].load(), 1u)
        << "the ICRC is checked before anything is believed";
    store_icrc(ip + forged.bytes.size() - 14 - 4, *compute_icrc(ip, forged.bytes.size() - 14 - 4));
    eng.receive(1, ip, static_cast<uint32_t>(forged.bytes.size() - 14), wire, now);
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::unknown_qp)].load(), 1u);
    proto::cqe c{};
    EXPECT_FALSE(b.poll_recv(c)) << "nothing was delivered";
}

TEST_F(rc_qp_test, the_rc_qp_quota_refuses_one_more_qp_with_edquot) {
    verbs::qp_created q;
    int made = 1;  // SetUp made one
    while (made < 4) {
        ASSERT_EQ(a.res->create_qp(a.client, qp_request(a), q), 0);
        close(q.ring_fd);
        close(q.doorbell_fd);
        ++made;
    }
    EXPECT_EQ(a.res->create_qp(a.client, qp_request(a), q), EDQUOT);
    EXPECT_EQ(a.res->destroy_qp(a.client, q.handle), 0);
    EXPECT_EQ(a.res->create_qp(a.client, qp_request(a), q), 0) << "room again";
    close(q.ring_fd);
    close(q.doorbell_fd);
}

// ---- bounded work per tenant (docs/threat-model.md, "Resources tenants share")

// The shim may post into slots jakirod has retired, no further: a send producer more than a
// ring ahead of the oldest unretired WR (here: the first WR never completes, every other one
// was taken) is a broken client, even though it is only one ahead of what was taken.
TEST_F(rc_qp_test, a_send_producer_beyond_retired_plus_capacity_moves_the_qp_to_err) {
    connect_both();
    const uint32_t capacity = a.ring->sq_capacity;
    for (uint32_t i = 0; i < capacity; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    }
    auto nothing = [](const test_wire::frame&) { return false; };
    run(50, 1'000, nothing);  // every WR taken and sent, none acknowledged
    ASSERT_EQ(eng.report()[0].state, IBV_QPS_RTS);
    ASSERT_EQ(proto::load_posted_acquire(a.ring->sq_consumer), 0u) << "nothing retired";
    // One more: the slot of WR 0, which jakirod still holds.
    a.post_send(wqe(capacity, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    run(1, 1'000, nothing);
    EXPECT_EQ(eng.report()[0].state, IBV_QPS_ERR);
    EXPECT_EQ(std::count(events.begin(), events.end(),
                         static_cast<uint32_t>(proto::event_type::qp_fatal)),
              1);
}

// The same for the receive queue: a producer more than a ring ahead of what was retired is
// met at the next receive, and the QP goes to ERR instead of RNR-NAKing forever.
TEST_F(rc_qp_test, a_recv_producer_beyond_retired_plus_capacity_moves_the_qp_to_err) {
    connect_both();
    const uint32_t capacity = b.ring->rq_capacity;
    b.rq_posted = capacity + 1;
    proto::publish_wqes(b.ring->rq_producer, b.rq_posted);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 8, a.mr));
    run(20);
    EXPECT_EQ(eng.report()[1].state, IBV_QPS_ERR);
    EXPECT_EQ(std::count(events.begin(), events.end(),
                         static_cast<uint32_t>(proto::event_type::qp_fatal)),
              1);
}

// A tenant fills its rings, stalls the first WR and moves the QP to ERR: the flush goes over
// several polls, each within its vNIC's units, and every WR completes exactly once, in order,
// with IBV_WC_WR_FLUSH_ERR.
TEST_F(rc_qp_test, a_full_qp_in_err_is_flushed_over_several_polls_each_within_its_vnics_units) {
    connect_both();
    const uint32_t sq = a.ring->sq_capacity;
    const uint32_t rq = a.ring->rq_capacity;
    for (uint32_t i = 0; i < sq; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    }
    auto nothing = [](const test_wire::frame&) { return false; };
    run(3, 1'000, nothing);  // some taken (and sent: the first WR stalls), the rest posted
    for (uint32_t i = 0; i < rq; ++i) {
        a.post_recv(10'000 + i, 0, 64);
    }
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    std::vector<uint64_t> sends, recvs;
    unsigned visits = 0;
    while (sends.size() < sq || recvs.size() < rq) {
        ASSERT_LT(visits, 1000u) << "the flush stalled";
        now += 1'000;
        eng.poll(wire, now);
        ++visits;
        std::size_t this_visit = 0;
        proto::cqe c{};
        while (a.poll_send(c)) {
            EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
            sends.push_back(c.wr_id);
            ++this_visit;
        }
        while (a.poll_recv(c)) {
            EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
            recvs.push_back(c.wr_id);
            ++this_visit;
        }
        EXPECT_LE(this_visit, engine::vnic_units_per_poll) << "poll " << visits;
    }
    EXPECT_GE(visits, (sq + rq) / engine::vnic_units_per_poll);
    for (uint32_t i = 0; i < sq; ++i) {
        EXPECT_EQ(sends[i], i) << "in order";
    }
    for (uint32_t i = 0; i < rq; ++i) {
        EXPECT_EQ(recvs[i], 10'000 + i) << "in order";
    }
    run(10);
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "exactly once";
    EXPECT_FALSE(a.poll_recv(c)) << "exactly once";
    EXPECT_EQ(proto::load_posted_acquire(a.ring->sq_consumer), sq) << "every slot handed back";
}

// One cumulative ACK that finishes a whole ring of WRs completes them over several polls,
// at most the vNIC's units at a time, in order, each once and successfully.
TEST_F(rc_qp_test, an_ack_that_finishes_a_full_ring_completes_it_within_its_vnics_units_per_poll) {
    connect_both();
    const uint32_t sq = a.ring->sq_capacity;
    for (uint32_t i = 0; i < sq; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    }
    std::vector<test_wire::frame> acks;
    run(50, 1'000, [&](const test_wire::frame& f) {
        if (f.from == 1) {
            acks.push_back(f);  // b's ACKs are held back
            return false;
        }
        return true;
    });
    ASSERT_FALSE(acks.empty());
    proto::cqe c{};
    ASSERT_FALSE(a.poll_send(c)) << "nothing acknowledged yet";
    // The last ACK acknowledges everything at once.
    auto& last = acks.back();
    eng.receive(0, last.bytes.data() + 14, static_cast<uint32_t>(last.bytes.size() - 14), wire,
                now);
    std::vector<uint64_t> done;
    unsigned visits = 0;
    for (;;) {
        std::size_t this_visit = 0;
        while (a.poll_send(c)) {
            EXPECT_EQ(c.status, IBV_WC_SUCCESS);
            done.push_back(c.wr_id);
            ++this_visit;
        }
        EXPECT_LE(this_visit, engine::vnic_units_per_poll) << "poll " << visits;
        if (done.size() >= sq || visits > 100) {
            break;
        }
        ++visits;
        now += 1'000;
        eng.poll(wire, now);
        wire.frames.clear();
    }
    ASSERT_EQ(done.size(), sq);
    EXPECT_GE(visits, sq / engine::vnic_units_per_poll - 1);
    for (uint32_t i = 0; i < sq; ++i) {
        EXPECT_EQ(done[i], i) << "in order";
    }
}

// ---- engine::call: a timed-out call leaves nothing half done

TEST(engine_call, a_call_the_worker_never_started_times_out_and_never_runs) {
    engine e{1, 16};
    e.attach();  // a worker "exists" but does not poll during the wait
    e.set_call_timeout(std::chrono::milliseconds(20));
    bool ran = false;
    EXPECT_EQ(e.call([&] {
        ran = true;
        return 0;
    }),
              ETIMEDOUT);
    test_wire w;
    e.poll(w, 0);  // the worker comes back
    EXPECT_FALSE(ran) << "cancelled: it must not run after its caller gave up";
    e.detach();
    EXPECT_FALSE(ran);
}

TEST(engine_call, a_removal_that_times_out_still_runs_when_the_worker_comes) {
    engine e{1, 16};
    e.attach();
    e.set_call_timeout(std::chrono::milliseconds(20));
    bool ran = false;
    EXPECT_EQ(e.call(
                  [&] {
                      ran = true;
                      return 0;
                  },
                  engine::on_timeout::run_later),
              ETIMEDOUT);
    test_wire w;
    e.poll(w, 0);
    EXPECT_TRUE(ran);
    e.detach();
}

TEST(engine_call, a_call_the_worker_started_before_the_timeout_returns_its_result) {
    engine e{1, 16};
    e.attach();
    e.set_call_timeout(std::chrono::milliseconds(200));
    std::atomic<bool> stop{false}, polling{false};
    std::thread worker([&] {
        test_wire w;
        while (!stop.load()) {
            e.poll(w, 0);
            polling = true;
        }
    });
    while (!polling.load()) {
        std::this_thread::yield();
    }
    const int result = e.call([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past the timeout
        return 42;
    });
    EXPECT_EQ(result, 42) << "it ran: its caller must see what it did";
    stop = true;
    worker.join();
    e.detach();
}

TEST_F(rc_qp_test, a_create_qp_that_times_out_adds_no_qp_to_the_engine_or_the_quota) {
    eng.attach();  // a worker that does not run during the call
    eng.set_call_timeout(std::chrono::milliseconds(20));
    const auto before = a.res->count();
    verbs::qp_created q;
    EXPECT_EQ(a.res->create_qp(a.client, qp_request(a), q), ETIMEDOUT);
    eng.poll(wire, now);  // the worker comes back
    EXPECT_EQ(eng.report().size(), 2u) << "only SetUp's QPs run";
    EXPECT_EQ(a.res->count().qps, before.qps);
    EXPECT_EQ(a.res->count().wqes, before.wqes);
    eng.detach();
    // And the slot is free again: with a live worker the same create succeeds.
    ASSERT_EQ(a.res->create_qp(a.client, qp_request(a), q), 0);
    EXPECT_EQ(eng.report().size(), 3u);
    close(q.ring_fd);
    close(q.doorbell_fd);
}

// max_wqes counts every SQ, RQ and SRQ slot as allocated; max_qps and max_srqs count objects;
// lowering them live refuses new ones and keeps the QPs that run.
TEST_F(rc_qp_test, wqe_qp_and_srq_quotas_refuse_with_edquot_and_change_live) {
    verbs::vnic_quota q = a.res->quota();
    ASSERT_EQ(a.res->count().wqes, 1024u) << "SetUp's QP: 512 + 512";
    q.max_wqes = 1024 + 512 + 256;
    q.max_srqs = 1;
    a.res->set_quota(q);
    verbs::qp_created made;
    auto req = qp_request(a);
    EXPECT_EQ(a.res->create_qp(a.client, req, made), EDQUOT) << "512 + 512 more";
    req.max_send_wr = 300;  // a ring of 512
    req.max_recv_wr = 200;  // a ring of 256
    ASSERT_EQ(a.res->create_qp(a.client, req, made), 0) << "exactly the quota";
    close(made.ring_fd);
    close(made.doorbell_fd);
    EXPECT_EQ(a.res->count().wqes, 1024u + 512 + 256);
    auto srq = proto::make_message<proto::create_srq_request>(
        static_cast<uint16_t>(proto::opcode::create_srq), 1);
    srq.pd_handle = a.pd;
    srq.max_wr = 1;
    verbs::srq_created s1, s2;
    EXPECT_EQ(a.res->create_srq(a.client, srq, s1), EDQUOT) << "no slot left for its ring";
    ASSERT_EQ(a.res->destroy_qp(a.client, made.handle), 0);
    EXPECT_EQ(a.res->count().wqes, 1024u) << "given back";
    ASSERT_EQ(a.res->create_srq(a.client, srq, s1), 0);
    close(s1.ring_fd);
    EXPECT_EQ(a.res->create_srq(a.client, srq, s2), EDQUOT) << "max_srqs";
    // Lowered below what is held: nothing new, nothing destroyed, the QP keeps working.
    q.max_qps = 0;
    a.res->set_quota(q);
    req = qp_request(a);
    req.max_send_wr = req.max_recv_wr = 1;
    EXPECT_EQ(a.res->create_qp(a.client, req, made), EDQUOT);
    connect_both();
    b.post_recv(1, 0, 64);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 64, a.mr));
    run(50);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
}

// The shaper asks, for every shaped vNIC, how much its QPs could send in one poll: only that
// vNIC's QPs are looked at, another vNIC's busy QP does not make this one look backlogged, and
// the room covers a full poll of path-MTU packets (a smaller one would hold RDMA below its
// share, a larger one lets a grant outrun the poll).
TEST_F(rc_qp_test, a_vnic_has_send_room_only_when_its_own_qps_have_work) {
    connect_both();
    EXPECT_EQ(eng.vnic_send_room(0), 0u);
    EXPECT_EQ(eng.vnic_send_room(1), 0u);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    const uint64_t room = eng.vnic_send_room(0);
    const uint64_t packets_per_poll = 8 * 32;
    const uint64_t mtu = eng.find(0, a.qp)->path_mtu_bytes();
    EXPECT_GE(room, packets_per_poll * mtu);
    EXPECT_LE(room, packets_per_poll * (mtu + 200));
    EXPECT_EQ(eng.vnic_send_room(1), 0u);
    EXPECT_EQ(eng.vnic_send_room(7), 0u) << "no such vNIC";
}

TEST_F(rc_qp_test, a_full_port_delays_packets_without_losing_them) {
    connect_both();
    fill(a, 0, 8192, 3);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 8192, a.mr, b.iova(0), b.mr));
    wire.refuse_buffers = true;
    run(20);
    wire.refuse_buffers = false;
    run(100);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 8192));
}

}  // namespace
}  // namespace jakiro::roce

namespace jakiro::roce {
namespace {

TEST_F(rc_qp_test, a_deep_send_queue_of_large_writes_all_completes) {
    connect_both();
    // perftest's ib_write_bw: 128 WRs of 64 KiB posted at once, reposted as they complete;
    // only every 16th is signaled, and a completion means its slot and those before are free.
    int completed = 0, posted = 0;
    for (; posted < 128; ++posted) {
        auto w = wqe(posted, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr);
        w.send_flags = posted % 16 == 15 ? IBV_SEND_SIGNALED : 0;
        a.post_send(w);
    }
    for (int round = 0; round < 5000 && completed < 1008; ++round) {
        run(1);
        proto::cqe c{};
        while (a.poll_send(c)) {
            ASSERT_EQ(c.status, IBV_WC_SUCCESS);
            ASSERT_GE(proto::load_retired_acquire(a.ring->sq_consumer), c.wr_id + 1)
                << "a completed WR's slot is free before its completion is visible";
            completed = static_cast<int>(c.wr_id) + 1;
            while (posted < 1008 && posted - completed < 128) {
                auto w = wqe(posted, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr);
                w.send_flags = posted % 16 == 15 ? IBV_SEND_SIGNALED : 0;
                a.post_send(w);
                ++posted;
            }
        }
    }
    EXPECT_EQ(completed, 1008);
}

}  // namespace
}  // namespace jakiro::roce

namespace jakiro::roce {
namespace {

TEST_F(rc_qp_test, on_one_host_data_moves_memory_to_memory_without_packets) {
    wire.same_host = true;
    connect_both();
    fill(a, 0, 200000, 11);
    fill(b, 0x60000, 100000, 12);
    b.post_recv(1, 0x40000, 0x10000);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 50000, a.mr));
    auto w = wqe(2, IBV_WR_RDMA_WRITE_WITH_IMM, a.iova(50000), 150000, a.mr, b.iova(0x80000), b.mr);
    w.imm_data = htonl(7);
    b.post_recv(2, 0, 0);
    a.post_send(w);
    a.post_send(wqe(3, IBV_WR_RDMA_READ, a.iova(0xC0000), 100000, a.mr, b.iova(0x60000), b.mr));
    run(5);
    EXPECT_EQ(wire.sent, 0u) << "no frame at all";
    EXPECT_EQ(wire.local_bytes, 300000u);
    proto::cqe c{};
    for (uint64_t id = 1; id <= 3; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    }
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.byte_len, 50000u);
    EXPECT_EQ(c.src_qp, a.qp);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(c.imm_data, htonl(7));
    EXPECT_TRUE(same(a, 0, b, 0x40000, 50000));
    EXPECT_TRUE(same(a, 50000, b, 0x80000, 150000));
    EXPECT_TRUE(same(b, 0x60000, a, 0xC0000, 100000));

    // The PSNs moved as if packets had: the packet path can take over at any point.
    wire.same_host = false;
    fill(a, 0, 5000, 13);
    a.post_send(wqe(4, IBV_WR_RDMA_WRITE, a.iova(0), 5000, a.mr, b.iova(0), b.mr));
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 5000));
    EXPECT_GT(wire.sent, 0u);
}

// The longest prefix of `len` bytes at which x and y agree.
std::size_t agreeing_prefix(const std::byte* x, const std::byte* y, std::size_t len) {
    std::size_t n = 0;
    while (n < len && x[n] == y[n]) {
        ++n;
    }
    return n;
}

TEST_F(rc_qp_test, on_one_host_a_large_message_moves_in_slices_of_one_visits_budget) {
    // A tenant's 1 MiB WR must not hold the worker for the whole copy: each visit moves what
    // the packets of its budget would carry, and the message completes whole at the end.
    wire.same_host = true;
    connect_both();
    fill(a, 0, region_bytes, 21);
    b.post_recv(1, 0, region_bytes);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), region_bytes, a.mr));
    const std::size_t per_visit = 8 * 32 * 1024;  // the engine's passes x packets x path MTU
    unsigned visits = 0;
    std::size_t landed = 0;
    proto::cqe c{};
    while (!b.poll_recv(c)) {
        ASSERT_LT(visits, 64u) << "the message never completed";
        now += 1'000;
        eng.poll(wire, now);
        ++visits;
        const std::size_t now_landed = agreeing_prefix(a.region, b.region, region_bytes);
        EXPECT_LE(now_landed - landed, per_visit) << "visit " << visits;
        landed = now_landed;
    }
    EXPECT_GE(visits, region_bytes / per_visit);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.byte_len, region_bytes);
    EXPECT_TRUE(same(a, 0, b, 0, region_bytes));
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wire.sent, 0u);
    EXPECT_EQ(wire.local_bytes, region_bytes);

    // WRITE and READ of the same size move the same way.
    fill(b, 0, region_bytes, 22);
    a.post_send(wqe(2, IBV_WR_RDMA_READ, a.iova(0), region_bytes, a.mr, b.iova(0), b.mr));
    run(2);
    EXPECT_FALSE(a.poll_send(c)) << "two visits cannot have moved 1 MiB";
    run(8);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, region_bytes));
}

TEST_F(rc_qp_test, on_one_host_a_receiver_over_its_rdma_share_slows_the_sender_as_a_cnp_would) {
    // Memory to memory, the receiver's ingress meter still sees every message (as the packets
    // it would have been), and above its share the sender is cut back as a CNP would cut it.
    wire.same_host = true;
    connect_both();
    fill(a, 0, region_bytes, 41);
    constexpr uint32_t write_bytes = 128 * 1024;
    auto write_eight = [&](uint64_t first_id) {
        for (uint64_t i = 0; i < 8; ++i) {
            a.post_send(wqe(first_id + i, IBV_WR_RDMA_WRITE, a.iova(i * write_bytes), write_bytes,
                            a.mr, b.iova(i * write_bytes), b.mr));
        }
        unsigned completed = 0;
        proto::cqe c{};
        for (int step = 0; step < 200'000 && completed < 8; ++step) {
            now += 10'000;
            eng.poll(wire, now);
            while (a.poll_send(c)) {
                EXPECT_EQ(c.status, IBV_WC_SUCCESS);
                ++completed;
            }
        }
        EXPECT_EQ(completed, 8u);
        EXPECT_TRUE(same(a, 0, b, 0, 8 * write_bytes));
        EXPECT_EQ(wire.sent, 0u) << "memory to memory, no frame";
    };
    const uint64_t line_rate = eng.report()[0].rate_bps;

    // The control: a receiver well within its share is charged and sends no CNP.
    qos::vnic_qos roomy{};
    roomy.rate_bps = 400'000'000'000;
    qos::ingress_meter roomy_meter(roomy, now);
    wire.meters[1] = &roomy_meter;
    for (uint64_t round = 0; round < 4; ++round) {
        write_eight(1 + 8 * round);
    }
    EXPECT_GT(roomy_meter.counters(qos::traffic_class::rdma).bytes, 4u * 8 * write_bytes)
        << "charged the data and the headers of the packets it replaces";
    EXPECT_EQ(eng.report()[0].cnps_received, 0u);
    EXPECT_EQ(eng.report()[0].rate_bps, line_rate);

    // A 200 Mbit/s receiver: far above its share, its CNP pacer lets CNPs through and the
    // sender's DCQCN rate falls; every byte still lands.
    qos::vnic_qos tight{};
    tight.rate_bps = 200'000'000;
    qos::ingress_meter tight_meter(tight, now);
    wire.meters[1] = &tight_meter;
    fill(a, 0, region_bytes, 42);
    // DCQCN's alpha decayed while the sender was quiet: the first CNPs cut little, the
    // following ones more. Each round is one MiB.
    unsigned rounds = 0;
    while (eng.report()[0].rate_bps >= line_rate / 2 && rounds < 64) {
        write_eight(100 + 8 * rounds);
        ++rounds;
    }
    const auto report = eng.report();
    EXPECT_GT(report[0].cnps_received, 1u);
    EXPECT_EQ(report[1].cnps_sent, report[0].cnps_received);
    EXPECT_EQ(tight_meter.counters(qos::traffic_class::rdma).cnps, report[0].cnps_received);
    EXPECT_LT(report[0].rate_bps, line_rate / 2) << "DCQCN cut the sender, " << rounds << " MiB";
}

TEST_F(rc_qp_test, on_one_host_a_peer_failing_mid_message_flushes_its_receive_and_loses_nothing) {
    wire.same_host = true;
    connect_both();
    fill(a, 0, region_bytes, 23);
    b.post_recv(1, 0, region_bytes);
    b.post_recv(2, 0, 64);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), region_bytes, a.mr));
    now += 1'000;
    eng.poll(wire, now);  // one visit: a slice is in b's receive buffer
    proto::cqe c{};
    ASSERT_FALSE(b.poll_recv(c));
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    run(5);
    // The receive the message had taken is flushed, in order, then the one behind it.
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 2u);
    EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
    // The sender does not complete it as delivered: it is retried as packets into nothing
    // until its retry count ends it, as on the wire.
    run(400, 100'000'000);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(rc_qp_test, on_one_host_a_missing_receive_waits_and_a_bad_rkey_fails_as_on_the_wire) {
    wire.same_host = true;
    connect_both();
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 10, a.mr));
    run(5);
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "no receive posted: waits (RNR)";
    b.post_recv(9, 0, 64);
    run(2);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    std::memset(b.region, 0x77, 4096);
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), b.mr + 0x300));
    run(2);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0x77);
    EXPECT_EQ(wire.sent, 0u);
}

}  // namespace
}  // namespace jakiro::roce

namespace jakiro::roce {
namespace {

TEST_F(rc_qp_test, a_responder_destroyed_right_after_its_last_completion_has_already_acked) {
    connect_both();
    b.post_recv(1, 0, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    eng.poll(wire, now);
    ASSERT_EQ(wire.frames.size(), 1u);
    auto send = wire.frames.front();
    wire.frames.clear();
    eng.receive(1, send.bytes.data() + 14, static_cast<uint32_t>(send.bytes.size() - 14), wire,
                now);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    // The program sees its receive and destroys the QP before the engine polls again.
    ASSERT_EQ(b.res->destroy_qp(b.client, b.qp), 0);
    ASSERT_EQ(wire.frames.size(), 1u) << "the ACK left with the completion";
    run(5);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
}

TEST_F(rc_qp_test, a_destroyed_qp_keeps_counting_in_its_vnics_retired_totals) {
    // /metrics' per-vNIC counters are the live QPs plus the retired rows: a QP that lived
    // between two scrapes (a short ib_write_bw) must still be in them, and only once.
    connect_both();
    b.post_recv(1, 0, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    run(5);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    std::vector<qp_report> retired;
    uint64_t received = 0;
    for (const auto& r : eng.report(&retired)) {
        received += r.vnic == 1 ? r.packets_received : 0;
    }
    ASSERT_GT(received, 0u);
    EXPECT_TRUE(retired.empty()) << "nothing destroyed yet";
    ASSERT_EQ(b.res->destroy_qp(b.client, b.qp), 0);
    for (const auto& r : eng.report(&retired)) {
        EXPECT_NE(r.vnic, 1) << "vNIC 1's only QP is gone from the live rows";
    }
    ASSERT_EQ(retired.size(), 1u);
    EXPECT_EQ(retired[0].vnic, 1);
    EXPECT_EQ(retired[0].packets_received, received);
    EXPECT_EQ(retired[0].completions, 1u) << "the receive";
    // The vNIC goes too (vnic_resources' destructor): a vNIC given its slot later starts at 0.
    eng.forget_vnic(1);
    eng.report(&retired);
    EXPECT_TRUE(retired.empty());
}

}  // namespace
}  // namespace jakiro::roce

namespace jakiro::roce {
namespace {

proto::send_wqe atomic_wqe(uint64_t wr_id, ibv_wr_opcode op, uint64_t local, uint32_t lkey,
                           uint64_t remote, uint32_t rkey, uint64_t compare_add, uint64_t swap) {
    auto w = wqe(wr_id, op, local, 8, lkey, remote, rkey);
    w.compare_add = compare_add;
    w.swap = swap;
    return w;
}

uint64_t word_at(const side& s, std::size_t offset) {
    uint64_t v;
    std::memcpy(&v, s.region + offset, sizeof(v));
    return v;
}

TEST_F(rc_qp_test, fetch_add_and_compare_swap_return_the_old_value_and_change_memory_once) {
    connect_both();
    uint64_t start = 1000;
    std::memcpy(b.region + 64, &start, 8);
    a.post_send(
        atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(0), a.mr, b.iova(64), b.mr, 5, 0));
    a.post_send(
        atomic_wqe(2, IBV_WR_ATOMIC_CMP_AND_SWP, a.iova(8), a.mr, b.iova(64), b.mr, 1005, 7));
    a.post_send(atomic_wqe(3, IBV_WR_ATOMIC_CMP_AND_SWP, a.iova(16), a.mr, b.iova(64), b.mr, 1, 9));
    run(20);
    proto::cqe c{};
    for (uint64_t id = 1; id <= 3; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.opcode, id == 1 ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP);
        EXPECT_EQ(c.byte_len, 8u);
    }
    EXPECT_EQ(word_at(a, 0), 1000u) << "fetch-add returns the value before";
    EXPECT_EQ(word_at(a, 8), 1005u) << "compare matched: swapped";
    EXPECT_EQ(word_at(a, 16), 7u) << "compare did not match: returned, not swapped";
    EXPECT_EQ(word_at(b, 64), 7u);
}

TEST_F(rc_qp_test, a_lost_atomic_ack_is_answered_from_the_cache_not_executed_twice) {
    connect(a, b, ip_b, 7, 7, /*timeout=*/8);
    connect(b, a, ip_a);
    uint64_t zero = 0;
    std::memcpy(b.region, &zero, 8);
    for (int i = 0; i < 20; ++i) {
        a.post_send(
            atomic_wqe(i, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(8 * i), a.mr, b.iova(0), b.mr, 1, 0));
    }
    // Every other atomic ACK is lost at first: the requester asks again after its timeout.
    int acks = 0;
    run(2000, 10'000, [&](const test_wire::frame& f) {
        return !(f.bytes[42] == opcode::rc_atomic_acknowledge && acks++ % 2 == 0 && acks < 20);
    });
    proto::cqe c{};
    int done = 0;
    while (a.poll_send(c)) {
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        ++done;
    }
    EXPECT_EQ(done, 20);
    EXPECT_EQ(word_at(b, 0), 20u) << "each FETCH_ADD executed exactly once";
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(word_at(a, 8 * i), static_cast<uint64_t>(i)) << "old values in order";
    }
}

TEST_F(rc_qp_test, atomics_check_alignment_and_rights) {
    connect_both();
    a.post_send(atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(0), a.mr, b.iova(4), b.mr, 1, 0));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_INV_REQ_ERR) << "not 8-byte aligned";
}

// As the shim writes one: the 8 bytes travel in the WQE.
proto::send_wqe atomic_write_wqe(uint64_t wr_id, uint64_t remote, uint32_t rkey, uint64_t value) {
    auto w = wqe(wr_id, IBV_WR_ATOMIC_WRITE, 0, 0, 0, remote, rkey);
    w.num_sge = 0;
    w.send_flags |= IBV_SEND_INLINE;
    w.inline_len = 8;
    std::memcpy(w.inline_data, &value, 8);
    return w;
}

TEST_F(rc_qp_test, atomic_write_places_its_eight_bytes_and_completes_on_the_ack) {
    for (const bool one_host : {false, true}) {
        SCOPED_TRACE(one_host ? "on one host" : "across hosts");
        TearDownSides();
        make_side(a, 0, ip_a, 101);
        make_side(b, 1, ip_b, 202);
        wire.same_host = one_host;
        connect_both();
        fill(b, 0, 64, 3);
        std::vector<std::byte> before(b.region, b.region + 64);
        const uint64_t frames_before = wire.sent;
        a.post_send(atomic_write_wqe(1, b.iova(16), b.mr, 0x1122334455667788));
        run(20);
        proto::cqe c{};
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.opcode, IBV_WC_ATOMIC_WRITE);
        EXPECT_EQ(word_at(b, 16), 0x1122334455667788u);
        EXPECT_EQ(std::memcmp(before.data(), b.region, 16), 0) << "the bytes before untouched";
        EXPECT_EQ(std::memcmp(before.data() + 24, b.region + 24, 40), 0) << "and after";
        EXPECT_EQ(wire.sent == frames_before, one_host) << "memory to memory on one host";
    }
}

TEST_F(rc_qp_test, an_atomic_write_to_an_unaligned_address_is_an_invalid_request) {
    connect_both();
    fill(b, 0, 64, 3);
    std::vector<std::byte> before(b.region, b.region + 64);
    a.post_send(atomic_write_wqe(1, b.iova(4), b.mr, 7));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(std::memcmp(before.data(), b.region, 64), 0);
}

TEST_F(rc_qp_test, a_repeated_atomic_write_is_acked_again_not_placed_over_a_newer_value) {
    connect(a, b, ip_b, 7, 7, /*timeout=*/8);
    connect(b, a, ip_a);
    a.post_send(atomic_write_wqe(1, b.iova(0), b.mr, 5));
    // The first ACK is lost; meanwhile b's program stores its own value in the word. The
    // requester's retry is a duplicate: ACKed, never placed again.
    bool lost = false;
    run(2000, 10'000, [&](const test_wire::frame& f) {
        if (!lost && f.bytes[42] == opcode::rc_acknowledge) {
            lost = true;
            const uint64_t newer = 9;
            std::memcpy(b.region, &newer, 8);
            return false;
        }
        return true;
    });
    ASSERT_TRUE(lost);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(word_at(b, 0), 9u);
    uint64_t retransmitted = 0;
    for (const qp_report& r : eng.report()) {
        retransmitted += r.vnic == a.vnic && r.qpn == a.qp ? r.retransmitted : 0;
    }
    EXPECT_GE(retransmitted, 1u) << "the completion came from the duplicate's ACK";
}

// A tenant cannot buy more of the worker with more QPs: vNIC 0 drives four QPs, vNIC 2 one,
// each QP with a 512-packet WRITE; one poll sends as many packets for each vNIC.
TEST_F(rc_qp_test, a_tenant_with_many_qps_gets_one_vnics_turn_per_poll) {
    constexpr uint32_t ip_c = 0xC6130103;
    constexpr uint32_t message = 512 * 1024;  // 512 packets at path MTU 1024
    std::vector<std::unique_ptr<side>> hogs, peers;
    for (int i = 0; i < 3; ++i) {
        hogs.push_back(std::make_unique<side>());
        make_side(*hogs.back(), 0, ip_a, 300 + i);
        peers.push_back(std::make_unique<side>());
        make_side(*peers.back(), 1, ip_b, 400 + i);
    }
    side fair, fair_peer;
    make_side(fair, 2, ip_c, 500);
    make_side(fair_peer, 1, ip_b, 501);
    connect_both();
    for (std::size_t i = 0; i < hogs.size(); ++i) {
        connect(*hogs[i], *peers[i], ip_b);
        connect(*peers[i], *hogs[i], ip_a);
    }
    connect(fair, fair_peer, ip_b);
    connect(fair_peer, fair, ip_c);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), message, a.mr, b.iova(0), b.mr));
    for (std::size_t i = 0; i < hogs.size(); ++i) {
        hogs[i]->post_send(wqe(1, IBV_WR_RDMA_WRITE, hogs[i]->iova(0), message, hogs[i]->mr,
                               peers[i]->iova(0), peers[i]->mr));
    }
    fair.post_send(
        wqe(1, IBV_WR_RDMA_WRITE, fair.iova(0), message, fair.mr, fair_peer.iova(0), fair_peer.mr));
    eng.poll(wire, now += 10'000);
    std::map<uint16_t, std::size_t> by_vnic;
    for (const auto& f : wire.frames) {
        ++by_vnic[f.from];
    }
    EXPECT_GT(by_vnic[2], 0u);
    EXPECT_EQ(by_vnic[0], by_vnic[2]) << "four QPs send what one QP of another vNIC sends";
    EXPECT_LE(by_vnic[0], engine::vnic_units_per_poll) << "at most a vNIC's units per poll";
    wire.frames.clear();
    hogs.clear();
    peers.clear();
}

TEST_F(rc_qp_test, on_one_host_atomics_run_memory_to_memory) {
    wire.same_host = true;
    connect_both();
    uint64_t start = 41;
    std::memcpy(b.region, &start, 8);
    a.post_send(atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, a.iova(0), a.mr, b.iova(0), b.mr, 1, 0));
    run(2);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(word_at(a, 0), 41u);
    EXPECT_EQ(word_at(b, 0), 42u);
    EXPECT_EQ(wire.sent, 0u);
}

}  // namespace
}  // namespace jakiro::roce

// ---------------------------------------------------------------- shared receive queues

namespace jakiro::roce {
namespace {

// Side b's QP replaced by one on a shared receive queue, posted as ibv_post_srq_recv does.
class rc_qp_srq_test : public rc_qp_test {
  protected:
    void SetUp() override {
        rc_qp_test::SetUp();
        auto req = proto::make_message<proto::create_srq_request>(
            static_cast<uint16_t>(proto::opcode::create_srq), 1);
        req.pd_handle = b.pd;
        req.max_wr = 8;
        req.max_sge = 1;
        verbs::srq_created created;
        ASSERT_EQ(b.res->create_srq(b.client, req, created), 0);
        srq = created.handle;
        srq_bytes = created.ring_bytes;
        srq_ring = static_cast<proto::srq_ring_header*>(
            mmap(nullptr, srq_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, created.ring_fd, 0));
        close(created.ring_fd);
        ASSERT_EQ(b.res->destroy_qp(b.client, b.qp), 0);
        munmap(b.ring, b.ring_bytes);
        auto r = qp_request(b);
        r.srq = srq;
        r.max_recv_wr = 0;
        verbs::qp_created q;
        ASSERT_EQ(b.res->create_qp(b.client, r, q), 0);
        EXPECT_EQ(q.rq_capacity, 1u) << "its own RQ is one unused slot";
        b.qp = q.handle;
        b.ring_bytes = q.ring_bytes;
        b.ring = static_cast<proto::qp_ring_header*>(
            mmap(nullptr, q.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, q.ring_fd, 0));
        close(q.ring_fd);
        close(q.doorbell_fd);
    }
    void TearDown() override { munmap(srq_ring, srq_bytes); }

    void post_srq(uint64_t wr_id, std::size_t offset, uint32_t length) {
        proto::recv_wqe w{};
        w.wr_id = wr_id;
        w.num_sge = 1;
        w.sg[0] = {b.iova(offset), length, b.mr};
        proto::srq_slots(srq_ring)[srq_posted & (srq_ring->capacity - 1)] = w;
        proto::publish_wqes(srq_ring->producer, ++srq_posted);
    }
    std::size_t count(proto::event_type type) const {
        return static_cast<std::size_t>(
            std::count(events.begin(), events.end(), static_cast<uint32_t>(type)));
    }
    uint32_t srq_taken() const { return proto::load_retired_acquire(srq_ring->consumer); }

    uint32_t srq = 0;
    proto::srq_ring_header* srq_ring = nullptr;
    std::size_t srq_bytes = 0;
    uint32_t srq_posted = 0;
};

TEST_F(rc_qp_srq_test, sends_land_in_the_srqs_wqes_in_order_and_an_armed_limit_fires_once) {
    connect_both();
    for (uint64_t id = 0; id < 4; ++id) {
        post_srq(100 + id, 0x10000 * id, 0x10000);
    }
    auto arm = proto::make_message<proto::modify_srq_request>(
        static_cast<uint16_t>(proto::opcode::modify_srq), 1);
    arm.srq_handle = srq;
    arm.attr_mask = proto::srq_attr_limit;
    arm.srq_limit = 2;
    ASSERT_EQ(b.res->modify_srq(b.client, arm), 0);
    const uint32_t sizes[] = {1, 5000, 65536};
    for (uint64_t id = 0; id < 3; ++id) {
        fill(a, 0x10000 * id, sizes[id], static_cast<uint32_t>(id));
        a.post_send(wqe(id, IBV_WR_SEND, a.iova(0x10000 * id), sizes[id], a.mr));
    }
    run(300);
    proto::cqe c{};
    for (uint64_t id = 0; id < 3; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        ASSERT_TRUE(b.poll_recv(c));
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.wr_id, 100 + id) << "the SRQ's WQEs, in order";
        EXPECT_EQ(c.byte_len, sizes[id]);
        EXPECT_EQ(c.qp_num, b.qp) << "the QP that took it";
        EXPECT_TRUE(same(a, 0x10000 * id, b, 0x10000 * id, sizes[id]));
    }
    EXPECT_EQ(srq_taken(), 3u);
    EXPECT_EQ(count(proto::event_type::srq_limit_reached), 1u) << "1 left < 2: once";
    proto::query_srq_reply q{};
    ASSERT_EQ(b.res->query_srq(b.client, srq, q), 0);
    EXPECT_EQ(q.srq_limit, 0u) << "disarmed";
}

TEST_F(rc_qp_srq_test, query_qp_reports_no_receive_queue_of_its_own) {
    proto::query_qp_reply q{};
    ASSERT_EQ(b.res->query_qp(b.client, b.qp, q), 0);
    EXPECT_EQ(q.attr.max_recv_wr, 0u) << "receives come from the SRQ (the shim says 0 too)";
    EXPECT_EQ(q.attr.max_recv_sge, 0u);
    EXPECT_GT(q.attr.max_send_wr, 0u);
}

TEST_F(rc_qp_srq_test, an_empty_srq_rnr_naks_until_a_wqe_is_posted_there) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    // Something in the QP's own RQ changes nothing: a QP on an SRQ never reads it.
    b.post_recv(55, 0, 4096);
    run(50);
    proto::cqe c{};
    EXPECT_FALSE(a.poll_send(c)) << "empty SRQ: RNR NAK, retry";
    EXPECT_GT(b.res->count().qps, 0u);
    post_srq(7, 0, 4096);
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 7u);
    EXPECT_FALSE(b.poll_recv(c));
}

TEST_F(rc_qp_srq_test, on_one_host_sends_and_write_with_imm_take_srq_wqes) {
    wire.same_host = true;
    connect_both();
    post_srq(1, 0x40000, 0x10000);
    post_srq(2, 0, 0);
    fill(a, 0, 60000, 3);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 50000, a.mr));
    auto w = wqe(2, IBV_WR_RDMA_WRITE_WITH_IMM, a.iova(0), 60000, a.mr, b.iova(0x80000), b.mr);
    w.imm_data = htonl(9);
    a.post_send(w);
    run(5);
    EXPECT_EQ(wire.sent, 0u);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.byte_len, 50000u);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 2u);
    EXPECT_EQ(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_TRUE(same(a, 0, b, 0x40000, 50000));
    EXPECT_TRUE(same(a, 0, b, 0x80000, 60000));
    EXPECT_EQ(srq_taken(), 2u);
}

TEST_F(rc_qp_srq_test, a_qp_in_err_flushes_its_own_wrs_not_the_srqs_and_reports_last_wqe_once) {
    connect_both();
    post_srq(1, 0, 4096);
    post_srq(2, 4096, 4096);
    b.post_send(wqe(9, IBV_WR_RDMA_WRITE, b.iova(0), 10, b.mr, a.iova(0), a.mr));
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    run(10);
    proto::cqe c{};
    std::size_t flushed_recvs = 0;
    while (b.poll_recv(c)) {
        ++flushed_recvs;
    }
    EXPECT_EQ(flushed_recvs, 0u) << "the SRQ's WQEs belong to every QP on it";
    EXPECT_EQ(srq_taken(), 0u);
    ASSERT_TRUE(b.poll_send(c));
    EXPECT_EQ(c.wr_id, 9u);
    EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR) << "its own send queue is flushed";
    EXPECT_EQ(count(proto::event_type::qp_last_wqe_reached), 1u) << "once, however many polls";
    // Back through RESET and into ERR again: a new QP life, a new event.
    attr.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    run(3);
    EXPECT_EQ(count(proto::event_type::qp_last_wqe_reached), 2u);
    // A QP on its own RQ hears nothing of the kind.
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    run(3);
    EXPECT_EQ(count(proto::event_type::qp_last_wqe_reached), 2u);
}

TEST_F(rc_qp_srq_test, an_srq_is_busy_while_a_qp_takes_from_it_and_belongs_to_its_client) {
    EXPECT_EQ(b.res->destroy_srq(b.client, srq), EBUSY);
    EXPECT_EQ(b.res->destroy_srq(b.client + 1, srq), EINVAL) << "not the client's";
    EXPECT_EQ(b.res->dealloc_pd(b.client, b.pd), EBUSY);
    // Another client of the vNIC cannot put a QP on it.
    auto r = qp_request(b);
    r.srq = srq;
    verbs::qp_created q;
    EXPECT_EQ(b.res->create_qp(b.client + 1, r, q), EINVAL);
    r.srq = srq ^ 0xff;  // no such SRQ (its tag is wrong; ^ 0x100 made 0 when the tag was 0)
    EXPECT_EQ(b.res->create_qp(b.client, r, q), EINVAL);
    ASSERT_EQ(b.res->destroy_qp(b.client, b.qp), 0);
    EXPECT_EQ(b.res->destroy_srq(b.client, srq), 0);
    EXPECT_EQ(b.res->count().srqs, 0u);
    munmap(b.ring, b.ring_bytes);
    b.ring = nullptr;
    b.ring_bytes = 0;
}

TEST_F(rc_qp_srq_test, create_modify_and_query_refuse_bad_arguments) {
    auto req = proto::make_message<proto::create_srq_request>(
        static_cast<uint16_t>(proto::opcode::create_srq), 1);
    req.pd_handle = b.pd;
    req.max_wr = 16;
    req.max_sge = 1;
    verbs::srq_created out;
    auto refused = [&](proto::create_srq_request r, uint64_t client = 0) {
        return b.res->create_srq(client == 0 ? b.client : client, r, out);
    };
    auto r = req;
    r.max_wr = 0;
    EXPECT_EQ(refused(r), EINVAL);
    r.max_wr = verbs::engine_limits().max_srq_wr + 1;
    EXPECT_EQ(refused(r), EINVAL);
    r = req;
    r.max_sge = verbs::engine_limits().max_srq_sge + 1;
    EXPECT_EQ(refused(r), EINVAL);
    r = req;
    r.srq_limit = 17;
    EXPECT_EQ(refused(r), EINVAL);
    r = req;
    r.flags = 1;
    EXPECT_EQ(refused(r), EINVAL);
    r = req;
    r.reserved = 1;
    EXPECT_EQ(refused(r), EINVAL);
    EXPECT_EQ(refused(req, b.client + 1), EINVAL) << "someone else's PD";
    EXPECT_EQ(b.res->count().srqs, 1u) << "only the fixture's";

    auto m = proto::make_message<proto::modify_srq_request>(
        static_cast<uint16_t>(proto::opcode::modify_srq), 1);
    m.srq_handle = srq;
    m.attr_mask = proto::srq_attr_max_wr;
    m.max_wr = 64;
    EXPECT_EQ(b.res->modify_srq(b.client, m), EOPNOTSUPP) << "no resizing";
    m.attr_mask = proto::srq_attr_limit;
    m.srq_limit = 9;
    EXPECT_EQ(b.res->modify_srq(b.client, m), EINVAL) << "above the capacity (8)";
    m.attr_mask = 4;
    EXPECT_EQ(b.res->modify_srq(b.client, m), EINVAL);
    m.attr_mask = proto::srq_attr_limit;
    m.srq_limit = 8;
    EXPECT_EQ(b.res->modify_srq(b.client + 1, m), EINVAL);
    proto::query_srq_reply q{};
    EXPECT_EQ(b.res->query_srq(b.client + 1, srq, q), EINVAL);
    ASSERT_EQ(b.res->modify_srq(b.client, m), 0);
    ASSERT_EQ(b.res->query_srq(b.client, srq, q), 0);
    EXPECT_EQ(q.srq_limit, 8u);
    EXPECT_EQ(q.max_wr, 8u);
    EXPECT_EQ(q.max_sge, proto::wqe_max_sge);
}

TEST_F(rc_qp_srq_test, without_an_engine_there_are_no_srqs_and_max_srq_is_enforced) {
    verbs::vnic_resources bare(verbs::engine_limits());
    uint32_t pd = 0;
    ASSERT_EQ(bare.alloc_pd(1, pd), 0);
    auto req = proto::make_message<proto::create_srq_request>(
        static_cast<uint16_t>(proto::opcode::create_srq), 1);
    req.pd_handle = pd;
    req.max_wr = 1;
    verbs::srq_created out;
    EXPECT_EQ(bare.create_srq(1, req, out), EOPNOTSUPP);

    auto lim = verbs::engine_limits();
    lim.max_srq = 2;
    verbs::vnic_resources small(lim);
    verbs::qp_support support;
    support.engine = &eng;
    small.enable_qps(support);
    ASSERT_EQ(small.alloc_pd(1, pd), 0);
    req.pd_handle = pd;
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(small.create_srq(1, req, out), 0);
        close(out.ring_fd);
    }
    EXPECT_EQ(small.create_srq(1, req, out), ENOMEM);
    small.release_client(1);
    EXPECT_EQ(small.count().srqs, 0u);
    EXPECT_EQ(small.count().pds, 0u);
}

// ---------------------------------------------------------------- UC and UD

class uc_qp_test : public rc_qp_test {
  protected:
    void SetUp() override {
        qp_type = proto::qpt_uc;
        rc_qp_test::SetUp();
    }
    // The wire's frames of RoCE opcode `op` (BTH byte 0) so far: sent counts all of them.
    static uint8_t opcode_of(const test_wire::frame& f) { return f.bytes[42]; }
};

TEST_F(uc_qp_test, messages_complete_when_sent_and_land_without_a_single_ack) {
    connect_both();
    fill(a, 0, 12288, 1);
    const uint32_t sizes[] = {1, 1024, 3000, 12288};
    for (uint64_t id = 0; id < 4; ++id) {
        b.post_recv(100 + id, 65536 * id, 12288);
        a.post_send(wqe(id, IBV_WR_SEND, a.iova(0), sizes[id], a.mr));
    }
    a.post_send(wqe(9, IBV_WR_RDMA_WRITE, a.iova(0), 5000, a.mr, b.iova(300000), b.mr));
    bool saw_ack = false;
    run(200, 10'000, [&](const test_wire::frame& f) {
        saw_ack |= opcode_of(f) == 0x11 || opcode_of(f) == 0x12;
        return true;
    });
    EXPECT_FALSE(saw_ack) << "UC is never acknowledged";
    proto::cqe c{};
    for (uint64_t id : {0, 1, 2, 3, 9}) {
        ASSERT_TRUE(a.poll_send(c)) << id;
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    }
    for (uint64_t id = 0; id < 4; ++id) {
        ASSERT_TRUE(b.poll_recv(c));
        EXPECT_EQ(c.wr_id, 100 + id);
        EXPECT_EQ(c.byte_len, sizes[id]);
        EXPECT_TRUE(same(a, 0, b, 65536 * id, sizes[id])) << id;
    }
    EXPECT_TRUE(same(a, 0, b, 300000, 5000));
}

TEST_F(uc_qp_test, a_lost_packet_drops_its_message_and_the_receive_waits_for_the_next_one) {
    connect_both();
    fill(a, 0, 4096, 2);
    fill(a, 8192, 4096, 3);
    b.post_recv(100, 0, 4096);
    b.post_recv(101, 16384, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 3000, a.mr));     // 3 packets: the 2nd is lost
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(8192), 2500, a.mr));  // arrives whole
    a.post_send(wqe(3, IBV_WR_SEND, a.iova(0), 4096, a.mr));     // its last packet is lost
    a.post_send(wqe(4, IBV_WR_SEND, a.iova(0), 100, a.mr));      // arrives whole
    int data_packets = 0;
    run(200, 10'000, [&](const test_wire::frame&) {
        ++data_packets;
        return data_packets != 2 && data_packets != 9;  // 3 + 3 + 4 packets, then 1
    });
    proto::cqe c{};
    int sent = 0;
    while (a.poll_send(c)) {
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "a UC sender never learns of a loss";
        ++sent;
    }
    EXPECT_EQ(sent, 4);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 100u) << "the first WQE, kept through the dropped message";
    EXPECT_EQ(c.byte_len, 2500u);
    EXPECT_TRUE(same(a, 8192, b, 0, 2500));
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 101u);
    EXPECT_EQ(c.byte_len, 100u);
    EXPECT_TRUE(same(a, 0, b, 16384, 100));
    EXPECT_FALSE(b.poll_recv(c)) << "no partial message ever completes";
    const auto reports = eng.report();
    uint64_t dropped = 0;
    for (const auto& r : reports) {
        dropped += r.messages_dropped;
    }
    EXPECT_EQ(dropped, 2u);
}

TEST_F(uc_qp_test, a_write_with_imm_after_a_dropped_send_completes_the_oldest_receive) {
    connect_both();
    b.post_recv(100, 0, 4096);
    b.post_recv(101, 8192, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 3000, a.mr));  // its 2nd packet is lost
    proto::send_wqe w =
        wqe(2, IBV_WR_RDMA_WRITE_WITH_IMM, a.iova(0), 64, a.mr, b.iova(65536), b.mr);
    w.imm_data = htonl(7);
    a.post_send(w);
    int packets = 0;
    run(100, 10'000, [&](const test_wire::frame&) { return ++packets != 2; });
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 100u) << "receives complete in the order they were posted";
    EXPECT_EQ(c.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(c.imm_data, htonl(7));
    EXPECT_FALSE(b.poll_recv(c));
}

TEST_F(uc_qp_test, reads_and_atomics_are_not_uc_operations) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_RDMA_READ, a.iova(0), 64, a.mr, b.iova(0), b.mr));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_LOC_QP_OP_ERR);
}

TEST_F(uc_qp_test, a_send_without_a_posted_receive_is_dropped_not_rnr_nakked) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 2048, a.mr));
    run(50);
    b.post_recv(100, 0, 4096);
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(0), 10, a.mr));
    run(50);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.byte_len, 10u) << "the first message was lost, the second landed";
    EXPECT_FALSE(b.poll_recv(c));
}

class ud_qp_test : public rc_qp_test {
  protected:
    static constexpr uint32_t qkey = 0x11111111;

    void SetUp() override {
        qp_type = proto::qpt_ud;
        rc_qp_test::SetUp();
        ready(a);
        ready(b);
    }
    void ready(side& s) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qkey = qkey;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
        attr = {};
        attr.qp_state = IBV_QPS_RTR;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE), 0);
        attr = {};
        attr.qp_state = IBV_QPS_RTS;
        attr.sq_psn = 77;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    }
    proto::send_wqe datagram(uint64_t id, uint32_t length, uint32_t to_qp, uint32_t key = qkey) {
        proto::send_wqe w = wqe(id, IBV_WR_SEND, a.iova(0), length, a.mr);
        w.ud_remote_ip = htonl(ip_b);
        w.ud_remote_qpn = to_qp;
        w.ud_remote_qkey = key;
        return w;
    }
};

TEST_F(ud_qp_test, a_datagram_arrives_behind_a_grh_area_holding_the_senders_ipv4_header) {
    fill(a, 0, 4096, 5);
    b.post_recv(100, 0, 4096 + 40);
    a.post_send(datagram(1, 4096, b.qp));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.byte_len, 4096u + 40);
    EXPECT_EQ(c.src_qp, a.qp);
    EXPECT_EQ(c.qp_num, b.qp);
    EXPECT_NE(c.wc_flags & IBV_WC_GRH, 0u);
    const auto* grh = reinterpret_cast<const uint8_t*>(b.region);
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(grh[i], 0) << "byte " << i << " of the GRH area";
    }
    EXPECT_EQ(grh[20], 0x45) << "IPv4, 20-byte header";
    uint32_t src = 0, dst = 0;
    std::memcpy(&src, grh + 20 + 12, 4);
    std::memcpy(&dst, grh + 20 + 16, 4);
    EXPECT_EQ(src, htonl(ip_a));
    EXPECT_EQ(dst, htonl(ip_b));
    EXPECT_TRUE(same(a, 0, b, 40, 4096));
}

// UCX (uct_ud_iface_check_grh) drops a UD datagram unless wc.sl says "RoCE v2 over IPv4" (2,
// as mlx5 reports it) and the destination at bytes 36-39 of the GRH area is its own address.
TEST_F(ud_qp_test, a_datagram_reports_roce_v2_ipv4_in_sl_with_its_destination_at_bytes_36_to_39) {
    b.post_recv(100, 0, 64 + 40);
    a.post_send(datagram(1, 64, b.qp));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.sl & 7, 2) << "the network header type of RoCE v2 over IPv4";
    uint32_t dst = 0;
    std::memcpy(&dst, reinterpret_cast<const uint8_t*>(b.region) + 36, 4);
    EXPECT_EQ(dst, htonl(ip_b));
}

TEST_F(ud_qp_test, wrong_qkeys_missing_receives_and_short_buffers_lose_only_that_datagram) {
    b.post_recv(100, 0, 100);  // too short for 40 + 100
    b.post_recv(101, 4096, 200);
    a.post_send(datagram(1, 100, b.qp, 0x2222));  // wrong Q_Key: dropped, WQE 100 untouched
    a.post_send(datagram(2, 100, b.qp));          // into 100: too short
    a.post_send(datagram(3, 100, b.qp));          // into 101
    a.post_send(datagram(4, 100, b.qp));          // nothing posted any more: dropped
    a.post_send(datagram(5, 4097, b.qp));         // more than the MTU: refused by the sender
    run(50);
    proto::cqe c{};
    for (uint64_t id = 1; id <= 5; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.status, id == 5 ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS) << id;
        if (id == 5) {
            break;
        }
    }
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 100u);
    EXPECT_EQ(c.status, IBV_WC_LOC_LEN_ERR);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 101u);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.byte_len, 140u);
    EXPECT_FALSE(b.poll_recv(c));
}

// docs/threat-model.md: a tenant's UD QP aiming forged CM MADs at a peer's QP1. It cannot
// hold the GSI Q_Key (modify refuses controlled Q_Keys: qp_state_test), a WR naming it sends
// the QP's own instead (IBTA 10.2.5), and its source QPN is never 1; the receiving engine
// hands QP1 only what carries both, so nothing a tenant sends reaches the CM agent.
TEST_F(ud_qp_test, a_tenant_datagram_to_qp1_never_reaches_the_cm_agent_even_naming_the_gsi_qkey) {
    eng.gsi().open(0);  // both vNICs have agents
    eng.gsi().open(1);
    fill(a, 0, gsi_mad_bytes, 13);
    a.post_send(datagram(1, gsi_mad_bytes, gsi_qpn, gsi_qkey));  // replaced by 0x11111111
    a.post_send(datagram(2, gsi_mad_bytes, gsi_qpn));            // its own Q_Key
    run(20);
    proto::cqe c{};
    for (uint64_t id = 1; id <= 2; ++id) {
        ASSERT_TRUE(a.poll_send(c));
        EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "sent, as a UD send always is";
    }
    EXPECT_TRUE(eng.gsi().take_rx(1).empty());
    EXPECT_EQ(eng.counters().drops[static_cast<std::size_t>(engine_drop::gsi_forged)].load(), 2u);

    // The control: the same bytes queued by an agent of vNIC a leave QP1 with the GSI Q_Key
    // and reach QP1 of b. Then the same frame with another source QPN, ICRC sealed again (a
    // sender that could set the Q_Key but is not a QP1), is refused.
    gsi_datagram d;
    d.vnic = 0;
    d.remote_ip_be = htonl(ip_b);
    d.local_ip_be = htonl(ip_a);
    std::memcpy(d.mad.data(), a.region, gsi_mad_bytes);
    ASSERT_TRUE(eng.gsi().push_tx(d));
    std::vector<uint8_t> agent_frame;
    run(2, 10'000, [&](const test_wire::frame& f) {
        agent_frame = f.bytes;
        return true;
    });
    const auto rx = eng.gsi().take_rx(1);
    ASSERT_EQ(rx.size(), 1u);
    EXPECT_EQ(rx[0].vnic, 1);
    EXPECT_EQ(rx[0].remote_ip_be, htonl(ip_a));
    EXPECT_EQ(std::memcmp(rx[0].mad.data(), a.region, gsi_mad_bytes), 0);
    ASSERT_EQ(agent_frame.size(), frame_l2_l4_bytes + 12 + 8 + gsi_mad_bytes + 4);
    uint8_t* deth = agent_frame.data() + frame_l2_l4_bytes + 12;
    EXPECT_EQ((deth[0] << 24 | deth[1] << 16 | deth[2] << 8 | deth[3]), 0x80010000);
    EXPECT_EQ((deth[5] << 16 | deth[6] << 8 | deth[7]), 1);
    deth[7] = static_cast<uint8_t>(a.qp);
    deth[6] = static_cast<uint8_t>(a.qp >> 8);
    seal_icrc(agent_frame.data(), static_cast<uint32_t>(agent_frame.size() - frame_l2_l4_bytes));
    eng.receive(1, agent_frame.data() + 14, static_cast<uint32_t>(agent_frame.size() - 14), wire,
                now);
    EXPECT_TRUE(eng.gsi().take_rx(1).empty());
    EXPECT_EQ(eng.counters().drops[static_cast<std::size_t>(engine_drop::gsi_forged)].load(), 3u);
    EXPECT_EQ(eng.counters().drops[static_cast<std::size_t>(engine_drop::bad_icrc)].load(), 0u);
}

TEST_F(ud_qp_test, a_datagram_for_a_qp_of_another_transport_is_dropped_and_counted) {
    // A second vNIC slot's QP is UD; aim an RC-typed QP number that does not exist.
    b.post_recv(100, 0, 4096);
    a.post_send(datagram(1, 64, b.qp + 256));  // no such QP on b
    run(20);
    proto::cqe c{};
    EXPECT_FALSE(b.poll_recv(c));
    EXPECT_EQ(eng.counters().drops[static_cast<std::size_t>(engine_drop::unknown_qp)].load(), 1u);
}

}  // namespace
}  // namespace jakiro::roce

// ---------------------------------------------------------------- security groups, QP rights

namespace jakiro::roce {
namespace {

ibv_ah_attr av_to(uint32_t ip) {
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.port_num = 1;
    ah.grh.dgid.raw[10] = 0xff;
    ah.grh.dgid.raw[11] = 0xff;
    const uint32_t be = htonl(ip);
    std::memcpy(ah.grh.dgid.raw + 12, &be, 4);
    return ah;
}

// The report of side `s`'s QP: its vNIC's, since another vNIC's QP may have the same number.
const qp_report* report_of(const std::vector<qp_report>& r, const side& s) {
    for (const auto& q : r) {
        if (q.vnic == s.vnic && q.qpn == s.qp) {
            return &q;
        }
    }
    return nullptr;
}

uint64_t drops_of(const engine& e, engine_drop d) {
    return e.counters().drops[static_cast<std::size_t>(d)].load();
}

TEST_F(rc_qp_test, every_address_vector_a_modify_sets_passes_the_security_groups) {
    denied = {{0, htonl(ip_stranger)}};
    connect_both();  // RTR towards an allowed peer
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_SQD;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    // The drained QP is where a path may change: to a denied peer it may not.
    attr = {};
    attr.qp_state = IBV_QPS_SQD;
    attr.ah_attr = av_to(ip_stranger);
    EXPECT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_AV), EACCES) << "SQD -> SQD, new AV";
    attr = {};
    attr.ah_attr = av_to(ip_stranger);
    EXPECT_EQ(modify(a, attr, IBV_QP_AV), EACCES) << "the same without naming the state";
    attr = {};
    attr.qp_state = IBV_QPS_SQD;
    attr.alt_ah_attr = av_to(ip_stranger);
    attr.alt_port_num = 1;
    EXPECT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_ALT_PATH), EACCES) << "nor the alternate path";
    // The QP is unchanged: still connected to b.
    proto::query_qp_reply q{};
    ASSERT_EQ(a.res->query_qp(a.client, a.qp, q), 0);
    ibv_qp_attr now_attr{};
    proto::from_wire(q.attr, now_attr);
    uint32_t peer = 0;
    std::memcpy(&peer, now_attr.ah_attr.grh.dgid.raw + 12, 4);
    EXPECT_EQ(peer, htonl(ip_b));
    EXPECT_EQ(now_attr.alt_port_num, 0);
    EXPECT_EQ(report_of(eng.report(), a)->remote_ip_be, htonl(ip_b));

    // Control: a new AV towards an allowed peer is taken, and the QP works on.
    attr = {};
    attr.qp_state = IBV_QPS_SQD;
    attr.ah_attr = av_to(ip_b);
    EXPECT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_AV), 0);
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    fill(a, 0, 4096, 9);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 4096, a.mr, b.iova(0), b.mr));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 4096));

    // And a fresh QP cannot reach RTR towards the denied peer either.
    TearDownSides();
    make_side(a, 0, ip_a, 101);
    make_side(b, 1, ip_b, 202);
    attr = {};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = qp_access;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = b.qp;
    attr.max_dest_rd_atomic = 1;
    attr.ah_attr = av_to(ip_stranger);
    EXPECT_EQ(modify(a, attr,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              EACCES);
}

TEST_F(rc_qp_test, a_policy_change_that_refuses_the_peer_errs_the_qp_at_the_next_poll) {
    eng.use_policy(1);
    connect_both();
    run(1);
    EXPECT_EQ(wire.connection_checks, 2u) << "each connected QP checked once under policy 1";
    for (int i = 0; i < 32; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr));
    }
    std::vector<uint8_t> late_from_b;  // an ACK of b's, replayed after the change
    run(3, 10'000, [&](const test_wire::frame& f) {
        if (f.from == 1) {
            late_from_b = f.bytes;
        }
        return true;
    });
    // Control: a change that keeps the rule leaves the connection alone.
    eng.use_policy(2);
    run(1);
    EXPECT_EQ(wire.connection_checks, 4u);
    EXPECT_EQ(report_of(eng.report(), a)->state, IBV_QPS_RTS);
    EXPECT_EQ(eng.counters().qps_revoked.load(), 0u);
    // The rule that admitted a -> b goes: a's very next poll puts it in ERR.
    wire.refused = {{0, htonl(ip_b)}};
    eng.use_policy(3);
    events.clear();
    wire.frames.clear();
    const uint64_t sent_before = wire.sent;
    eng.poll(wire, now += 10'000);
    EXPECT_EQ(report_of(eng.report(), a)->state, IBV_QPS_ERR);
    EXPECT_EQ(report_of(eng.report(), b)->state, IBV_QPS_RTS) << "b's groups still allow a";
    EXPECT_EQ(eng.counters().qps_revoked.load(), 1u);
    EXPECT_NE(
        std::find(events.begin(), events.end(), static_cast<uint32_t>(proto::event_type::qp_fatal)),
        events.end());
    for (const auto& f : wire.frames) {
        EXPECT_NE(f.from, 0) << "a sends nothing after the change";
    }
    (void)sent_before;
    // Every outstanding WR of a is flushed.
    proto::cqe c{};
    int completed = 0, flushed = 0;
    while (a.poll_send(c)) {
        ++completed;
        flushed += c.status == IBV_WC_WR_FLUSH_ERR ? 1 : 0;
    }
    EXPECT_EQ(completed, 32);
    EXPECT_GT(flushed, 0);
    // What b still sends to a is dropped and counted.
    ASSERT_FALSE(late_from_b.empty());
    eng.receive(0, late_from_b.data() + 14, static_cast<uint32_t>(late_from_b.size() - 14), wire,
                now);
    EXPECT_EQ(drops_of(eng, engine_drop::revoked), 1u);
}

TEST_F(rc_qp_test, on_one_host_a_peer_the_responders_groups_refuse_gets_no_more_memory) {
    wire.same_host = true;
    eng.use_policy(1);
    connect_both();
    fill(a, 0, 4096, 4);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 4096, a.mr, b.iova(0), b.mr));
    run(2);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "control: allowed, memory to memory";
    EXPECT_TRUE(same(a, 0, b, 0, 4096));

    // b (the responder) no longer allows a.
    wire.refused = {{1, htonl(ip_a)}};
    eng.use_policy(2);
    fill(a, 0, 4096, 5);
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 4096, a.mr, b.iova(0), b.mr));
    run(5);
    EXPECT_FALSE(same(a, 0, b, 0, 4096)) << "nothing reached b's memory";
    EXPECT_EQ(report_of(eng.report(), b)->state, IBV_QPS_ERR);
    EXPECT_EQ(eng.counters().qps_revoked.load(), 1u);
    EXPECT_GE(drops_of(eng, engine_drop::revoked), 1u) << "a's packets meet a revoked QP";
}

TEST_F(rc_qp_test, the_responder_refuses_what_its_qp_access_flags_do_not_grant) {
    struct probe {
        ibv_wr_opcode op;
        unsigned right;
    };
    const probe probes[] = {{IBV_WR_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE},
                            {IBV_WR_RDMA_WRITE_WITH_IMM, IBV_ACCESS_REMOTE_WRITE},
                            {IBV_WR_RDMA_READ, IBV_ACCESS_REMOTE_READ},
                            {IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_ACCESS_REMOTE_ATOMIC},
                            {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_ACCESS_REMOTE_ATOMIC},
                            {IBV_WR_ATOMIC_WRITE, IBV_ACCESS_REMOTE_WRITE}};
    const unsigned all = qp_access;
    for (const bool one_host : {false, true}) {
        for (const probe& p : probes) {
            for (const bool granted : {true, false}) {
                SCOPED_TRACE(testing::Message() << "opcode " << p.op << (granted ? " granted" : "")
                                                << (one_host ? " on one host" : ""));
                TearDownSides();
                make_side(a, 0, ip_a, 101);
                make_side(b, 1, ip_b, 202);
                wire.same_host = one_host;
                connect(a, b, ip_b);
                qp_access = granted ? all : all & ~p.right;  // b's QP, whose MR allows all
                connect(b, a, ip_a);
                qp_access = all;
                fill(a, 0, 64, 1);
                fill(b, 0, 64, 2);
                std::vector<std::byte> before(b.region, b.region + 64);
                b.post_recv(7, 4096, 64);
                proto::send_wqe w =
                    p.op == IBV_WR_ATOMIC_FETCH_AND_ADD || p.op == IBV_WR_ATOMIC_CMP_AND_SWP
                        ? atomic_wqe(1, p.op, a.iova(0), a.mr, b.iova(0), b.mr, word_at(b, 0), 5)
                    : p.op == IBV_WR_ATOMIC_WRITE
                        ? atomic_write_wqe(1, b.iova(0), b.mr, 5)
                        : wqe(1, p.op, a.iova(0), 64, a.mr, b.iova(0), b.mr);
                a.post_send(w);
                run(20);
                proto::cqe c{};
                ASSERT_TRUE(a.poll_send(c));
                if (granted) {
                    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
                    continue;
                }
                EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
                EXPECT_EQ(std::memcmp(before.data(), b.region, 64), 0) << "b's memory untouched";
                EXPECT_EQ(report_of(eng.report(), b)->state, IBV_QPS_ERR);
            }
        }
    }
}

}  // namespace
}  // namespace jakiro::roce

namespace jakiro::roce {
namespace {

TEST_F(rc_qp_test, a_ce_mark_from_the_fabric_makes_the_receiver_send_a_cnp_and_the_sender_slow) {
    // No ingress meter on the vNIC (no QoS): the receiver is still DCQCN's notification point.
    connect_both();
    fill(a, 0, 65536, 31);
    const uint64_t rate_before = eng.report()[0].rate_bps;
    // Delivers what the engine sent, with CE on a -> b as the RFC 6040 step leaves a packet
    // the fabric marked (ECT(0) inside).
    auto step = [&](bool mark) {
        now += 10'000;
        eng.poll(wire, now);
        std::deque<test_wire::frame> batch;
        batch.swap(wire.frames);
        for (auto& f : batch) {
            uint8_t* ip = f.bytes.data() + 14;
            const uint16_t to = f.dst_ip_be == htonl(ip_a) ? 0 : 1;
            if (to == 1 && mark) {
                ASSERT_EQ(ip[1] & 0x03, 0x02) << "RoCE leaves ECN-capable";
                ip[1] |= 0x03;
            }
            eng.receive(to, ip, static_cast<uint32_t>(f.bytes.size() - 14), wire, now);
        }
    };
    // A stream long enough for several CNPs (one per 50 µs at most): after a quiet start
    // DCQCN's alpha is near zero, so it is the repeated marks that cut the rate.
    int completed = 0;
    for (int i = 0; i < 32; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr));
    }
    uint64_t lowest_rate = rate_before;
    proto::cqe c{};
    for (int i = 0; i < 2000 && completed < 32; ++i) {
        step(true);
        lowest_rate = std::min(lowest_rate, eng.report()[0].rate_bps);
        while (a.poll_send(c)) {
            EXPECT_EQ(c.status, IBV_WC_SUCCESS);
            ++completed;
        }
    }
    EXPECT_EQ(completed, 32);
    EXPECT_TRUE(same(a, 0, b, 0, 65536));
    const auto report = eng.report();
    EXPECT_GT(report[1].cnps_sent, 1u);
    EXPECT_EQ(report[0].cnps_received, report[1].cnps_sent);
    EXPECT_LT(lowest_rate, rate_before) << "DCQCN cut the sender's rate";
}

TEST_F(rc_qp_test, dcqcn_starts_cuts_and_recovers_relative_to_the_vnic_rate_not_25_gbit) {
    constexpr uint64_t vnic_rate = 1'000'000'000;  // a vNIC shaped to 1 Gbit/s
    eng.set_vnic_rate(0, vnic_rate, now);
    connect_both();
    rc_qp* qp = eng.find(0, a.qp);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(qp->line_rate_bps(), vnic_rate) << "learnt when the QP was created";
    EXPECT_EQ(qp->rate_bps(), vnic_rate) << "DCQCN starts at the vNIC's rate";
    EXPECT_EQ(eng.find(1, b.qp)->line_rate_bps(), 25'000'000'000u)
        << "a vNIC that is not shaped keeps the nominal line rate";

    qp->on_cnp(now);
    EXPECT_NEAR(static_cast<double>(qp->rate_bps()), vnic_rate / 2.0, vnic_rate * 0.01)
        << "the first CNP halves the vNIC's rate (alpha 1)";

    // Traffic with no more CNPs: recovery climbs back to the vNIC's rate and no further
    // (with a 25 Gbit/s ceiling additive increase would pass 1 Gbit/s within 2 ms).
    for (int i = 0; i < 16; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr));
    }
    uint64_t highest = 0;
    for (int i = 0; i < 200; ++i) {
        run(1, 50'000);
        highest = std::max(highest, qp->rate_bps());
    }
    EXPECT_LE(highest, vnic_rate);
    EXPECT_GE(qp->rate_bps(), vnic_rate * 95 / 100) << "recovered to the vNIC's rate";

    // A live QoS change (jakiroctl apply) moves the ceiling of the QPs that exist.
    eng.set_vnic_rate(0, vnic_rate / 4, now);
    EXPECT_EQ(qp->line_rate_bps(), vnic_rate / 4);
    EXPECT_LE(qp->rate_bps(), vnic_rate / 4);
}

TEST_F(rc_qp_test, without_a_ce_mark_no_cnp_is_sent) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr));
    run(200);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(eng.report()[1].cnps_sent, 0u);
}

// ---------------------------------------------------------------- memory windows
//
// b owns the windows: a second registration of its region that allows binds (bind_mr), and
// windows bound by b's QP; a is the peer that reaches b's memory through them.

class rc_qp_mw_test : public rc_qp_test {
  protected:
    static constexpr uint32_t window_rights =
        proto::access_remote_write | proto::access_remote_read | proto::access_remote_atomic;

    void SetUp() override {
        rc_qp_test::SetUp();
        auto mr = proto::make_message<proto::reg_mr_request>(
            static_cast<uint16_t>(proto::opcode::reg_mr), 1);
        mr.pd_handle = b.pd;
        mr.access = proto::mr_access_all | proto::access_mw_bind;
        mr.addr = region_iova;
        mr.iova = region_iova;
        mr.length = region_bytes;
        ASSERT_EQ(b.res->reg_mr(b.client, mr, b.region_fd, bind_mr), 0);
        connect_both();
    }

    uint32_t alloc(uint32_t type) {
        uint32_t handle = 0;
        EXPECT_EQ(b.res->alloc_mw(b.client, b.pd, type, handle), 0);
        return handle;
    }

    static proto::send_wqe bind_wqe(uint64_t id, uint32_t mw, uint32_t rkey, uint32_t mr,
                                    uint64_t addr, uint64_t length, uint32_t rights) {
        proto::send_wqe w{};
        w.wr_id = id;
        w.opcode = IBV_WR_BIND_MW;
        w.send_flags = IBV_SEND_SIGNALED;
        w.mw_handle = mw;
        w.rkey = rkey;
        w.mw_mr_lkey = mr;
        w.remote_addr = addr;
        w.compare_add = length;
        w.mw_access = rights;
        return w;
    }
    static proto::send_wqe local_inv_wqe(uint64_t id, uint32_t rkey) {
        proto::send_wqe w{};
        w.wr_id = id;
        w.opcode = IBV_WR_LOCAL_INV;
        w.send_flags = IBV_SEND_SIGNALED;
        w.imm_data = rkey;
        return w;
    }
    // The next consumer key of `rkey`, as ibv_inc_rkey makes it.
    static uint32_t next_key(uint32_t rkey) { return (rkey & ~0xffu) | ((rkey + 1) & 0xffu); }

    // Posts on `s`, runs, and returns the WR's completion (status 0xFFFF if none came).
    proto::cqe complete(side& s, const proto::send_wqe& w, unsigned steps = 200) {
        s.post_send(w);
        run(steps);
        proto::cqe c{};
        c.status = 0xFFFF;
        s.poll_send(c);
        return c;
    }

    uint32_t bind_mr = 0;
};

// A noisy neighbour's QPs on vNIC 0, each connected to a peer on vNIC 1 and holding a type-2
// window it may bind and invalidate: work that retires at once and never reaches the wire.
struct silent_hog {
    std::unique_ptr<side> qp, peer;
    uint32_t bind_mr = 0, mw = 0;
    uint32_t rkey = 0;  // the window's last key
};

class noisy_neighbour_test : public rc_qp_mw_test {
  protected:
    static constexpr uint32_t ip_c = 0xC6130103;
    static constexpr unsigned hogs = 8;

    void SetUp() override {
        rc_qp_mw_test::SetUp();
        make_side(victim, 2, ip_c, 900);
        make_side(victim_peer, 1, ip_b, 901);
        connect(victim, victim_peer, ip_b);
        connect(victim_peer, victim, ip_c);
        for (unsigned i = 0; i < hogs; ++i) {
            silent_hog h{std::make_unique<side>(), std::make_unique<side>()};
            make_side(*h.qp, 0, ip_a, 600 + i);
            make_side(*h.peer, 1, ip_b, 700 + i);
            connect(*h.qp, *h.peer, ip_b);
            connect(*h.peer, *h.qp, ip_a);
            auto mr = proto::make_message<proto::reg_mr_request>(
                static_cast<uint16_t>(proto::opcode::reg_mr), 1);
            mr.pd_handle = h.qp->pd;
            mr.access = proto::mr_access_all | proto::access_mw_bind;
            mr.addr = region_iova;
            mr.iova = region_iova;
            mr.length = region_bytes;
            ASSERT_EQ(h.qp->res->reg_mr(h.qp->client, mr, h.qp->region_fd, h.bind_mr), 0);
            ASSERT_EQ(h.qp->res->alloc_mw(h.qp->client, h.qp->pd, IBV_MW_TYPE_2, h.mw), 0);
            hog.push_back(std::move(h));
        }
    }

    // Fills every hog's free send-queue slots with unsignaled binds and invalidations of its
    // window, each pair succeeding: nothing to send, nothing to complete.
    void fill_with_silent_work() {
        for (auto& h : hog) {
            if (h.rkey == 0) {
                h.rkey = h.mw;
            }
            const uint32_t capacity = h.qp->ring->sq_capacity;
            while (h.qp->sq_posted + 2 - proto::load_posted_acquire(h.qp->ring->sq_consumer) <=
                   capacity) {
                h.rkey = next_key(h.rkey);
                auto bind =
                    bind_wqe(1, h.mw, h.rkey, h.bind_mr, h.qp->iova(0), 4096, window_rights);
                bind.send_flags = 0;
                auto inv = local_inv_wqe(2, h.rkey);
                inv.send_flags = 0;
                h.qp->post_send(bind);
                h.qp->post_send(inv);
            }
        }
    }

    uint32_t hogs_retired() const {
        uint32_t retired = 0;
        for (const auto& h : hog) {
            retired += proto::load_posted_acquire(h.qp->ring->sq_consumer);
        }
        return retired;
    }

    // Packets the victim's 64-packet WRITE puts on the wire in one poll.
    std::size_t victim_packets_in_one_poll() {
        wire.frames.clear();
        victim.post_send(wqe(1, IBV_WR_RDMA_WRITE, victim.iova(0), 64 * 1024, victim.mr,
                             victim_peer.iova(0), victim_peer.mr));
        eng.poll(wire, now += 10'000);
        std::size_t packets = 0;
        for (const auto& f : wire.frames) {
            packets += f.from == 2 ? 1 : 0;
        }
        wire.frames.clear();
        return packets;
    }

    side victim, victim_peer;
    std::vector<silent_hog> hog;
};

// WQEs that send nothing (memory-window binds and invalidations) cost the worker as much as
// packets do: a tenant with many QPs full of them spends its vNIC's units per poll and no
// more, and another tenant's QP sends in that poll what it sends alone.
TEST_F(noisy_neighbour_test, wqes_that_send_nothing_spend_their_vnics_units_and_no_more) {
    const std::size_t alone = victim_packets_in_one_poll();  // the control
    ASSERT_GT(alone, 0u);
    fill_with_silent_work();
    const uint32_t before = hogs_retired();
    const std::size_t loaded = victim_packets_in_one_poll();
    const uint32_t retired = hogs_retired() - before;
    EXPECT_GT(retired, 0u) << "the hogs' work is done, only bounded";
    EXPECT_LE(retired, engine::vnic_units_per_poll) << "one vNIC's units per poll, in WQEs";
    EXPECT_EQ(loaded, alone);
    // What the operator sees: the hogs' vNIC spent its units and met its bound.
    std::map<uint16_t, std::pair<uint64_t, uint64_t>> units;  // vNIC: spent, out of units
    for (const qp_report& r : eng.report()) {
        units[r.vnic].first += r.work_units;
        units[r.vnic].second += r.out_of_units;
    }
    EXPECT_GE(units[0].first, retired);
    EXPECT_GT(units[0].second, 0u);
    EXPECT_GT(units[2].first, 0u);
    // Every WQE still retires, over later polls.
    const uint32_t posted = hogs * hog.front().qp->ring->sq_capacity;
    for (unsigned poll = 0; poll < 1000 && hogs_retired() < posted; ++poll) {
        eng.poll(wire, now += 10'000);
        wire.frames.clear();
    }
    EXPECT_EQ(hogs_retired(), posted);
    EXPECT_EQ(events, std::vector<uint32_t>{}) << "no QP failed";
}

// Work without packets is bounded in rate too, not only per poll: beyond its allowance a
// vNIC sits polls out (counted), its QPs need no doorbell, and the worker may sleep although
// their rings are full.
TEST_F(noisy_neighbour_test, local_work_beyond_the_allowance_waits_and_lets_the_worker_sleep) {
    constexpr uint64_t per_s = 20'000;
    eng.set_vnic_local_work_rate(0, per_s);
    for (unsigned poll = 0; poll < 4000; ++poll) {  // 40 ms, the rings kept full
        fill_with_silent_work();
        eng.poll(wire, now += 10'000);
        wire.frames.clear();
    }
    const uint32_t done = hogs_retired();
    // 40 ms at 20 000 WRs/s, after a full bucket; a visit may overdraw by a poll's units.
    EXPECT_LE(done, engine::local_work_burst + per_s * 40 / 1000 + engine::vnic_units_per_poll);
    EXPECT_GE(done, engine::local_work_burst);
    EXPECT_GT(eng.vnic_over_allowance(0), 0u);
    EXPECT_EQ(eng.vnic_over_allowance(2), 0u);
    EXPECT_EQ(victim_packets_in_one_poll(), 64u) << "the victim's QP is served as ever";
    // Only the hogs have work left, and they wait for their allowance: the worker may sleep,
    // and their clients are not asked to ring.
    run(100);
    ASSERT_TRUE(eng.prepare_sleep());
    EXPECT_FALSE(proto::engine_sleeping_after_publish(*hog.front().qp->ring));
    eng.after_sleep();
}

// A tenant's QPs in ERR with full rings: their flush writes at most the vNIC's units of
// completions per poll, however many QPs flush at once.
TEST_F(noisy_neighbour_test, qps_flushing_full_rings_write_their_vnics_units_of_completions) {
    for (auto& h : hog) {
        for (uint32_t i = 0; i < h.qp->ring->sq_capacity; ++i) {
            h.qp->post_send(wqe(i, IBV_WR_SEND, h.qp->iova(0), 8, h.qp->mr));
        }
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        ASSERT_EQ(modify(*h.qp, attr, IBV_QP_STATE), 0);
    }
    const uint32_t before = hogs_retired();
    const std::size_t loaded = victim_packets_in_one_poll();
    const uint32_t flushed = hogs_retired() - before;
    EXPECT_GT(flushed, 0u);
    EXPECT_LE(flushed, engine::vnic_units_per_poll);
    EXPECT_GT(loaded, 0u);
}

TEST_F(rc_qp_mw_test, a_bound_type2_window_takes_writes_and_reads_inside_its_range) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    auto c = complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0x20000), 8192, window_rights));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_BIND_MW);
    EXPECT_EQ(c.wr_id, 1u);

    fill(a, 0, 8192, 11);
    c = complete(a, wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 8192, a.mr, b.iova(0x20000), rkey));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0x20000, 8192));
    fill(b, 0x21000, 100, 12);
    c = complete(a, wqe(3, IBV_WR_RDMA_READ, a.iova(0x40000), 100, a.mr, b.iova(0x21000), rkey));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0x40000, b, 0x21000, 100));
    // The old consumer key (the handle's) names nothing.
    c = complete(a, wqe(4, IBV_WR_RDMA_READ, a.iova(0x40000), 8, a.mr, b.iova(0x20000), mw));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(rc_qp_mw_test, a_write_one_byte_past_the_window_is_nakked_and_places_nothing) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(
        complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0x20000), 4096, window_rights)).status,
        IBV_WC_SUCCESS);
    std::memset(b.region + 0x20000, 0, 8192);
    fill(a, 0, 4097, 3);
    const auto c =
        complete(a, wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 4097, a.mr, b.iova(0x20000), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    for (std::size_t i = 0; i < 8192; ++i) {
        ASSERT_EQ(static_cast<uint8_t>(b.region[0x20000 + i]), 0) << i;
    }
}

TEST_F(rc_qp_mw_test, a_read_only_window_refuses_a_write_though_the_mr_would_allow_it) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(
        complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), 4096, proto::access_remote_read))
            .status,
        IBV_WC_SUCCESS);
    std::memset(b.region, 0, 64);
    fill(a, 0, 64, 5);
    const auto c = complete(a, wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0);
}

TEST_F(rc_qp_mw_test, local_inv_frees_the_window_and_a_later_write_is_nakked_with_no_data) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    auto c = complete(b, local_inv_wqe(2, rkey));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_LOCAL_INV);
    std::memset(b.region, 0, 64);
    fill(a, 0, 64, 9);
    c = complete(a, wqe(3, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0);
}

TEST_F(rc_qp_mw_test, a_freed_type2_window_binds_again_under_a_new_key_and_the_old_key_is_dead) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t first = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, first, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    ASSERT_EQ(complete(b, local_inv_wqe(2, first)).status, IBV_WC_SUCCESS);
    const uint32_t second = next_key(first);
    ASSERT_EQ(
        complete(b, bind_wqe(3, mw, second, bind_mr, b.iova(4096), 4096, window_rights)).status,
        IBV_WC_SUCCESS);
    fill(b, 4096, 16, 21);
    auto c = complete(a, wqe(4, IBV_WR_RDMA_READ, a.iova(0), 16, a.mr, b.iova(4096), second));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 4096, 16));
    c = complete(a, wqe(5, IBV_WR_RDMA_READ, a.iova(0), 16, a.mr, b.iova(4096), first));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(rc_qp_mw_test, send_with_inv_frees_the_window_and_the_receive_reports_the_rkey) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    b.post_recv(50, 0x80000, 4096);
    fill(a, 0, 2000, 4);
    auto w = wqe(2, IBV_WR_SEND_WITH_INV, a.iova(0), 2000, a.mr);
    w.imm_data = rkey;
    auto c = complete(a, w);
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_SEND);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.wr_id, 50u);
    EXPECT_EQ(c.byte_len, 2000u);
    EXPECT_EQ(c.wc_flags & IBV_WC_WITH_INV, unsigned{IBV_WC_WITH_INV});
    EXPECT_EQ(c.imm_data, rkey);  // ibv_wc.invalidated_rkey
    EXPECT_TRUE(same(a, 0, b, 0x80000, 2000));
    c = complete(a, wqe(3, IBV_WR_RDMA_READ, a.iova(0x40000), 8, a.mr, b.iova(0), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(rc_qp_mw_test, a_duplicated_send_with_inv_is_acked_again_and_never_frees_a_later_binding) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t first = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, first, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    b.post_recv(50, 0x80000, 4096);
    b.post_recv(51, 0x81000, 4096);
    auto w = wqe(2, IBV_WR_SEND_WITH_INV, a.iova(0), 100, a.mr);
    w.imm_data = first;
    std::vector<test_wire::frame> copies;
    a.post_send(w);
    run(100, 10'000, [&](const test_wire::frame& f) {
        if (f.bytes[42] == opcode::rc_send_only_inv) {
            copies.push_back(f);
        }
        return true;
    });
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    ASSERT_EQ(copies.size(), 1u);
    // The window is bound again before the stale copy arrives.
    const uint32_t second = next_key(first);
    ASSERT_EQ(complete(b, bind_wqe(3, mw, second, bind_mr, b.iova(0), 4096, window_rights)).status,
              IBV_WC_SUCCESS);
    const auto& dup = copies.front();
    eng.receive(1, dup.bytes.data() + 14, static_cast<uint32_t>(dup.bytes.size() - 14), wire, now);
    run(20);
    EXPECT_FALSE(b.poll_recv(c)) << "a duplicate consumes no second receive";
    fill(b, 0, 8, 33);
    c = complete(a, wqe(4, IBV_WR_RDMA_READ, a.iova(0x40000), 8, a.mr, b.iova(0), second));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "the new binding survived the stale invalidation";
    EXPECT_TRUE(same(a, 0x40000, b, 0, 8));
}

TEST_F(rc_qp_mw_test, a_bind_onto_an_mr_without_mw_bind_fails_with_mw_bind_err) {
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const auto c = complete(b, bind_wqe(1, mw, next_key(mw), b.mr, b.iova(0), 4096, window_rights));
    EXPECT_EQ(c.status, IBV_WC_MW_BIND_ERR);
    EXPECT_EQ(c.opcode, IBV_WC_BIND_MW);
}

// The bind mlx5 and rxe accept: a window asking for LOCAL_WRITE (and MW_BIND, as a program
// passing on its MR's flags does) besides REMOTE_WRITE, over an MR registered with LOCAL_WRITE
// and MW_BIND only (C10-74 asks local write of the MR, nothing of the window). Both types
// bind, a peer's WRITE lands through each, and the window grants what it was asked for
// remotely and no more: a READ is still refused.
TEST_F(rc_qp_mw_test, a_window_asking_for_local_write_binds_and_takes_a_peers_write) {
    auto req =
        proto::make_message<proto::reg_mr_request>(static_cast<uint16_t>(proto::opcode::reg_mr), 2);
    req.pd_handle = b.pd;
    req.access = proto::access_local_write | proto::access_mw_bind;
    req.addr = region_iova;
    req.iova = region_iova;
    req.length = region_bytes;
    uint32_t local_only_mr = 0;
    ASSERT_EQ(b.res->reg_mr(b.client, req, b.region_fd, local_only_mr), 0);
    constexpr uint32_t rights =
        proto::access_remote_write | proto::access_local_write | proto::access_mw_bind;
    const uint32_t t1 = alloc(IBV_MW_TYPE_1);
    const uint32_t t2 = alloc(IBV_MW_TYPE_2);
    uint64_t id = 1;
    for (const auto& [mw, at] : {std::pair{t1, uint64_t{0}}, std::pair{t2, uint64_t{4096}}}) {
        SCOPED_TRACE(mw == t1 ? "type 1" : "type 2");
        const uint32_t rkey = next_key(mw);
        const auto c =
            complete(b, bind_wqe(id++, mw, rkey, local_only_mr, b.iova(at), 4096, rights));
        ASSERT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.opcode, IBV_WC_BIND_MW);
        fill(a, 0, 64, static_cast<uint8_t>(at / 4096 + 3));
        const auto w =
            complete(a, wqe(id++, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(at), rkey));
        ASSERT_EQ(w.status, IBV_WC_SUCCESS);
        EXPECT_TRUE(same(a, 0, b, at, 64));
        EXPECT_EQ(b.res->mrs()
                      .find_remote(b.pd, b.qp, rkey, b.iova(at), 8, proto::access_remote_read)
                      .status,
                  verbs::mr_status::no_access);
    }
}

TEST_F(rc_qp_mw_test, bind_rules_refuse_what_rxe_refuses) {
    const uint32_t t2 = alloc(IBV_MW_TYPE_2);
    const uint32_t t1 = alloc(IBV_MW_TYPE_1);
    const verbs::mr_table& table = b.res->mrs();
    auto bind = [&](const proto::send_wqe& w) { return verbs::bind_window(table, w, b.pd, b.qp); };
    // Outside the MR.
    EXPECT_FALSE(bind(
        bind_wqe(1, t2, next_key(t2), bind_mr, b.iova(region_bytes - 100), 200, window_rights)));
    EXPECT_FALSE(bind(bind_wqe(1, t2, next_key(t2), bind_mr, b.iova(0), 0, window_rights)))
        << "a type-2 window is never bound with length 0";
    EXPECT_FALSE(bind(bind_wqe(1, t2, next_key(t2) + 0x100, bind_mr, b.iova(0), 64, window_rights)))
        << "a bind changes the consumer key only";
    EXPECT_FALSE(bind(bind_wqe(1, t1, next_key(t1), bind_mr, b.iova(0), 64,
                               window_rights | proto::access_zero_based)))
        << "a type-1 window is never zero-based";
    EXPECT_FALSE(verbs::bind_window(
        table, bind_wqe(1, t2, next_key(t2), bind_mr, b.iova(0), 64, window_rights),
        a.pd == b.pd ? b.pd + 1 : a.pd, b.qp))
        << "a QP of another PD";
    ASSERT_TRUE(bind(bind_wqe(1, t2, next_key(t2), bind_mr, b.iova(0), 64, window_rights)));
    EXPECT_FALSE(
        bind(bind_wqe(1, t2, next_key(next_key(t2)), bind_mr, b.iova(0), 64, window_rights)))
        << "a bound type-2 window is not bound again before it is freed";
    // Type 2 belongs to the QP that bound it; type 1 to its PD.
    EXPECT_FALSE(
        table.find_remote(b.pd, b.qp + 1, next_key(t2), b.iova(0), 8, proto::access_remote_read));
    EXPECT_TRUE(
        table.find_remote(b.pd, b.qp, next_key(t2), b.iova(0), 8, proto::access_remote_read));
    ASSERT_TRUE(bind(bind_wqe(2, t1, next_key(t1), bind_mr, b.iova(0), 64, window_rights)));
    EXPECT_TRUE(
        table.find_remote(b.pd, b.qp + 1, next_key(t1), b.iova(0), 8, proto::access_remote_read));
    EXPECT_EQ(
        table.find_remote(b.pd + 1, b.qp, next_key(t1), b.iova(0), 8, proto::access_remote_read)
            .status,
        verbs::mr_status::pd_mismatch);
    // A type-1 window cannot be invalidated (o10-37.2.26), only rebound; length 0 unbinds it.
    EXPECT_FALSE(verbs::invalidate_window(table, next_key(t1), b.pd));
    ASSERT_TRUE(bind(bind_wqe(3, t1, next_key(next_key(t1)), 0, 0, 0, 0)));
    EXPECT_FALSE(table.find_remote(b.pd, b.qp, next_key(next_key(t1)), b.iova(0), 8,
                                   proto::access_remote_read));
    // An MR's rkey is never invalidated (no fast-register MRs, as for rxe's user MRs).
    EXPECT_FALSE(verbs::invalidate_window(table, bind_mr, b.pd));
}

TEST_F(rc_qp_mw_test, send_with_inv_of_an_mr_rkey_fails_the_send_and_the_receive) {
    b.post_recv(50, 0x80000, 4096);
    auto w = wqe(1, IBV_WR_SEND_WITH_INV, a.iova(0), 100, a.mr);
    w.imm_data = bind_mr;  // b's MR, not a window: rxe refuses to invalidate a user MR
    const auto c = complete(a, w);
    EXPECT_EQ(c.status, IBV_WC_REM_INV_REQ_ERR);
    proto::cqe r{};
    ASSERT_TRUE(b.poll_recv(r));
    EXPECT_NE(r.status, IBV_WC_SUCCESS);
    EXPECT_EQ(b.res->mrs().get(bind_mr) != nullptr, true) << "the MR is untouched";
}

TEST_F(rc_qp_mw_test, local_inv_of_a_type1_window_fails_with_loc_qp_op_err) {
    const uint32_t t1 = alloc(IBV_MW_TYPE_1);
    ASSERT_EQ(
        complete(b, bind_wqe(1, t1, next_key(t1), bind_mr, b.iova(0), 64, window_rights)).status,
        IBV_WC_SUCCESS);
    EXPECT_EQ(complete(b, local_inv_wqe(2, next_key(t1))).status, IBV_WC_LOC_QP_OP_ERR);
}

TEST_F(rc_qp_mw_test, an_mr_with_a_bound_window_stays_registered_until_the_window_goes) {
    const uint32_t mw = alloc(IBV_MW_TYPE_1);
    ASSERT_EQ(
        complete(b, bind_wqe(1, mw, next_key(mw), bind_mr, b.iova(0), 64, window_rights)).status,
        IBV_WC_SUCCESS);
    EXPECT_EQ(b.res->dereg_mr(b.client, bind_mr), EBUSY);
    EXPECT_EQ(b.res->dealloc_pd(b.client, b.pd), EBUSY);
    EXPECT_EQ(a.res->dealloc_mw(a.client, mw), EINVAL) << "another client's window";
    EXPECT_EQ(b.res->count(b.client).mws, 1u);
    ASSERT_EQ(b.res->dealloc_mw(b.client, mw), 0);
    EXPECT_EQ(b.res->dealloc_mw(b.client, mw), EINVAL);
    EXPECT_EQ(b.res->dereg_mr(b.client, bind_mr), 0);
    auto c = complete(a, wqe(2, IBV_WR_RDMA_READ, a.iova(0), 8, a.mr, b.iova(0), next_key(mw)));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(rc_qp_mw_test, alloc_mw_checks_the_pd_the_type_and_the_quota) {
    uint32_t h = 0;
    EXPECT_EQ(b.res->alloc_mw(b.client, a.pd + b.pd, IBV_MW_TYPE_1, h), EINVAL);
    EXPECT_EQ(b.res->alloc_mw(a.client, b.pd, IBV_MW_TYPE_1, h), EINVAL) << "another client's PD";
    EXPECT_EQ(b.res->alloc_mw(b.client, b.pd, 3, h), EINVAL);
    verbs::vnic_quota q = b.res->quota();
    q.max_mws = 2;
    b.res->set_quota(q);
    EXPECT_EQ(b.res->alloc_mw(b.client, b.pd, IBV_MW_TYPE_1, h), 0);
    EXPECT_EQ(b.res->alloc_mw(b.client, b.pd, IBV_MW_TYPE_2, h), 0);
    EXPECT_EQ(b.res->alloc_mw(b.client, b.pd, IBV_MW_TYPE_2, h), EDQUOT);
    EXPECT_EQ(b.res->count().mws, 2u);
    b.res->release_client(b.client);
    EXPECT_EQ(b.res->count().mws, 0u);
}

TEST_F(rc_qp_mw_test, on_one_host_writes_through_a_window_and_send_with_inv_behave_as_on_the_wire) {
    wire.same_host = true;
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(
        complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0x30000), 4096, window_rights)).status,
        IBV_WC_SUCCESS);
    fill(a, 0, 4096, 17);
    const uint64_t sent_before = wire.sent;
    auto c = complete(a, wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 4096, a.mr, b.iova(0x30000), rkey));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0x30000, 4096));
    EXPECT_EQ(wire.sent, sent_before) << "memory to memory";
    b.post_recv(50, 0x80000, 4096);
    auto w = wqe(3, IBV_WR_SEND_WITH_INV, a.iova(0), 10, a.mr);
    w.imm_data = rkey;
    ASSERT_EQ(complete(a, w).status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wc_flags & IBV_WC_WITH_INV, unsigned{IBV_WC_WITH_INV});
    EXPECT_EQ(c.imm_data, rkey);
    std::memset(b.region + 0x30000, 0, 16);
    c = complete(a, wqe(4, IBV_WR_RDMA_WRITE, a.iova(0), 16, a.mr, b.iova(0x30000), rkey));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(static_cast<uint8_t>(b.region[0x30000]), 0);
}

// A message between two QPs of one host moves in slices, visits apart. A window its owner
// invalidates between two slices takes no byte after the invalidation (the wire's responder
// refuses an rkey it no longer grants), and the WRITE fails with a remote access error.
TEST_F(rc_qp_mw_test, on_one_host_a_window_invalidated_mid_write_takes_no_more_bytes) {
    wire.same_host = true;
    constexpr uint32_t length = 512 * 1024;  // more than one visit moves (256 packets of 1 KiB)
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), length, window_rights)).status,
              IBV_WC_SUCCESS);
    std::memset(a.region, 0xAB, length);
    auto landed = [&] { return std::count(b.region, b.region + length, std::byte{0xAB}); };
    // Control: the same WRITE, left alone, spans visits and lands whole.
    std::memset(b.region, 0, length);
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), length, a.mr, b.iova(0), rkey));
    run(1);
    proto::cqe c{};
    ASSERT_FALSE(a.poll_send(c)) << "one visit moves part of it";
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_EQ(landed(), length);

    std::memset(b.region, 0, length);
    a.post_send(wqe(3, IBV_WR_RDMA_WRITE, a.iova(0), length, a.mr, b.iova(0), rkey));
    run(1);
    ASSERT_FALSE(a.poll_send(c));
    const auto before = landed();
    ASSERT_GT(before, 0);
    ASSERT_LT(before, length);
    // b's LOCAL_INV of its window executes between the two visits.
    ASSERT_TRUE(verbs::invalidate_window(b.res->mrs(), rkey, b.pd));
    run(50);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(landed(), before) << "not one byte through the window once it was invalidated";
    EXPECT_NE(std::find(events.begin(), events.end(),
                        static_cast<uint32_t>(proto::event_type::qp_access_err)),
              events.end())
        << "the window's owner hears of the refused access, as from the wire";
}

// The same across hosts: the packets of a WRITE through a window that arrive after its owner
// invalidated it are refused (remote access error), never placed.
TEST_F(rc_qp_mw_test, a_window_invalidated_mid_write_takes_no_more_packets) {
    constexpr uint32_t length = 512 * 1024;
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    const uint32_t rkey = next_key(mw);
    ASSERT_EQ(complete(b, bind_wqe(1, mw, rkey, bind_mr, b.iova(0), length, window_rights)).status,
              IBV_WC_SUCCESS);
    std::memset(a.region, 0xAB, length);
    std::memset(b.region, 0, length);
    auto landed = [&] { return std::count(b.region, b.region + length, std::byte{0xAB}); };
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), length, a.mr, b.iova(0), rkey));
    run(1);
    proto::cqe c{};
    ASSERT_FALSE(a.poll_send(c));
    const auto before = landed();
    ASSERT_GT(before, 0);
    ASSERT_LT(before, length);
    ASSERT_TRUE(verbs::invalidate_window(b.res->mrs(), rkey, b.pd));  // b's LOCAL_INV
    run(100);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(landed(), before) << "not one byte through the window once it was invalidated";
}

// The responder's verdicts (responder.cc's steps) that the tests above do not reach, each as the
// requester and the responder's owner see it. Where a test needs a request no requester would
// send, it takes a's frames off the wire, rewrites them (opcode, PSN) and seals them again.
class responder_verdict_test : public rc_qp_test {
  protected:
    static constexpr std::size_t bth_at = 14 + 20 + 8;  // Ethernet, IPv4, UDP
    static constexpr std::size_t aeth_at = bth_at + 12;

    static uint8_t opcode_of(const test_wire::frame& f) { return f.bytes[bth_at]; }
    static uint32_t psn_of(const test_wire::frame& f) {
        const uint8_t* b = f.bytes.data() + bth_at + 9;
        return (uint32_t{b[0]} << 16) | (uint32_t{b[1]} << 8) | b[2];
    }
    static void set_psn(test_wire::frame& f, uint32_t psn) {
        uint8_t* b = f.bytes.data() + bth_at + 9;
        b[0] = static_cast<uint8_t>(psn >> 16);
        b[1] = static_cast<uint8_t>(psn >> 8);
        b[2] = static_cast<uint8_t>(psn);
    }
    // The AETH syndrome of an ACK or NAK b sent; -1 for any other frame.
    static int syndrome_from_b(const test_wire::frame& f) {
        return f.from == 1 && opcode_of(f) == opcode::rc_acknowledge ? f.bytes[aeth_at] : -1;
    }
    // Hands `f` (rewritten or not) to the engine as the wire would, with a fresh ICRC.
    void deliver(test_wire::frame f) {
        uint8_t* ip = f.bytes.data() + 14;
        const auto ip_len = static_cast<uint32_t>(f.bytes.size() - 14);
        store_icrc(ip + ip_len - 4, *compute_icrc(ip, ip_len - 4));
        eng.receive(f.dst_ip_be == htonl(ip_a) ? 0 : 1, ip, ip_len, wire, now);
    }
    // a's frames of what it posted, taken off the wire before anyone receives them.
    std::deque<test_wire::frame> frames_of_a() {
        eng.poll(wire, now);
        std::deque<test_wire::frame> out;
        out.swap(wire.frames);
        return out;
    }
    bool heard(proto::event_type e) const {
        return std::find(events.begin(), events.end(), static_cast<uint32_t>(e)) != events.end();
    }
    proto::cqe completion(side& s, bool send) {
        proto::cqe c{};
        EXPECT_TRUE(send ? s.poll_send(c) : s.poll_recv(c));
        return c;
    }
};

TEST_F(responder_verdict_test,
       a_psn_gap_is_nakked_once_as_a_sequence_error_and_go_back_n_heals_it) {
    connect_both();
    b.post_recv(1, 0, 8192);
    fill(a, 0, 4096, 7);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 4096, a.mr));  // 4 packets at MTU 1024
    bool lost_first = false;
    int sequence_naks = 0;
    run(200, 10'000, [&](const test_wire::frame& f) {
        if (f.from == 0 && !lost_first) {
            lost_first = true;  // packets 2-4 arrive ahead of the expected PSN
            return false;
        }
        sequence_naks += syndrome_from_b(f) == syndrome_nak(nak_code::psn_sequence_error);
        return true;
    });
    EXPECT_EQ(sequence_naks, 1) << "three packets ahead, one NAK until the expected PSN comes";
    EXPECT_EQ(completion(a, true).status, IBV_WC_SUCCESS);
    const proto::cqe r = completion(b, false);
    EXPECT_EQ(r.status, IBV_WC_SUCCESS);
    EXPECT_EQ(r.byte_len, 4096u);
    EXPECT_TRUE(same(a, 0, b, 0, 4096));
    for (const auto& q : eng.report()) {
        if (q.vnic == 1) {
            EXPECT_EQ(q.out_of_sequence, 3u);
            EXPECT_EQ(q.naks_sent, 1u);
        }
    }
}

TEST_F(responder_verdict_test, a_middle_packet_with_no_message_under_way_is_an_invalid_request) {
    connect_both();
    b.post_recv(1, 0, 8192);
    std::memset(b.region, 0x5A, 8192);
    fill(a, 0, 3000, 8);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 3000, a.mr));
    auto frames = frames_of_a();
    ASSERT_EQ(frames.size(), 3u);
    ASSERT_EQ(opcode_of(frames[1]), opcode::rc_send_middle);
    // The middle packet at the expected PSN, its first packet never seen: out of sequence.
    set_psn(frames[1], psn_of(frames[0]));
    deliver(frames[1]);
    ASSERT_FALSE(wire.frames.empty());
    EXPECT_EQ(syndrome_from_b(wire.frames.back()), syndrome_nak(nak_code::invalid_request));
    EXPECT_TRUE(heard(proto::event_type::qp_req_err));
    run(50);
    EXPECT_EQ(completion(a, true).status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(completion(b, false).status, IBV_WC_WR_FLUSH_ERR) << "the WQE was never taken";
    for (std::size_t i = 0; i < 8192; ++i) {
        ASSERT_EQ(static_cast<uint8_t>(b.region[i]), 0x5A) << "nothing placed, byte " << i;
    }
}

TEST_F(responder_verdict_test, a_first_packet_shorter_than_the_mtu_is_an_invalid_request) {
    connect_both();
    b.post_recv(1, 0, 8192);
    std::memset(b.region, 0x5A, 8192);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    auto frames = frames_of_a();
    ASSERT_EQ(frames.size(), 1u);
    ASSERT_EQ(opcode_of(frames[0]), opcode::rc_send_only);
    frames[0].bytes[bth_at] = opcode::rc_send_first;  // 100 bytes, yet more would follow
    deliver(frames[0]);
    ASSERT_FALSE(wire.frames.empty());
    EXPECT_EQ(syndrome_from_b(wire.frames.back()), syndrome_nak(nak_code::invalid_request));
    run(50);
    EXPECT_EQ(completion(a, true).status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(completion(b, false).status, IBV_WC_WR_FLUSH_ERR)
        << "refused for its length before it took a receive WQE";
    EXPECT_EQ(static_cast<uint8_t>(b.region[0]), 0x5A);
}

TEST_F(responder_verdict_test,
       a_send_longer_than_its_receive_fails_loc_len_there_and_rem_inv_req_here) {
    connect_both();
    b.post_recv(1, 0, 100);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 200, a.mr));
    run(50);
    EXPECT_EQ(completion(a, true).status, IBV_WC_REM_INV_REQ_ERR);
    const proto::cqe r = completion(b, false);
    EXPECT_EQ(r.wr_id, 1u);
    EXPECT_EQ(r.status, IBV_WC_LOC_LEN_ERR);
    EXPECT_TRUE(heard(proto::event_type::qp_req_err));
}

TEST_F(responder_verdict_test, a_receive_wqe_with_a_bad_lkey_fails_there_and_rem_op_err_here) {
    connect_both();
    proto::recv_wqe w{};
    w.wr_id = 9;
    w.num_sge = 1;
    w.sg[0] = {b.iova(0), 4096, b.mr ^ 0x55};  // no such local key
    proto::rq_slots(b.ring, b.ring->sq_capacity)[b.rq_posted & (b.ring->rq_capacity - 1)] = w;
    proto::publish_wqes(b.ring->rq_producer, ++b.rq_posted);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 64, a.mr));
    run(50);
    EXPECT_EQ(completion(a, true).status, IBV_WC_REM_OP_ERR);
    const proto::cqe r = completion(b, false);
    EXPECT_EQ(r.wr_id, 9u);
    EXPECT_EQ(r.status, IBV_WC_LOC_PROT_ERR);
    EXPECT_TRUE(heard(proto::event_type::qp_fatal));
}

TEST_F(responder_verdict_test, reads_beyond_the_responders_resources_are_an_invalid_request) {
    connect_both();
    a.post_send(wqe(1, IBV_WR_RDMA_READ, a.iova(0), 1, a.mr, b.iova(0), b.mr));
    auto frames = frames_of_a();
    ASSERT_EQ(frames.size(), 1u);
    // A requester ignoring max_dest_rd_atomic (16): one-packet READs, each at the next PSN,
    // before b has sent a single response.
    const uint32_t psn = psn_of(frames[0]);
    int refused_at = -1;
    for (int k = 0; k < 32 && refused_at < 0; ++k) {
        set_psn(frames[0], (psn + k) & 0xFFFFFF);
        deliver(frames[0]);
        for (const auto& f : wire.frames) {
            if (syndrome_from_b(f) == syndrome_nak(nak_code::invalid_request)) {
                refused_at = k;
            }
        }
    }
    EXPECT_GE(refused_at, 16) << "the READs a QP may have outstanding are taken";
    EXPECT_LT(refused_at, 32) << "a queue without bound is refused";
    EXPECT_TRUE(heard(proto::event_type::qp_req_err));
}

}  // namespace
}  // namespace jakiro::roce

namespace jakiro::roce {
namespace {

// Whether a request asks for an ACK is the AckReq bit, the top bit of the BTH's byte 8.
TEST_F(rc_qp_test, back_to_back_writes_ask_for_an_ack_every_256_packets_and_at_the_end) {
    connect_both();
    // ib_write_bw's pattern: sixteen 64 KiB WRITEs queued at once, 64 packets each at MTU 1024.
    constexpr int writes = 16;
    fill(a, 0, 65536, 7);
    for (int i = 0; i < writes; ++i) {
        auto w = wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr);
        w.send_flags = i == writes - 1 ? IBV_SEND_SIGNALED : 0;
        a.post_send(w);
    }
    std::vector<bool> asks;
    for (int step = 0; step < 2000; ++step) {
        // 100 ns of virtual time per visit: the 100 us gap rule stays out of the way.
        run(1, 100, [&](const test_wire::frame& f) {
            const uint8_t op = f.bytes[42];
            if (f.from == 0 && op >= 0x06 && op <= 0x08) {
                asks.push_back((f.bytes[42 + 8] & 0x80) != 0);
            }
            return true;
        });
        proto::cqe c{};
        if (a.poll_send(c)) {
            ASSERT_EQ(c.status, IBV_WC_SUCCESS);
            ASSERT_EQ(c.wr_id, writes - 1u);
            break;
        }
    }
    ASSERT_EQ(asks.size(), writes * 64u);
    EXPECT_TRUE(same(a, 0, b, 0, 65536));
    EXPECT_TRUE(asks.back()) << "the last packet of a burst asks, or its completion never comes";
    std::size_t asked = 0, since = 0, longest = 0;
    for (const bool ask : asks) {
        asked += ask;
        since = ask ? 0 : since + 1;
        longest = std::max(longest, since);
    }
    EXPECT_LT(longest, 256u) << "the window must open long before 2048 packets are out";
    EXPECT_LE(asked, asks.size() / 256 + 1) << "one ACK per WRITE is one message per 64 packets";
}

TEST_F(rc_qp_test, a_lone_write_and_every_send_ask_for_an_ack_on_their_last_packet) {
    connect_both();
    b.post_recv(1, 0, 4096);
    b.post_recv(2, 4096, 4096);
    std::vector<std::pair<uint8_t, bool>> requests;  // (opcode, asks)
    const auto watch = [&](const test_wire::frame& f) {
        if (f.from == 0 && f.bytes[42] != 0x11) {
            requests.emplace_back(f.bytes[42], (f.bytes[42 + 8] & 0x80) != 0);
        }
        return true;
    };
    // A WRITE with nothing behind it, then two SENDs back to back: a responder's program may
    // destroy its QP on a SEND's completion, so each SEND is acknowledged on its own.
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 3000, a.mr, b.iova(8192), b.mr));
    run(20, 100, watch);
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(0), 2000, a.mr));
    a.post_send(wqe(3, IBV_WR_SEND, a.iova(0), 2000, a.mr));
    run(50, 100, watch);
    int completed = 0;
    for (proto::cqe c{}; a.poll_send(c); ++completed) {
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    }
    EXPECT_EQ(completed, 3);
    // WRITE first, middle, last (0x06 0x07 0x08), then each SEND's first and last (0x00 0x02).
    const std::vector<std::pair<uint8_t, bool>> expected = {
        {0x06, false}, {0x07, false}, {0x08, true}, {0x00, false},
        {0x02, true},  {0x00, false}, {0x02, true}};
    EXPECT_EQ(requests, expected);
}

// The tail of a coalesced run: a WRITE's last packet leaves without AckReq because another
// WRITE follows, then that one does not go (the port is full) and the program moves the QP to
// SQD, which starts nothing new. The responder ACKs only when asked; without a probe the first
// WRITE would never complete and the drain never end.
TEST_F(rc_qp_test, a_write_whose_follower_never_leaves_is_still_acknowledged) {
    connect_both();
    fill(a, 0, 3000, 11);
    auto first = wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 3000, a.mr, b.iova(0), b.mr);
    first.send_flags = IBV_SEND_SIGNALED;
    a.post_send(first);
    a.post_send(wqe(2, IBV_WR_RDMA_WRITE, a.iova(0), 3000, a.mr, b.iova(8192), b.mr));
    std::vector<std::pair<uint32_t, bool>> requests;  // (PSN, asks) of a's requests
    const auto watch = [&](const test_wire::frame& f) {
        if (f.from == 0) {
            const uint8_t* bth = f.bytes.data() + 42;
            requests.emplace_back((bth[9] << 16) | (bth[10] << 8) | bth[11], (bth[8] & 0x80) != 0);
        }
        return true;
    };
    wire.accept_until = 3;  // the first WRITE's three packets, not the second's first
    run(1, 1'000, watch);
    ASSERT_EQ(requests.size(), 3u);
    EXPECT_FALSE(requests.back().second) << "the second WRITE was to follow: no AckReq";
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_SQD;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    wire.accept_until = UINT64_MAX;
    run(50, 10'000, watch);  // 500 us: well past the 100 us gap
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c)) << "the first WRITE never completed";
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 3000));
    // One probe: the last packet again, asking; nothing of the second WRITE (SQD).
    ASSERT_EQ(requests.size(), 4u);
    EXPECT_EQ(requests[3], std::make_pair(requests[2].first, true));
}

}  // namespace
}  // namespace jakiro::roce
