#pragma once
// What the RC, UC and UD tests of the engine share: two vNICs' QPs (made through
// vnic_resources, as the channel server makes them) exchange real RoCEv2 frames over a test wire
// that can lose, duplicate and reorder them, on a virtual clock. Work requests go into the shared
// rings and completions come out of the CQ rings exactly as the shim writes and reads them.

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
#include <optional>
#include <random>
#include <thread>
#include <vector>
#include "rnic/engine.hh"
#include "rnic/queues/memory_window.hh"
#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/resources.hh"
#include "rnic/wire/aeth.hh"
#include "rnic/wire/icrc.hh"
#include "tests/unit/rnic/qp_setup.hh"
#include "verbs_abi/qp_attr_wire.hh"

namespace jakiro::rnic::test {

namespace proto = verbs_proto;

inline constexpr std::size_t region_bytes = 1 << 20;

inline constexpr uint64_t region_iova = 0x10000000;

// The fabric between the two vNICs: frames wait here until delivered; a policy may drop,
// duplicate or hold them back.
class test_wire final : public packet_port {
  public:
    struct frame {
        uint16_t from;
        uint32_t dst_ip_be;
        std::vector<uint8_t> bytes;
        ipv6_address dst_ip6{};  // a frame to an IPv6 peer (dst_ip_be 0)
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

    void end_frame_ipv6(uint16_t vnic, const ipv6_address& dst, uint32_t len) override {
        EXPECT_EQ(len, _building.size());
        frames.push_back({vnic, 0, _building, dst});
        ++sent;
    }
    // IPv6 peers: the vNIC of each address, and the datagram policy (`refused_ipv6`).
    std::vector<std::pair<ipv6_address, uint16_t>> ipv6_vnics;
    std::vector<ipv6_address> refused_ipv6;
    uint16_t local_vnic_ipv6(uint16_t, const ipv6_address& dst) const override {
        if (!same_host) {
            return no_local_vnic;
        }
        for (const auto& [address, vnic] : ipv6_vnics) {
            if (address == dst) {
                return vnic;
            }
        }
        return no_local_vnic;
    }
    bool permits_datagram_ipv6(uint16_t, const ipv6_address& remote, bool) override {
        return std::find(refused_ipv6.begin(), refused_ipv6.end(), remote) == refused_ipv6.end();
    }
    bool admits_connection_ipv6(uint16_t, const ipv6_address& remote) override {
        ++connection_checks;
        return std::find(refused_ipv6.begin(), refused_ipv6.end(), remote) == refused_ipv6.end();
    }
    // The vNIC a frame goes to: by its IPv6 destination, else by its IPv4 one.
    uint16_t receiver_of(const frame& f, uint32_t ip_a_be) const {
        if (f.dst_ip_be == 0) {
            for (const auto& [address, vnic] : ipv6_vnics) {
                if (address == f.dst_ip6) {
                    return vnic;
                }
            }
        }
        return f.dst_ip_be == ip_a_be ? 0 : 1;
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
    // The rdma class's grants the engine asked for, per sending vNIC (always given).
    bool admit(uint16_t vnic, uint32_t frame_len) override {
        if (vnic < admitted_bytes.size()) {
            admitted_bytes[vnic] += frame_len;
        }
        return true;
    }
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
    bool meter_fabric = false;  // run() hands the receiver's meter with every frame it delivers
    std::array<uint64_t, 2> admitted_bytes{};
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
    std::shared_ptr<verbs::vnic_resources> res;  // several programs of one vNIC share it
    uint32_t pd = 0, mr = 0, scq = 0, rcq = 0, qp = 0;
    int region_fd = -1;
    std::byte* region = nullptr;  // the test's mapping of the MR's pages
    proto::qp_ring_header* ring = nullptr;
    std::size_t ring_bytes = 0;
    proto::doorbell_page* doorbell = nullptr;  // the vNIC's, as the shim maps it
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
        if (doorbell != nullptr) {
            munmap(doorbell, proto::doorbell_bytes);
        }
        munmap(send_cq, send_cq_bytes);
        munmap(recv_cq, recv_cq_bytes);
        close(region_fd);
    }

    uint64_t iova(std::size_t offset) const { return region_iova + offset; }

    void post_send(const proto::send_wqe& w) {
        proto::sq_slots(ring)[sq_posted & (ring->sq_capacity - 1)] = w;
        proto::publish_wqes(ring->sq_producer, ++sq_posted);
        ring_if_wanted();
    }
    // What the shim does after publishing sends (verbs_shim/post.cc).
    void ring_if_wanted() {
        if (proto::doorbell_wanted_after_publish(*ring)) {
            proto::ring_doorbell(*doorbell, qp);
        }
    }
    // ... and after publishing receives.
    void ring_if_receives_wanted() {
        if (proto::doorbell_wanted_after_publishing_receives(*ring)) {
            proto::ring_doorbell(*doorbell, qp);
        }
    }
    void post_recv(uint64_t wr_id, std::size_t offset, uint32_t length) {
        proto::recv_wqe w{};
        w.wr_id = wr_id;
        w.num_sge = 1;
        w.sg[0] = {iova(offset), length, mr};
        proto::rq_slots(ring, ring->sq_capacity)[rq_posted & (ring->rq_capacity - 1)] = w;
        proto::publish_wqes(ring->rq_producer, ++rq_posted);
        ring_if_receives_wanted();
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

class QueuePairTest : public ::testing::Test {
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

    // `on`: another side's vNIC, whose resources (QP numbers, doorbell page) this side shares as
    // a second program of that vNIC would; otherwise a vNIC of its own in `slot`.
    void make_side(side& s, uint16_t slot, uint32_t ip, uint64_t client, uint32_t quota = 4,
                   const side* on = nullptr) {
        s.client = client;
        s.vnic = slot;
        if (on != nullptr) {
            s.vnic = on->vnic;
            s.res = on->res;
        } else {
            make_vnic(s, slot, ip, quota);
        }
        finish_side(s, client);
    }

    void make_vnic(side& s, uint16_t slot, uint32_t ip, uint32_t quota) {
        verbs::vnic_quota limits;
        limits.max_qps = quota;
        s.res = std::make_unique<verbs::vnic_resources>(verbs::engine_limits(),
                                                        verbs::cq_error_sink{}, limits);
        verbs::qp_support support;
        support.engine = &eng;
        support.local.vnic = slot;
        support.local.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(slot + 1)};
        support.local.ip_be = htonl(ip);
        if (slot < vnic_ip6.size()) {
            support.local.ip6 = vnic_ip6[slot];
            support.limits.gid_table_len = 2;
            wire.ipv6_vnics.push_back({vnic_ip6[slot], slot});
        }
        support.limits.max_mtu = IBV_MTU_4096;
        support.events = {[](void* self, uint64_t, uint32_t type, uint32_t) {
                              static_cast<QueuePairTest*>(self)->events.push_back(type);
                          },
                          this};
        // The security groups as ibv_modify_qp meets them: `denied` peers get EACCES.
        support.admit = [this, slot](uint32_t remote_ip_be) {
            return std::find(denied.begin(), denied.end(), std::make_pair(slot, remote_ip_be)) !=
                           denied.end()
                       ? EACCES
                       : 0;
        };
        // IPv6 peers as ibv_modify_qp meets them: `denied_ipv6` ones get EACCES.
        support.admit_ipv6 = [this](const ipv6_address& remote) {
            return std::find(denied_ipv6.begin(), denied_ipv6.end(), remote) != denied_ipv6.end()
                       ? EACCES
                       : 0;
        };
        s.res->enable_qps(support);
    }

    void finish_side(side& s, uint64_t client) {
        ASSERT_EQ(s.res->alloc_pd(client, s.pd), 0);
        s.region_fd = memfd_create("test-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ASSERT_EQ(ftruncate(s.region_fd, region_bytes), 0);
        ASSERT_EQ(fcntl(s.region_fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
        s.region = static_cast<std::byte*>(
            mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.region_fd, 0));
        ASSERT_EQ(s.res->reg_mr(client, region_mr_request(s.pd, region_iova, region_bytes),
                                s.region_fd, s.mr),
                  0);
        verbs::cq_created scq, rcq;
        const auto cq = cq_request(4096);
        int no_channel = -1;
        ASSERT_EQ(s.res->create_cq(client, cq, no_channel, scq), 0);
        ASSERT_EQ(s.res->create_cq(client, cq, no_channel, rcq), 0);
        s.scq = scq.handle;
        s.rcq = rcq.handle;
        s.cq_capacity = scq.capacity;
        s.send_cq_bytes = scq.ring_bytes;
        s.recv_cq_bytes = rcq.ring_bytes;
        s.send_cq = map_shared<proto::cq_ring_header>(scq.ring_fd, scq.ring_bytes);
        s.recv_cq = map_shared<proto::cq_ring_header>(rcq.ring_fd, rcq.ring_bytes);
        close(scq.ring_fd);
        close(rcq.ring_fd);
        verbs::qp_created q;
        ASSERT_EQ(s.res->create_qp(client, qp_request(s), q), 0);
        s.qp = q.handle;
        s.ring_bytes = q.ring_bytes;
        s.ring = map_shared<proto::qp_ring_header>(q.ring_fd, q.ring_bytes);
        s.doorbell = map_shared<proto::doorbell_page>(q.doorbell_fd, proto::doorbell_bytes);
        ASSERT_NE(s.doorbell, MAP_FAILED);
        close(q.ring_fd);
        close(q.doorbell_fd);
    }

    proto::create_qp_request qp_request(const side& s) const {
        auto r = qp_create_request(s.pd, s.scq, s.rcq, 512, 4, qp_type);
        r.max_inline_data = 64;
        return r;
    }

    int modify(side& s, const ibv_qp_attr& attr, int mask) {
        return s.res->modify_qp(s.client, s.qp, verbs_proto::to_wire(attr), mask);
    }

    // RESET -> INIT -> RTR -> RTS towards `peer` at `peer_ip`, path MTU 1024.
    void connect(side& s, const side& peer, uint32_t peer_ip, uint8_t retry_cnt = 7,
                 uint8_t rnr_retry = 7, uint8_t timeout = 14) {
        connect_by(s, peer, av_to(peer_ip), retry_cnt, rnr_retry, timeout);
    }
    // The same towards the peer that address vector `av` names (an IPv6 GID, say).
    void connect_by(side& s, const side& peer, const ibv_ah_attr& av, uint8_t retry_cnt = 7,
                    uint8_t rnr_retry = 7, uint8_t timeout = 14) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qp_access_flags = qp_access;
        ASSERT_EQ(
            modify(s, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
        attr = rtr_attr(peer.qp, 0, 0x123456 ^ peer.qp);
        attr.ah_attr = av;
        // UC has no responder resources and no RNR (IB spec 11.2.4.2's tables).
        const int rc_only =
            qp_type == proto::qpt_uc ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        ASSERT_EQ(modify(s, attr,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | rc_only),
                  0);
        attr = rts_attr(0x123456 ^ s.qp, timeout, retry_cnt, rnr_retry);
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
    // `keep` decides the fate of each frame (true: deliver); a frame `hold_back` picks (among
    // those kept) arrives one iteration late, after that iteration's own frames.
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
            const std::size_t fresh = batch.size();
            std::deque<test_wire::frame> late;
            late.swap(held);
            for (auto& f : late) {
                batch.push_back(std::move(f));
            }
            for (std::size_t k = 0; k < batch.size(); ++k) {
                test_wire::frame& f = batch[k];
                const bool kept = k >= fresh || !keep || keep(f);
                if (kept && k < fresh && hold_back && hold_back(f)) {
                    held.push_back(std::move(f));
                    continue;
                }
                if (std::getenv("JAKIRO_TRACE") != nullptr) {
                    const uint8_t* bth = f.bytes.data() + 42;
                    std::printf("%s %u->%s op %02x psn %06x%s\n", kept ? "  " : "XX", f.from,
                                f.dst_ip_be == htonl(ip_a) ? "a" : "b", bth[0],
                                (bth[9] << 16) | (bth[10] << 8) | bth[11],
                                bth[0] == 0x11 ? ((bth[12] & 0x60) == 0 ? " ack" : " nak") : "");
                }
                if (!kept) {
                    continue;
                }
                const uint16_t to = wire.receiver_of(f, htonl(ip_a));
                const uint8_t* ip = f.bytes.data() + 14;
                eng.receive(to, ip, static_cast<uint32_t>(f.bytes.size() - 14), wire, now,
                            wire.meter_fabric ? wire.receiving_meter(to) : nullptr);
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

    // Runs `steps` polls, losing the frames of a that `lose` names (each once it says so);
    // the PSNs of b's frames (its answers), in the order they left.
    std::vector<uint32_t> answers_of_b(
        unsigned steps, const std::function<bool(const test_wire::frame&)>& lose =
                            [](const test_wire::frame&) { return false; });
    // The next send completions of `s` are `wr_ids`, in that order, each successful.
    void expect_sends_complete(side& s, std::initializer_list<uint64_t> wr_ids) {
        for (const uint64_t id : wr_ids) {
            proto::cqe c{};
            if (!s.poll_send(c)) {
                ADD_FAILURE() << "no completion for WR " << id;
                return;
            }
            EXPECT_EQ(c.wr_id, id);
            EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        }
    }
    // Each of the first `count` answers follows the one before it by one PSN.
    static void expect_in_psn_order(const std::vector<uint32_t>& answers, std::size_t count) {
        ASSERT_GE(answers.size(), count);
        for (std::size_t i = 1; i < count; ++i) {
            EXPECT_EQ(answers[i], (answers[i - 1] + 1) & 0xFFFFFF) << "answer " << i;
        }
    }
    // Side `s`'s QP sent nothing twice and never waited out its ACK timeout.
    void expect_nothing_sent_twice(const side& s);

    uint8_t qp_type = proto::qpt_rc;  // of the QPs make_side creates
    // What connect() lets peers do (IBV_QP_ACCESS_FLAGS).
    unsigned qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC;
    std::vector<std::pair<uint16_t, uint32_t>> denied;  // (vNIC slot, peer) for admit
    std::vector<ipv6_address> denied_ipv6;              // peers admit_ipv6 refuses
    // The vNICs' IPv6 addresses by slot (2001:2::1:1 for a, 2001:2::1:2 for b): set before
    // SetUp makes the sides to give them one (GID index 1).
    std::vector<ipv6_address> vnic_ip6;
    engine eng{3, 16};  // vNIC slots 0 (a), 1 (b) and 2 (a third tenant)
    test_wire wire;
    side a, b;
    uint64_t now = 1'000'000'000;
    bool reorder = false;
    std::mt19937 reorder_rng{GetParamSeed() + 1};
    std::function<bool(const test_wire::frame&)> hold_back;  // see run()
    std::deque<test_wire::frame> held;                       // frames hold_back delays
    std::vector<uint32_t> events;
};

inline proto::send_wqe atomic_wqe(uint64_t wr_id, ibv_wr_opcode op, uint64_t local, uint32_t lkey,
                                  uint64_t remote, uint32_t rkey, uint64_t compare_add,
                                  uint64_t swap) {
    auto w = wqe(wr_id, op, local, 8, lkey, remote, rkey);
    w.compare_add = compare_add;
    w.swap = swap;
    return w;
}

// A frame's BTH opcode and PSN (behind Ethernet, IPv4 and UDP: 42 bytes).
inline uint8_t opcode_of(const test_wire::frame& f) {
    return f.bytes[42];
}
inline uint32_t psn_of(const test_wire::frame& f) {
    const uint8_t* bth = f.bytes.data() + 42;
    return (uint32_t{bth[9]} << 16) | (uint32_t{bth[10]} << 8) | bth[11];
}
inline bool is_read_response(const test_wire::frame& f) {
    return opcode_of(f) >= opcode::rc_read_response_first &&
           opcode_of(f) <= opcode::rc_read_response_only;
}

inline uint64_t word_at(const side& s, std::size_t offset) {
    uint64_t v;
    std::memcpy(&v, s.region + offset, sizeof(v));
    return v;
}

// The report of side `s`'s QP: its vNIC's, since another vNIC's QP may have the same number.
// A copy, so that it outlives the report it came from (`report_of(eng.report(), a)`).
inline std::optional<qp_report> report_of(const std::vector<qp_report>& r, const side& s) {
    for (const auto& q : r) {
        if (q.vnic == s.vnic && q.qpn == s.qp) {
            return q;
        }
    }
    return std::nullopt;
}

inline std::vector<uint32_t> QueuePairTest::answers_of_b(
    unsigned steps, const std::function<bool(const test_wire::frame&)>& lose) {
    std::vector<uint32_t> answers;
    run(steps, 10'000, [&](const test_wire::frame& f) {
        if (f.from == a.vnic && lose(f)) {
            return false;
        }
        if (f.from == b.vnic) {
            answers.push_back(psn_of(f));
        }
        return true;
    });
    return answers;
}

inline void QueuePairTest::expect_nothing_sent_twice(const side& s) {
    const std::optional<qp_report> r = report_of(eng.report(), s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->retransmitted, 0u);
    EXPECT_EQ(r->timeouts, 0u);
}

inline uint64_t drops_of(const engine& e, engine_drop d) {
    return e.counters().drops[static_cast<std::size_t>(d)].read();
}

//
// b owns the windows: a second registration of its region that allows binds (bind_mr), and
// windows bound by b's QP; a is the peer that reaches b's memory through them.
class QueuePairMwTest : public QueuePairTest {
  protected:
    static constexpr uint32_t window_rights =
        proto::access_remote_write | proto::access_remote_read | proto::access_remote_atomic;

    void SetUp() override {
        QueuePairTest::SetUp();
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

}  // namespace jakiro::rnic::test
