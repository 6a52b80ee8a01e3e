// ibv_post_send / ibv_post_recv (the inline verbs of verbs.h, through the shim's ops) against
// a fake jakirod's real ring: the WQEs written field by field, inline data copied at post
// time, every refusal naming its work request, a full queue until jakirod retires slots, the
// doorbell rung only for a QP the engine parked (a system call only while it sleeps), and posting
// from several threads at once.

#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "tests/unit/verbs_shim/qp_fixture.hh"
#include "verbs_shim/memory_window.hh"

namespace jakiro::verbs_shim::testing {
namespace {

namespace proto = verbs_proto;

class ShimPost : public QpFixture {
  protected:
    // An RC QP in RTS: 16 send and receive slots, 4 SGEs, 64 inline bytes unless asked.
    void SetUp() override {
        QpFixture::SetUp();
        if (HasFatalFailure()) {
            return;
        }
        qp = make_qp(send_wr, recv_wr, 4, 64);
        ASSERT_NE(qp, nullptr);
        for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
            ASSERT_EQ(move_to(qp, s), 0);
        }
        rec = &fake->qp(qp->handle);
    }
    void TearDown() override {
        if (qp != nullptr) {
            EXPECT_EQ(destroy_qp(qp), 0);
        }
        QpFixture::TearDown();
    }

    proto::qp_ring_header& ring() { return *rec->ring; }
    const proto::send_wqe& sent(uint32_t index) {
        return proto::sq_slots(rec->ring)[index & (ring().sq_capacity - 1)];
    }
    const proto::recv_wqe& posted(uint32_t index) {
        return proto::rq_slots(rec->ring, ring().sq_capacity)[index & (ring().rq_capacity - 1)];
    }
    uint32_t sq_producer() { return proto::load_posted_acquire(ring().sq_producer); }
    uint32_t rq_producer() { return proto::load_posted_acquire(ring().rq_producer); }
    // What the engine does once it is done with slots.
    void retire_send(uint32_t upto) { proto::retire_slots(ring().sq_consumer, upto); }
    void retire_recv(uint32_t upto) { proto::retire_slots(ring().rq_consumer, upto); }
    // How often the doorbell was rung since the last look.
    uint64_t doorbell() {
        const uint32_t now = proto::doorbell_count(*rec->doorbell);
        const uint32_t rung = now - doorbell_seen;
        doorbell_seen = now;
        return rung;
    }
    uint32_t doorbell_seen = 0;

    uint32_t send_wr = 16;
    uint32_t recv_wr = 16;
    ibv_qp* qp = nullptr;
    fake_jakirod::qp_record* rec = nullptr;
};

ibv_sge sge(uint64_t addr, uint32_t length, uint32_t lkey) {
    return ibv_sge{addr, length, lkey};
}

void expect_zero(const uint32_t* words, std::size_t n, const char* what) {
    for (std::size_t i = 0; i < n; ++i) {
        EXPECT_EQ(words[i], 0u) << what << "[" << i << "]";
    }
}

TEST_F(ShimPost, SendWritesEveryFieldOfEachWorkRequestAndPublishesThem) {
    // Stale bytes in the slots: every header field must be written, not inherited.
    std::memset(proto::sq_slots(rec->ring), 0xee, std::size_t{16} * proto::wqe_size);
    ibv_sge s[4] = {sge(0x1000, 10, 0x11), sge(0x2000, 20, 0x22), sge(0x3000, 30, 0x33),
                    sge(0x4000, 40, 0x44)};
    ibv_send_wr w[6] = {};
    w[0].wr_id = 100;
    w[0].opcode = IBV_WR_SEND;
    w[0].send_flags = IBV_SEND_SIGNALED;
    w[0].sg_list = s;
    w[0].num_sge = 2;
    w[1].wr_id = 101;
    w[1].opcode = IBV_WR_SEND_WITH_IMM;
    w[1].send_flags = IBV_SEND_SOLICITED;
    w[1].imm_data = htobe32(0x01020304);
    w[1].sg_list = s + 3;
    w[1].num_sge = 1;
    w[2].wr_id = 102;
    w[2].opcode = IBV_WR_RDMA_WRITE;
    w[2].send_flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED;
    w[2].wr.rdma.remote_addr = 0xdead0000beef;
    w[2].wr.rdma.rkey = 0x5501;
    w[2].sg_list = s;
    w[2].num_sge = 3;
    w[3].wr_id = 103;
    w[3].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    w[3].imm_data = htobe32(0xa0b0c0d0);
    w[3].wr.rdma.remote_addr = 0x7000;
    w[3].wr.rdma.rkey = 0x5502;
    w[3].sg_list = s;
    w[3].num_sge = 4;
    w[4].wr_id = 104;
    w[4].opcode = IBV_WR_RDMA_READ;
    w[4].wr.rdma.remote_addr = 0x8000;
    w[4].wr.rdma.rkey = 0x5503;
    w[4].sg_list = s + 1;
    w[4].num_sge = 1;
    w[5].wr_id = 105;
    w[5].opcode = IBV_WR_SEND;   // a zero-length send: no SGEs at all
    w[5].imm_data = 0x12345678;  // not a *_WITH_IMM: must not travel
    for (int i = 0; i < 5; ++i) {
        w[i].next = &w[i + 1];
    }
    ibv_send_wr* bad = &w[3];
    ASSERT_EQ(ibv_post_send(qp, w, &bad), 0);
    EXPECT_EQ(bad, &w[3]) << "untouched on success";
    EXPECT_EQ(sq_producer(), 6u);

    for (uint32_t i = 0; i < 6; ++i) {
        const proto::send_wqe& q = sent(i);
        SCOPED_TRACE(i);
        EXPECT_EQ(q.wr_id, w[i].wr_id);
        EXPECT_EQ(q.opcode, uint32_t{w[i].opcode});
        EXPECT_EQ(q.send_flags, w[i].send_flags);
        EXPECT_EQ(q.num_sge, uint32_t(w[i].num_sge));
        EXPECT_EQ(q.inline_len, 0u);
        EXPECT_EQ(q.compare_add, 0u);
        EXPECT_EQ(q.swap, 0u);
        EXPECT_EQ(q.ud_remote_ip, 0u);
        EXPECT_EQ(q.ud_remote_qpn, 0u);
        EXPECT_EQ(q.ud_remote_qkey, 0u);
        EXPECT_EQ(q.mw_handle, 0u);
        EXPECT_EQ(q.mw_mr_lkey, 0u);
        EXPECT_EQ(q.mw_access, 0u);
        for (std::size_t b = 0; b < sizeof(q.ud_remote_ip6); ++b) {
            EXPECT_EQ(q.ud_remote_ip6[b], 0u) << "ud_remote_ip6[" << b << "]";
        }
        for (int j = 0; j < w[i].num_sge; ++j) {
            EXPECT_EQ(q.sg[j].addr, w[i].sg_list[j].addr);
            EXPECT_EQ(q.sg[j].length, w[i].sg_list[j].length);
            EXPECT_EQ(q.sg[j].lkey, w[i].sg_list[j].lkey);
        }
    }
    EXPECT_EQ(sent(0).imm_data, 0u);
    EXPECT_EQ(sent(0).rkey, 0u);
    EXPECT_EQ(sent(0).remote_addr, 0u);
    EXPECT_EQ(sent(1).imm_data, htobe32(0x01020304)) << "network order, as posted";
    EXPECT_EQ(sent(1).remote_addr, 0u);
    EXPECT_EQ(sent(2).imm_data, 0u);
    EXPECT_EQ(sent(2).remote_addr, 0xdead0000beefu);
    EXPECT_EQ(sent(2).rkey, 0x5501u);
    EXPECT_EQ(sent(3).imm_data, htobe32(0xa0b0c0d0));
    EXPECT_EQ(sent(3).remote_addr, 0x7000u);
    EXPECT_EQ(sent(3).rkey, 0x5502u);
    EXPECT_EQ(sent(4).remote_addr, 0x8000u);
    EXPECT_EQ(sent(4).rkey, 0x5503u);
    EXPECT_EQ(sent(5).imm_data, 0u);
    EXPECT_EQ(doorbell(), 0u) << "jakirod is awake: no system call";
}

TEST_F(ShimPost, InlineDataIsCopiedIntoTheSlotAtPostTime) {
    char a[20], c[44];
    std::memset(a, 'a', sizeof(a));
    std::memset(c, 'c', sizeof(c));
    // lkeys do not matter for inline data: the bytes travel in the WQE.
    ibv_sge s[3] = {sge(reinterpret_cast<uintptr_t>(a), 20, 0),
                    sge(reinterpret_cast<uintptr_t>(a), 0, 0),
                    sge(reinterpret_cast<uintptr_t>(c), 44, 0)};
    ibv_send_wr w{};
    w.wr_id = 7;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = 0x9000;
    w.wr.rdma.rkey = 0x77;
    w.sg_list = s;
    w.num_sge = 3;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    std::memset(a, 'x', sizeof(a));  // the program may reuse its buffers at once
    std::memset(c, 'x', sizeof(c));
    const proto::send_wqe& q = sent(0);
    EXPECT_EQ(q.inline_len, 64u);
    EXPECT_EQ(q.num_sge, 0u);
    EXPECT_EQ(q.send_flags, unsigned{IBV_SEND_INLINE | IBV_SEND_SIGNALED});
    EXPECT_EQ(q.remote_addr, 0x9000u);
    EXPECT_EQ(q.rkey, 0x77u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(q.inline_data), 64),
              std::string(20, 'a') + std::string(44, 'c'));

    // An inline send with no data at all is fine too.
    w.opcode = IBV_WR_SEND;
    w.num_sge = 0;
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    EXPECT_EQ(sent(1).inline_len, 0u);
}

// IBTA 1.5 ATOMIC WRITE through ibv_post_send: its one 8-byte SGE is read at post time, as
// inline data is, whatever max_inline_data the QP has.
TEST_F(ShimPost, AtomicWriteTakesItsEightBytesAtPostTime) {
    uint64_t value = 0x1122334455667788;
    ibv_sge s = sge(reinterpret_cast<uintptr_t>(&value), 8, 0x42);
    ibv_send_wr w{};
    w.wr_id = 9;
    w.opcode = IBV_WR_ATOMIC_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = 0xA000;
    w.wr.rdma.rkey = 0x99;
    w.sg_list = &s;
    w.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    value = 0;  // the program may reuse its buffer at once
    const proto::send_wqe& q = sent(0);
    EXPECT_EQ(q.opcode, unsigned{IBV_WR_ATOMIC_WRITE});
    EXPECT_EQ(q.inline_len, 8u);
    EXPECT_EQ(q.num_sge, 0u);
    EXPECT_NE(q.send_flags & IBV_SEND_INLINE, 0u);
    EXPECT_EQ(q.remote_addr, 0xA000u);
    EXPECT_EQ(q.rkey, 0x99u);
    uint64_t carried = 0;
    std::memcpy(&carried, q.inline_data, 8);
    EXPECT_EQ(carried, 0x1122334455667788u);
}

// What mlx5 and rxe take in a window's access flags, ibv_post_send takes too: LOCAL_WRITE and
// MW_BIND (a window grants remote rights only, so they add nothing) and the optional bits
// libibverbs lets a device ignore (relaxed ordering), which are dropped.
TEST_F(ShimPost, BindMwTakesLocalWriteAndOptionalBitsInTheWindowsAccessFlags) {
    shim_mw window{};
    window.mw.context = ctx;
    window.mw.pd = pd;
    window.mw.handle = window.mw.rkey = 0x4200;
    window.mw.type = IBV_MW_TYPE_2;
    window.magic = mw_magic;
    shim_mr region{};
    region.mr.context = ctx;
    region.mr.pd = pd;
    region.mr.lkey = region.mr.rkey = 0x5300;
    region.magic = mr_magic;
    region.access = proto::access_local_write | proto::access_mw_bind;
    ibv_send_wr w{};
    w.wr_id = 7;
    w.opcode = IBV_WR_BIND_MW;
    w.send_flags = IBV_SEND_SIGNALED;
    w.bind_mw.mw = &window.mw;
    w.bind_mw.rkey = ibv_inc_rkey(window.mw.rkey);
    w.bind_mw.bind_info.mr = &region.mr;
    w.bind_mw.bind_info.addr = 0x10000;
    w.bind_mw.bind_info.length = 4096;
    w.bind_mw.bind_info.mw_access_flags =
        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    ASSERT_EQ(sq_producer(), 1u);
    const proto::send_wqe& q = sent(0);
    EXPECT_EQ(q.opcode, unsigned{IBV_WR_BIND_MW});
    EXPECT_EQ(q.mw_handle, 0x4200u);
    EXPECT_EQ(q.rkey, 0x4201u);
    EXPECT_EQ(q.mw_mr_lkey, 0x5300u);
    EXPECT_EQ(q.remote_addr, 0x10000u);
    EXPECT_EQ(q.compare_add, 4096u);
    EXPECT_EQ(q.mw_access, uint32_t{IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE});
    // A program that passes on its MR's flags.
    w.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND;
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    ASSERT_EQ(sq_producer(), 2u);
    EXPECT_EQ(sent(1).mw_access, w.bind_mw.bind_info.mw_access_flags);
    // A bit that names nothing a window could grant is still refused.
    w.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | (1u << 15);
    EXPECT_EQ(ibv_post_send(qp, &w, &bad), EINVAL);
    EXPECT_EQ(bad, &w);
    EXPECT_EQ(sq_producer(), 2u);
}

TEST_F(ShimPost, SendRefusesInvalidWorkRequestsAndNamesTheFirst) {
    char buf[128] = {};
    ibv_sge s[5];
    for (auto& x : s) {
        x = sge(reinterpret_cast<uintptr_t>(buf), 13, 0x42);
    }
    ibv_sge big[2] = {sge(reinterpret_cast<uintptr_t>(buf), 33, 0),
                      sge(reinterpret_cast<uintptr_t>(buf), 32, 0)};
    using change = std::function<void(ibv_send_wr&)>;
    const std::vector<std::pair<const char*, change>> invalid = {
        {"compare and swap into 13 bytes", [](auto& w) { w.opcode = IBV_WR_ATOMIC_CMP_AND_SWP; }},
        {"fetch and add into 13 bytes", [](auto& w) { w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; }},
        {"bind MW of no window", [](auto& w) { w.opcode = IBV_WR_BIND_MW; }},
        {"TSO", [](auto& w) { w.opcode = IBV_WR_TSO; }},
        {"driver", [](auto& w) { w.opcode = IBV_WR_DRIVER1; }},
        {"atomic write of four 13-byte SGEs", [](auto& w) { w.opcode = IBV_WR_ATOMIC_WRITE; }},
        {"atomic write of one 13-byte SGE",
         [](auto& w) {
             w.opcode = IBV_WR_ATOMIC_WRITE;
             w.num_sge = 1;
         }},
        {"unknown opcode", [](auto& w) { w.opcode = static_cast<ibv_wr_opcode>(99); }},
        {"too many SGEs", [](auto& w) { w.num_sge = 5; }},
        {"too many SGEs for a read",
         [](auto& w) {
             w.opcode = IBV_WR_RDMA_READ;
             w.num_sge = 5;
         }},
        {"negative SGE count", [](auto& w) { w.num_sge = -1; }},
        {"SGEs without a list", [](auto& w) { w.sg_list = nullptr; }},
        {"inline beyond the QP's room",
         [&big](auto& w) {
             w.send_flags = IBV_SEND_INLINE;
             w.sg_list = big;  // 65 bytes
             w.num_sge = 2;
         }},
        {"inline READ",
         [](auto& w) {
             w.opcode = IBV_WR_RDMA_READ;
             w.send_flags = IBV_SEND_INLINE;
             w.num_sge = 1;
         }},
        {"IP checksum offload (UD and raw only)", [](auto& w) { w.send_flags = IBV_SEND_IP_CSUM; }},
        {"unknown flag", [](auto& w) { w.send_flags = 1u << 7; }},
    };
    uint32_t expected_producer = 0;
    for (const auto& [name, make_bad] : invalid) {
        SCOPED_TRACE(name);
        ibv_send_wr w[3] = {};
        for (auto& x : w) {
            x.opcode = IBV_WR_SEND;
            x.sg_list = s;
            x.num_sge = 4;
        }
        w[0].next = &w[1];
        w[1].next = &w[2];
        make_bad(w[1]);
        ibv_send_wr* bad = nullptr;
        EXPECT_EQ(ibv_post_send(qp, w, &bad), EINVAL);
        EXPECT_EQ(bad, &w[1]);
        ++expected_producer;  // the one before it was posted, the one after it was not
        EXPECT_EQ(sq_producer(), expected_producer);
        retire_send(expected_producer);
    }
    // NULL and foreign QPs are refused without being touched beyond their magic.
    struct {
        alignas(64) unsigned char bytes[1024] = {};
    } foreign;
    auto* other = reinterpret_cast<ibv_qp*>(foreign.bytes);
    other->context = ctx;
    ibv_send_wr w{};
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(other, &w, &bad), EINVAL);
    EXPECT_EQ(bad, &w);
    ibv_recv_wr r{};
    ibv_recv_wr* bad_r = nullptr;
    EXPECT_EQ(ibv_post_recv(other, &r, &bad_r), EINVAL);
    EXPECT_EQ(bad_r, &r);
}

TEST_F(ShimPost, EachQueueOpensInItsState) {
    ibv_qp* fresh = make_qp();
    ASSERT_NE(fresh, nullptr);
    auto& fresh_ring = *fake->qp(fresh->handle).ring;
    ibv_send_wr w{};
    w.opcode = IBV_WR_SEND;
    ibv_recv_wr r{};
    ibv_send_wr* bad = nullptr;
    ibv_recv_wr* bad_r = nullptr;
    // RESET: neither queue.
    EXPECT_EQ(ibv_post_send(fresh, &w, &bad), EINVAL);
    EXPECT_EQ(bad, &w);
    EXPECT_EQ(ibv_post_recv(fresh, &r, &bad_r), EINVAL);
    EXPECT_EQ(bad_r, &r);
    // INIT and RTR: receives only.
    for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR}) {
        ASSERT_EQ(move_to(fresh, s), 0);
        bad = nullptr;
        EXPECT_EQ(ibv_post_send(fresh, &w, &bad), EINVAL) << s;
        EXPECT_EQ(bad, &w);
        EXPECT_EQ(ibv_post_recv(fresh, &r, &bad_r), 0) << s;
    }
    EXPECT_EQ(proto::load_posted_acquire(fresh_ring.sq_producer), 0u);
    EXPECT_EQ(proto::load_posted_acquire(fresh_ring.rq_producer), 2u);
    // RTS, SQD, ERR: both (in ERR the engine flushes them with an error completion).
    for (ibv_qp_state s : {IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR}) {
        ASSERT_EQ(move_to(fresh, s), 0);
        EXPECT_EQ(ibv_post_send(fresh, &w, &bad), 0) << s;
        EXPECT_EQ(ibv_post_recv(fresh, &r, &bad_r), 0) << s;
    }
    EXPECT_EQ(proto::load_posted_acquire(fresh_ring.sq_producer), 3u);
    // Back to RESET: closed again.
    ASSERT_EQ(move_to(fresh, IBV_QPS_RESET), 0);
    EXPECT_EQ(ibv_post_send(fresh, &w, &bad), EINVAL);
    EXPECT_EQ(ibv_post_recv(fresh, &r, &bad_r), EINVAL);
    EXPECT_EQ(destroy_qp(fresh), 0);
}

TEST_F(ShimPost, AFullSendQueueIsEnomemUntilJakirodRetiresSlots) {
    ibv_send_wr w[20] = {};
    for (int i = 0; i < 20; ++i) {
        w[i].wr_id = 1000 + i;
        w[i].opcode = IBV_WR_SEND;
        w[i].next = i + 1 < 20 ? &w[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp, w, &bad), ENOMEM);
    EXPECT_EQ(bad, &w[16]) << "16 slots: the 17th does not fit";
    EXPECT_EQ(sq_producer(), 16u);
    bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &w[19], &bad), ENOMEM);
    EXPECT_EQ(bad, &w[19]);

    retire_send(3);  // three completed
    EXPECT_EQ(ibv_post_send(qp, &w[16], &bad), ENOMEM);
    EXPECT_EQ(bad, &w[19]);
    EXPECT_EQ(sq_producer(), 19u);
    EXPECT_EQ(sent(16).wr_id, 1016u) << "slot 0 again: the ring wrapped";
    EXPECT_EQ(sent(18).wr_id, 1018u);

    retire_send(19);
    w[19].next = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &w[19], &bad), 0);
    EXPECT_EQ(sent(19).wr_id, 1019u);

    // A consumer index that makes no sense (ahead of what we posted) reads as full.
    retire_send(21);
    bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &w[19], &bad), ENOMEM);
    EXPECT_EQ(bad, &w[19]);
    retire_send(20);
}

TEST_F(ShimPost, ReceiveWritesEveryFieldAndRefusesWhatDoesNotFit) {
    std::memset(proto::rq_slots(rec->ring, ring().sq_capacity), 0xee,
                std::size_t{16} * proto::wqe_size);
    ibv_sge s[5] = {sge(0x1000, 10, 1), sge(0x2000, 20, 2), sge(0x3000, 30, 3), sge(0x4000, 40, 4),
                    sge(0x5000, 50, 5)};
    ibv_recv_wr r[3] = {};
    r[0].wr_id = 200;
    r[0].num_sge = 0;
    r[1].wr_id = 201;
    r[1].sg_list = s;
    r[1].num_sge = 1;
    r[2].wr_id = 202;
    r[2].sg_list = s + 1;
    r[2].num_sge = 4;
    r[0].next = &r[1];
    r[1].next = &r[2];
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, r, &bad), 0);
    EXPECT_EQ(rq_producer(), 3u);
    for (uint32_t i = 0; i < 3; ++i) {
        SCOPED_TRACE(i);
        const proto::recv_wqe& q = posted(i);
        EXPECT_EQ(q.wr_id, r[i].wr_id);
        EXPECT_EQ(q.num_sge, uint32_t(r[i].num_sge));
        expect_zero(q.reserved, 5, "reserved");
        for (int j = 0; j < r[i].num_sge; ++j) {
            EXPECT_EQ(q.sg[j].addr, r[i].sg_list[j].addr);
            EXPECT_EQ(q.sg[j].length, r[i].sg_list[j].length);
            EXPECT_EQ(q.sg[j].lkey, r[i].sg_list[j].lkey);
        }
    }

    using change = std::function<void(ibv_recv_wr&)>;
    const std::vector<std::pair<const char*, change>> invalid = {
        {"too many SGEs", [](auto& w) { w.num_sge = 5; }},
        {"negative SGE count", [](auto& w) { w.num_sge = -2; }},
        {"SGEs without a list", [](auto& w) { w.sg_list = nullptr; }},
    };
    for (const auto& [name, make_bad] : invalid) {
        SCOPED_TRACE(name);
        ibv_recv_wr w[2] = {};
        w[0].sg_list = w[1].sg_list = s;
        w[0].num_sge = w[1].num_sge = 1;
        w[0].next = &w[1];
        make_bad(w[1]);
        EXPECT_EQ(ibv_post_recv(qp, w, &bad), EINVAL);
        EXPECT_EQ(bad, &w[1]);
    }
    EXPECT_EQ(rq_producer(), 6u);

    // Ten more fill the 16 slots; the next is ENOMEM until a message lands in one.
    ibv_recv_wr more[11] = {};
    for (int i = 0; i < 11; ++i) {
        more[i].wr_id = 300 + i;
        more[i].next = i + 1 < 11 ? &more[i + 1] : nullptr;
    }
    EXPECT_EQ(ibv_post_recv(qp, more, &bad), ENOMEM);
    EXPECT_EQ(bad, &more[10]);
    EXPECT_EQ(rq_producer(), 16u);
    retire_recv(1);
    EXPECT_EQ(ibv_post_recv(qp, &more[10], &bad), 0);
    EXPECT_EQ(posted(16).wr_id, 310u);
}

TEST_F(ShimPost, AParkedQpRingsItsBitAndWakesOnlyASleepingEngine) {
    ibv_send_wr w{};
    w.opcode = IBV_WR_SEND;
    ibv_recv_wr r{};
    ibv_send_wr* bad = nullptr;
    ibv_recv_wr* bad_r = nullptr;
    proto::doorbell_page& page = *rec->doorbell;
    // The QP's bit, taken as the engine takes it (and cleared): which QPs were rung.
    auto rung_qps = [&] {
        std::vector<uint32_t> slots;
        proto::take_posted(page, proto::doorbell_qp_slots,
                           [&](uint32_t slot) { slots.push_back(slot); });
        return slots;
    };
    const std::vector<uint32_t> this_qp{qp->qp_num >> 8};

    // Queued (the engine looks at the producers anyway): nothing to ring.
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    ASSERT_EQ(ibv_post_recv(qp, &r, &bad_r), 0);
    EXPECT_EQ(doorbell(), 0u);
    EXPECT_TRUE(rung_qps().empty());

    // Parked (in ERR: receives ring too) while the worker is awake: the QP's bit, no system call.
    proto::set_doorbell_wanted(ring(), proto::doorbell_for_every_post);
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    EXPECT_EQ(doorbell(), 0u) << "the worker is awake: no system call";
    EXPECT_EQ(rung_qps(), this_qp);
    EXPECT_TRUE(rung_qps().empty()) << "taken once";

    // And the worker sleeps: the bit and one wake per call.
    proto::set_worker_sleeping(page, true);
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    EXPECT_EQ(doorbell(), 1u);
    ASSERT_EQ(ibv_post_recv(qp, &r, &bad_r), 0);
    EXPECT_EQ(doorbell(), 1u);
    EXPECT_EQ(rung_qps(), this_qp);
    // One write per call, however many requests it posts.
    ibv_send_wr chain[3] = {};
    for (int i = 0; i < 3; ++i) {
        chain[i].opcode = IBV_WR_SEND;
        chain[i].next = i < 2 ? &chain[i + 1] : nullptr;
    }
    ASSERT_EQ(ibv_post_send(qp, chain, &bad), 0);
    EXPECT_EQ(doorbell(), 1u);
    EXPECT_EQ(rung_qps(), this_qp);
    // Nothing posted, nothing rung.
    w.opcode = IBV_WR_ATOMIC_WRITE;
    EXPECT_EQ(ibv_post_send(qp, &w, &bad), EINVAL);
    EXPECT_EQ(doorbell(), 0u);
    EXPECT_TRUE(rung_qps().empty());

    proto::set_worker_sleeping(page, false);
    proto::set_doorbell_wanted(ring(), proto::doorbell_not_wanted);
    w.opcode = IBV_WR_SEND;
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    EXPECT_EQ(doorbell(), 0u);
    EXPECT_TRUE(rung_qps().empty());
}

// A QP that takes receives as messages come (jakirod asks for sends only): ibv_post_recv
// publishes the WQE and rings nothing, neither the QP's bit nor a wake of the sleeping worker;
// ibv_post_send on the same QP still does both.
TEST_F(ShimPost, AReceiveRingsNothingWhenJakirodAsksForSendsOnly) {
    proto::doorbell_page& page = *rec->doorbell;
    auto rung = [&] {
        bool any = false;
        proto::take_posted(page, proto::doorbell_qp_slots, [&](uint32_t) { any = true; });
        return any;
    };
    proto::set_doorbell_wanted(ring(), proto::doorbell_for_sends);
    proto::set_worker_sleeping(page, true);
    ibv_sge s = sge(0x1000, 64, 0x11);
    ibv_recv_wr r[2] = {};
    r[0].wr_id = 41;
    r[0].sg_list = &s;
    r[0].num_sge = 1;
    r[0].next = &r[1];
    r[1].wr_id = 42;
    ibv_recv_wr* bad_r = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, r, &bad_r), 0);
    EXPECT_EQ(rq_producer(), 2u) << "posted all the same";
    EXPECT_EQ(posted(1).wr_id, 42u);
    EXPECT_EQ(doorbell(), 0u) << "no wake-up";
    EXPECT_FALSE(rung()) << "no bit";

    ibv_send_wr w{};
    w.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
    EXPECT_EQ(doorbell(), 1u);
    EXPECT_TRUE(rung());

    // In ERR the receive must reach the engine (its flush): jakirod asks for every post.
    proto::set_doorbell_wanted(ring(), proto::doorbell_for_every_post);
    ASSERT_EQ(ibv_post_recv(qp, &r[1], &bad_r), 0);
    EXPECT_EQ(doorbell(), 1u);
    EXPECT_TRUE(rung());
    proto::set_worker_sleeping(page, false);
}

TEST_F(ShimPost, ConcurrentPostersLoseNothingAndEachKeepsItsOrder) {
    // Two threads post sends (retrying while full), a third plays the engine: it takes each
    // WQE once, in ring order, and retires it.
    constexpr uint32_t per_thread = 10000;
    std::atomic<bool> stop{false};
    std::vector<uint64_t> seen;
    std::thread engine([&] {
        uint32_t taken = 0;
        while (!stop || taken != sq_producer()) {
            const uint32_t produced = sq_producer();
            for (; taken != produced; ++taken) {
                seen.push_back(sent(taken).wr_id);
            }
            retire_send(taken);
        }
    });
    auto poster = [&](uint64_t tag) {
        for (uint32_t i = 0; i < per_thread;) {
            ibv_send_wr w{};
            w.wr_id = (tag << 32) | i;
            w.opcode = IBV_WR_SEND;
            ibv_send_wr* bad = nullptr;
            const int rc = ibv_post_send(qp, &w, &bad);
            if (rc == 0) {
                ++i;
            } else {
                ASSERT_EQ(rc, ENOMEM);
                std::this_thread::yield();
            }
        }
    };
    std::thread a(poster, 1), b(poster, 2);
    a.join();
    b.join();
    stop = true;
    engine.join();
    ASSERT_EQ(seen.size(), 2 * per_thread);
    uint32_t next[3] = {0, 0, 0};
    for (uint64_t id : seen) {
        const auto tag = id >> 32;
        ASSERT_TRUE(tag == 1 || tag == 2);
        ASSERT_EQ(static_cast<uint32_t>(id), next[tag]) << "thread " << tag;
        ++next[tag];
    }
}

}  // namespace
}  // namespace jakiro::verbs_shim::testing
