// Queue pairs in the shim against a fake jakirod: what create_qp asks and refuses, the ring it
// accepts, modify/query converting every attribute both ways, destroy, and QP async events.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "tests/unit/verbs_shim/qp_fixture.hh"
#include "verbs_abi/qp_attr_wire.hh"
#include "verbs_shim/qp_ex.hh"

namespace jakiro::verbs_shim::testing {
namespace {

using verbs_proto::known_qp_attr_mask;

namespace proto = verbs_proto;
using ShimQp = QpFixture;

// Zeroed room for another library's object (a provider's struct is larger than the public one).
struct foreign_storage {
    alignas(64) unsigned char bytes[1024] = {};
    template <typename T>
    T* as() {
        return reinterpret_cast<T*>(bytes);
    }
};

TEST_F(ShimQp, CreateSendsTheRequestAndWritesBackWhatTheQpReallyHas) {
    ibv_qp_init_attr a = rc_attr(10, 3, 2, 100);
    a.sq_sig_all = 7;
    ibv_qp* qp = create_qp(pd, &a);
    ASSERT_NE(qp, nullptr) << std::strerror(errno);
    const auto& rec = fake->qp(fake->last_qp());
    const auto& r = rec.request;
    EXPECT_EQ(r.pd_handle, pd->handle);
    EXPECT_EQ(r.send_cq, cq->handle);
    EXPECT_EQ(r.recv_cq, cq->handle);
    EXPECT_EQ(r.srq, 0u);
    EXPECT_EQ(r.max_send_wr, 10u);
    EXPECT_EQ(r.max_recv_wr, 3u);
    EXPECT_EQ(r.max_send_sge, 2u);
    EXPECT_EQ(r.max_recv_sge, 2u);
    EXPECT_EQ(r.max_inline_data, 100u);
    EXPECT_EQ(r.qp_type, proto::qpt_rc);
    EXPECT_EQ(r.sq_sig_all, 1u);
    EXPECT_EQ(r.reserved0, 0u);
    EXPECT_EQ(r.flags, 0u);
    EXPECT_EQ(r.reserved1, 0u);
    // The caps the QP really has: the rings' capacities.
    EXPECT_EQ(a.cap.max_send_wr, 16u);
    EXPECT_EQ(a.cap.max_recv_wr, 4u);
    EXPECT_EQ(a.cap.max_send_sge, 2u);
    EXPECT_EQ(a.cap.max_recv_sge, 2u);
    EXPECT_EQ(a.cap.max_inline_data, 100u);
    // What libibverbs fills in for a provider's QP.
    EXPECT_EQ(qp->context, ctx);
    EXPECT_EQ(qp->qp_context, this);
    EXPECT_EQ(qp->pd, pd);
    EXPECT_EQ(qp->send_cq, cq);
    EXPECT_EQ(qp->recv_cq, cq);
    EXPECT_EQ(qp->srq, nullptr);
    EXPECT_EQ(qp->handle, fake->last_qp());
    EXPECT_EQ(qp->qp_num, rec.ring->qp_num);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_EQ(qp->qp_type, IBV_QPT_RC);
    EXPECT_EQ(qp->events_completed, 0u);
    EXPECT_NE(to_qp(qp)->doorbell, nullptr);

    EXPECT_EQ(destroy_qp(qp), 0);
    EXPECT_EQ(fake->count(proto::opcode::destroy_qp), 1u);
    EXPECT_TRUE(fake->qp(fake->last_qp()).destroyed);
}

TEST_F(ShimQp, CreateRefusesOtherTypesAndSrqsWithoutAskingJakirod) {
    for (ibv_qp_type t : {IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV, IBV_QPT_DRIVER}) {
        ibv_qp_init_attr a = rc_attr();
        a.qp_type = t;
        errno = 0;
        EXPECT_EQ(create_qp(pd, &a), nullptr) << t;
        EXPECT_EQ(errno, EOPNOTSUPP) << t;
    }
    ibv_qp_init_attr a = rc_attr();
    a.qp_type = static_cast<ibv_qp_type>(77);
    errno = 0;
    EXPECT_EQ(create_qp(pd, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    // Beyond the enum's range altogether, as an uninitialised field may be: still EINVAL, and
    // read without undefined behaviour (the sanitized build would report it).
    const uint32_t garbage = 0x5a5a5a5a;
    std::memcpy(&a.qp_type, &garbage, sizeof(garbage));
    errno = 0;
    EXPECT_EQ(create_qp(pd, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);

    foreign_storage srq;
    a = rc_attr();
    a.srq = srq.as<ibv_srq>();
    errno = 0;
    EXPECT_EQ(create_qp(pd, &a), nullptr);
    EXPECT_EQ(errno, EINVAL) << "an SRQ that is not the shim's";
    EXPECT_EQ(fake->count(proto::opcode::create_qp), 0u);
}

TEST_F(ShimQp, CreateRefusesCapsBeyondTheDevice) {
    const std::vector<std::function<void(ibv_qp_cap&)>> too_much = {
        [](ibv_qp_cap& c) { c.max_send_wr = 4097; },
        [](ibv_qp_cap& c) { c.max_recv_wr = 4097; },
        [](ibv_qp_cap& c) { c.max_send_sge = 17; },
        [](ibv_qp_cap& c) { c.max_recv_sge = 17; },
        [](ibv_qp_cap& c) { c.max_inline_data = proto::wqe_max_inline + 1; },
    };
    for (std::size_t i = 0; i < too_much.size(); ++i) {
        ibv_qp_init_attr a = rc_attr();
        too_much[i](a.cap);
        errno = 0;
        EXPECT_EQ(create_qp(pd, &a), nullptr) << i;
        EXPECT_EQ(errno, EINVAL) << i;
    }
    EXPECT_EQ(fake->count(proto::opcode::create_qp), 0u);
    // Exactly at the limits is fine.
    ibv_qp* qp = make_qp(4096, 4096, 16, proto::wqe_max_inline);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(to_qp(qp)->sq_capacity, 4096u);
    EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(ShimQp, CreateRefusesObjectsThatAreNotThisContexts) {
    foreign_storage foreign_cq, foreign_pd;
    ibv_qp_init_attr a = rc_attr();
    errno = 0;
    EXPECT_EQ(create_qp(pd, nullptr), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(create_qp(nullptr, &a), nullptr);
    EXPECT_EQ(create_qp(foreign_pd.as<ibv_pd>(), &a), nullptr);
    a.send_cq = nullptr;
    errno = 0;
    EXPECT_EQ(create_qp(pd, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    a = rc_attr();
    a.recv_cq = foreign_cq.as<ibv_cq>();
    errno = 0;
    EXPECT_EQ(create_qp(pd, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);

    // A CQ of another context (another vNIC, even): jakirod would not know its handle.
    fake_jakirod other;
    ibv_context* other_ctx = other.open();
    ASSERT_NE(other_ctx, nullptr);
    ibv_cq* other_cq = create_cq(other_ctx, 8, nullptr, nullptr, 0);
    ASSERT_NE(other_cq, nullptr);
    a = rc_attr();
    a.send_cq = other_cq;
    errno = 0;
    EXPECT_EQ(create_qp(pd, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(fake->count(proto::opcode::create_qp), 0u);
    EXPECT_EQ(destroy_cq(other_cq), 0);
    EXPECT_EQ(close_device(other_ctx), 0);
}

TEST_F(ShimQp, CreateRefusesARingThatIsNotWhatWasPromisedAndAbandonsIt) {
    using tamper = fake_jakirod::qp_tamper;
    const std::vector<std::pair<const char*, tamper>> cases = {
        {"magic", [](auto&, auto& h, auto&) { h.magic = 0; }},
        {"version", [](auto&, auto& h, auto&) { h.version = proto::qp_ring_version + 1; }},
        {"header capacity", [](auto&, auto& h, auto&) { h.sq_capacity = 8; }},
        {"slot size", [](auto&, auto& h, auto&) { h.slot_size = 256; }},
        {"rq offset", [](auto&, auto& h, auto&) { h.rq_offset += 512; }},
        {"qp_num", [](auto&, auto& h, auto&) { h.qp_num ^= 1; }},
        {"ring_bytes", [](auto& r, auto&, auto&) { r.ring_bytes += 4096; }},
        {"capacity below the request",
         [](auto& r, auto& h, auto&) {
             r.sq_capacity = h.sq_capacity = 8;
             r.ring_bytes = proto::qp_ring_bytes(8, r.rq_capacity);
         }},
        {"capacity not a power of two", [](auto& r, auto&, auto&) { r.rq_capacity = 24; }},
        {"fewer SGEs", [](auto& r, auto&, auto&) { r.max_send_sge = 1; }},
        {"more SGEs than a slot", [](auto& r, auto&, auto&) { r.max_recv_sge = 17; }},
        {"inline beyond a slot", [](auto& r, auto&, auto&) { r.max_inline_data = 417; }},
        {"fds swapped", [](auto&, auto&, auto& fds) { std::swap(fds[0], fds[1]); }},
        {"an eventfd for a doorbell",
         [](auto&, auto&, auto& fds) { fds[1] = eventfd(0, EFD_CLOEXEC); }},
        {"a socket for a doorbell",
         [](auto&, auto&, auto& fds) {
             int pair[2];
             socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair);
             close(pair[1]);
             fds[1] = pair[0];
         }},
    };
    for (const auto& [name, t] : cases) {
        const int before = fake->idle_fd_count();
        fake->tamper_next_qp(t);
        ibv_qp_init_attr a = rc_attr();
        errno = 0;
        EXPECT_EQ(create_qp(pd, &a), nullptr) << name;
        EXPECT_EQ(errno, EPROTO) << name;
        EXPECT_TRUE(fake->qp(fake->last_qp()).destroyed) << name << ": not abandoned";
        // The fake keeps its doorbell page; the shim keeps nothing.
        EXPECT_EQ(fake->idle_fd_count(), before + 1) << name << ": a descriptor leaked";
    }
}

TEST_F(ShimQp, CreateWantsBothDescriptorsAndClosesExtraOnes) {
    int before = fake->idle_fd_count();
    fake->tamper_next_qp([](auto&, auto&, auto& fds) { fds.pop_back(); });
    ibv_qp_init_attr a = rc_attr();
    errno = 0;
    EXPECT_EQ(create_qp(pd, &a), nullptr);
    EXPECT_EQ(errno, EPROTO);
    EXPECT_EQ(fake->idle_fd_count(), before + 1) << "the fake's doorbell only";

    before = fake->idle_fd_count();
    fake->tamper_next_qp([](auto&, auto&, auto& fds) { fds.push_back(eventfd(0, 0)); });
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(fake->idle_fd_count(), before + 1)
        << "the fake's doorbell; the shim keeps mappings, not descriptors";
    EXPECT_EQ(destroy_qp(qp), 0);
    EXPECT_EQ(fake->idle_fd_count(), before + 1);
}

TEST_F(ShimQp, CreateFailsWithJakirodsErrno) {
    fake->fail_next(proto::opcode::create_qp, ENOMEM);
    ibv_qp_init_attr a = rc_attr();
    errno = 0;
    EXPECT_EQ(create_qp(pd, &a), nullptr);
    EXPECT_EQ(errno, ENOMEM);
}

TEST_F(ShimQp, CreateQpExTakesThePdOnlyPath) {
    ibv_qp_init_attr_ex ex{};
    ex.send_cq = cq;
    ex.recv_cq = cq;
    ex.qp_type = IBV_QPT_RC;
    ex.cap.max_send_wr = 8;
    ex.cap.max_recv_wr = 8;
    ex.cap.max_send_sge = 1;
    ex.cap.max_recv_sge = 1;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    ibv_qp* qp = create_qp_ex(ctx, &ex);
    ASSERT_NE(qp, nullptr) << std::strerror(errno);
    EXPECT_EQ(ex.cap.max_send_wr, 8u);
    EXPECT_EQ(qp->pd, pd);
    EXPECT_EQ(destroy_qp(qp), 0);

    // XRC, TSO and RSS are not built: refused, as is anything comp_mask does not name yet.
    for (uint32_t mask : {uint32_t{IBV_QP_INIT_ATTR_XRCD},
                          uint32_t{IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER},
                          uint32_t{IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE},
                          uint32_t{IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH},
                          uint32_t{IBV_QP_INIT_ATTR_PD} | uint32_t{1} << 7}) {
        ex.comp_mask = mask;
        errno = 0;
        EXPECT_EQ(verbs_get_ctx(ctx)->create_qp_ex(ctx, &ex), nullptr) << mask;
        EXPECT_EQ(errno, EOPNOTSUPP) << mask;
    }
    // A PD of another context.
    fake_jakirod other;
    ibv_context* other_ctx = other.open();
    ASSERT_NE(other_ctx, nullptr);
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    errno = 0;
    EXPECT_EQ(create_qp_ex(other_ctx, &ex), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(close_device(other_ctx), 0);
    EXPECT_EQ(fake->count(proto::opcode::create_qp), 1u);
}

// rdma-core's own QP tests (and programs written like them) name IBV_QP_INIT_ATTR_CREATE_FLAGS
// with no flag: that is a plain QP. Every flag needs a device capability the vNIC does not
// advertise, so each is refused before jakirod is asked, whatever the QP type.
TEST_F(ShimQp, CreateQpExTakesNoCreationFlagAndRefusesEveryFlag) {
    for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
        SCOPED_TRACE(type);
        ibv_qp_init_attr_ex ex{};
        ex.send_cq = cq;
        ex.recv_cq = cq;
        ex.qp_type = type;
        ex.sq_sig_all = 1;
        ex.cap.max_send_wr = 512;  // max_qp_wr / 8 and max_sge / 2, as rdma-core's tests ask
        ex.cap.max_recv_wr = 512;
        ex.cap.max_send_sge = 8;
        ex.cap.max_recv_sge = 8;
        ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        ex.pd = pd;
        const std::size_t before = fake->count(proto::opcode::create_qp);
        ibv_qp* qp = ibv_create_qp_ex(ctx, &ex);
        ASSERT_NE(qp, nullptr) << std::strerror(errno);
        EXPECT_EQ(fake->count(proto::opcode::create_qp), before + 1);
        EXPECT_EQ(qp->qp_type, type);
        EXPECT_EQ(qp->state, IBV_QPS_RESET);
        EXPECT_GE(ex.cap.max_send_wr, 512u) << "the caps it really has are written back";
        EXPECT_GE(ex.cap.max_send_sge, 8u);
        EXPECT_EQ(qp_to_qp_ex(qp), nullptr) << "no send ops asked, no ibv_qp_ex";
        EXPECT_EQ(destroy_qp(qp), 0);

        for (uint32_t flag :
             {uint32_t{IBV_QP_CREATE_BLOCK_SELF_MCAST_LB}, uint32_t{IBV_QP_CREATE_SCATTER_FCS},
              uint32_t{IBV_QP_CREATE_CVLAN_STRIPPING}, uint32_t{IBV_QP_CREATE_SOURCE_QPN},
              uint32_t{IBV_QP_CREATE_PCI_WRITE_END_PADDING}, uint32_t{1} << 30}) {
            ex.create_flags = flag;
            ex.source_qpn = flag == IBV_QP_CREATE_SOURCE_QPN ? 0x1234 : 0;
            errno = 0;
            EXPECT_EQ(ibv_create_qp_ex(ctx, &ex), nullptr) << flag;
            EXPECT_EQ(errno, EOPNOTSUPP) << flag;
        }
        // Without its comp_mask bit the field means nothing (as in libibverbs).
        ex.create_flags = IBV_QP_CREATE_SOURCE_QPN;
        ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        ex.send_ops_flags = IBV_QP_EX_WITH_SEND;
        qp = ibv_create_qp_ex(ctx, &ex);
        ASSERT_NE(qp, nullptr) << std::strerror(errno);
        EXPECT_EQ(destroy_qp(qp), 0);
        EXPECT_EQ(fake->count(proto::opcode::create_qp), before + 2) << "refusals ask nothing";
    }
}

// An ibv_qp_attr with a distinct value in every field.
ibv_qp_attr distinct_attr() {
    ibv_qp_attr a;
    std::memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.cur_qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.path_mig_state = IBV_MIG_REARM;
    a.qkey = 0x11111111;
    a.rq_psn = 0x222222;
    a.sq_psn = 0x333333;
    a.dest_qp_num = 0x444444;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    a.cap = {5, 6, 7, 8, 9};
    for (int i = 0; i < 16; ++i) {
        a.ah_attr.grh.dgid.raw[i] = static_cast<uint8_t>(i + 1);
        a.alt_ah_attr.grh.dgid.raw[i] = static_cast<uint8_t>(0xf0 - i);
    }
    a.ah_attr.grh.flow_label = 0xabcde;
    a.ah_attr.grh.sgid_index = 3;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = 0x28;
    a.ah_attr.dlid = 0x1234;
    a.ah_attr.sl = 5;
    a.ah_attr.src_path_bits = 2;
    a.ah_attr.static_rate = 7;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.alt_ah_attr.grh.flow_label = 0x54321;
    a.alt_ah_attr.grh.sgid_index = 4;
    a.alt_ah_attr.grh.hop_limit = 65;
    a.alt_ah_attr.grh.traffic_class = 0x29;
    a.alt_ah_attr.dlid = 0x4321;
    a.alt_ah_attr.sl = 6;
    a.alt_ah_attr.src_path_bits = 3;
    a.alt_ah_attr.static_rate = 8;
    a.alt_ah_attr.is_global = 1;
    a.alt_ah_attr.port_num = 2;
    a.pkey_index = 0x0a0b;
    a.alt_pkey_index = 0x0c0d;
    a.en_sqd_async_notify = 1;
    a.sq_draining = 1;
    a.max_rd_atomic = 12;
    a.max_dest_rd_atomic = 13;
    a.min_rnr_timer = 14;
    a.port_num = 1;
    a.timeout = 15;
    a.retry_cnt = 6;
    a.rnr_retry = 7;
    a.alt_port_num = 2;
    a.alt_timeout = 16;
    a.rate_limit = 0x77777;
    return a;
}

void expect_same_ah(const ibv_ah_attr& x, const ibv_ah_attr& y) {
    EXPECT_EQ(std::memcmp(x.grh.dgid.raw, y.grh.dgid.raw, 16), 0);
    EXPECT_EQ(x.grh.flow_label, y.grh.flow_label);
    EXPECT_EQ(x.grh.sgid_index, y.grh.sgid_index);
    EXPECT_EQ(x.grh.hop_limit, y.grh.hop_limit);
    EXPECT_EQ(x.grh.traffic_class, y.grh.traffic_class);
    EXPECT_EQ(x.dlid, y.dlid);
    EXPECT_EQ(x.sl, y.sl);
    EXPECT_EQ(x.src_path_bits, y.src_path_bits);
    EXPECT_EQ(x.static_rate, y.static_rate);
    EXPECT_EQ(x.is_global, y.is_global);
    EXPECT_EQ(x.port_num, y.port_num);
}

void expect_same_ah_wire(const proto::ah_attr_wire& w, const ibv_ah_attr& a) {
    EXPECT_EQ(std::memcmp(w.dgid, a.grh.dgid.raw, 16), 0);
    EXPECT_EQ(w.flow_label, a.grh.flow_label);
    EXPECT_EQ(w.sgid_index, a.grh.sgid_index);
    EXPECT_EQ(w.hop_limit, a.grh.hop_limit);
    EXPECT_EQ(w.traffic_class, a.grh.traffic_class);
    EXPECT_EQ(w.is_global, a.is_global);
    EXPECT_EQ(w.dlid, a.dlid);
    EXPECT_EQ(w.sl, a.sl);
    EXPECT_EQ(w.src_path_bits, a.src_path_bits);
    EXPECT_EQ(w.static_rate, a.static_rate);
    EXPECT_EQ(w.port_num, a.port_num);
    EXPECT_EQ(w.reserved, 0u);
}

TEST_F(ShimQp, ModifyAndQueryCarryEveryAttributeBothWays) {
    ibv_qp_init_attr init = rc_attr(16, 16, 4, 64);
    init.sq_sig_all = 1;
    ibv_qp* qp = create_qp(pd, &init);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr in = distinct_attr();
    ASSERT_EQ(modify_qp(qp, &in, known_qp_attr_mask), 0);
    EXPECT_EQ(qp->state, IBV_QPS_RTS);

    proto::modify_qp_request sent;
    {
        const std::lock_guard lock(fake->mutex());
        sent = fake->last_modify();
    }
    EXPECT_EQ(sent.qp_handle, qp->handle);
    EXPECT_EQ(sent.attr_mask, known_qp_attr_mask);
    const proto::qp_attr_wire& w = sent.attr;
    EXPECT_EQ(w.qp_state, uint32_t{IBV_QPS_RTS});
    EXPECT_EQ(w.cur_qp_state, uint32_t{IBV_QPS_RTR});
    EXPECT_EQ(w.path_mtu, uint32_t{IBV_MTU_1024});
    EXPECT_EQ(w.path_mig_state, uint32_t{IBV_MIG_REARM});
    EXPECT_EQ(w.qkey, in.qkey);
    EXPECT_EQ(w.rq_psn, in.rq_psn);
    EXPECT_EQ(w.sq_psn, in.sq_psn);
    EXPECT_EQ(w.dest_qp_num, in.dest_qp_num);
    EXPECT_EQ(w.qp_access_flags, in.qp_access_flags);
    EXPECT_EQ(w.max_send_wr, 5u);
    EXPECT_EQ(w.max_recv_wr, 6u);
    EXPECT_EQ(w.max_send_sge, 7u);
    EXPECT_EQ(w.max_recv_sge, 8u);
    EXPECT_EQ(w.max_inline_data, 9u);
    expect_same_ah_wire(w.ah_attr, in.ah_attr);
    expect_same_ah_wire(w.alt_ah_attr, in.alt_ah_attr);
    EXPECT_EQ(w.pkey_index, in.pkey_index);
    EXPECT_EQ(w.alt_pkey_index, in.alt_pkey_index);
    EXPECT_EQ(w.en_sqd_async_notify, in.en_sqd_async_notify);
    EXPECT_EQ(w.sq_draining, 0u) << "output only: no mask bit sends it";
    EXPECT_EQ(w.max_rd_atomic, in.max_rd_atomic);
    EXPECT_EQ(w.max_dest_rd_atomic, in.max_dest_rd_atomic);
    EXPECT_EQ(w.min_rnr_timer, in.min_rnr_timer);
    EXPECT_EQ(w.port_num, in.port_num);
    EXPECT_EQ(w.timeout, in.timeout);
    EXPECT_EQ(w.retry_cnt, in.retry_cnt);
    EXPECT_EQ(w.rnr_retry, in.rnr_retry);
    EXPECT_EQ(w.alt_port_num, in.alt_port_num);
    EXPECT_EQ(w.alt_timeout, in.alt_timeout);
    EXPECT_EQ(w.reserved0, 0u);
    EXPECT_EQ(w.rate_limit, in.rate_limit);
    EXPECT_EQ(w.reserved1, 0u);

    // jakirod reports what it stored, with the QP's real caps and a draining SQ.
    {
        const std::lock_guard lock(fake->mutex());
        fake->qps().at(qp->handle).attr.sq_draining = 1;
    }
    ibv_qp_attr out;
    std::memset(&out, 0xa5, sizeof(out));
    ibv_qp_init_attr out_init;
    std::memset(&out_init, 0xa5, sizeof(out_init));
    ASSERT_EQ(query_qp(qp, &out, known_qp_attr_mask, &out_init), 0);
    EXPECT_EQ(out.qp_state, in.qp_state);
    EXPECT_EQ(out.cur_qp_state, in.cur_qp_state);
    EXPECT_EQ(out.path_mtu, in.path_mtu);
    EXPECT_EQ(out.path_mig_state, in.path_mig_state);
    EXPECT_EQ(out.qkey, in.qkey);
    EXPECT_EQ(out.rq_psn, in.rq_psn);
    EXPECT_EQ(out.sq_psn, in.sq_psn);
    EXPECT_EQ(out.dest_qp_num, in.dest_qp_num);
    EXPECT_EQ(out.qp_access_flags, in.qp_access_flags);
    EXPECT_EQ(out.cap.max_send_wr, 16u);
    EXPECT_EQ(out.cap.max_recv_wr, 16u);
    EXPECT_EQ(out.cap.max_send_sge, 4u);
    EXPECT_EQ(out.cap.max_recv_sge, 4u);
    EXPECT_EQ(out.cap.max_inline_data, 64u);
    expect_same_ah(out.ah_attr, in.ah_attr);
    expect_same_ah(out.alt_ah_attr, in.alt_ah_attr);
    EXPECT_EQ(out.pkey_index, in.pkey_index);
    EXPECT_EQ(out.alt_pkey_index, in.alt_pkey_index);
    EXPECT_EQ(out.en_sqd_async_notify, in.en_sqd_async_notify);
    EXPECT_EQ(out.sq_draining, 1u);
    EXPECT_EQ(out.max_rd_atomic, in.max_rd_atomic);
    EXPECT_EQ(out.max_dest_rd_atomic, in.max_dest_rd_atomic);
    EXPECT_EQ(out.min_rnr_timer, in.min_rnr_timer);
    EXPECT_EQ(out.port_num, in.port_num);
    EXPECT_EQ(out.timeout, in.timeout);
    EXPECT_EQ(out.retry_cnt, in.retry_cnt);
    EXPECT_EQ(out.rnr_retry, in.rnr_retry);
    EXPECT_EQ(out.alt_port_num, in.alt_port_num);
    EXPECT_EQ(out.alt_timeout, in.alt_timeout);
    EXPECT_EQ(out.rate_limit, in.rate_limit);

    EXPECT_EQ(out_init.qp_context, this);
    EXPECT_EQ(out_init.send_cq, cq);
    EXPECT_EQ(out_init.recv_cq, cq);
    EXPECT_EQ(out_init.srq, nullptr);
    EXPECT_EQ(out_init.cap.max_send_wr, 16u);
    EXPECT_EQ(out_init.cap.max_recv_wr, 16u);
    EXPECT_EQ(out_init.cap.max_send_sge, 4u);
    EXPECT_EQ(out_init.cap.max_recv_sge, 4u);
    EXPECT_EQ(out_init.cap.max_inline_data, 64u);
    EXPECT_EQ(out_init.qp_type, IBV_QPT_RC);
    EXPECT_EQ(out_init.sq_sig_all, 1);
    EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(ShimQp, ModifySendsExactlyTheFieldsItsMaskNames) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    const ibv_qp_attr in = distinct_attr();
    using set = std::function<void(proto::qp_attr_wire&)>;
    // Independent of the code under test: each bit and the wire fields it must carry.
    const std::vector<std::pair<int, set>> bits = {
        {IBV_QP_STATE, [](auto& w) { w.qp_state = IBV_QPS_RTS; }},
        {IBV_QP_CUR_STATE, [](auto& w) { w.cur_qp_state = IBV_QPS_RTR; }},
        {IBV_QP_EN_SQD_ASYNC_NOTIFY, [](auto& w) { w.en_sqd_async_notify = 1; }},
        {IBV_QP_ACCESS_FLAGS,
         [](auto& w) { w.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ; }},
        {IBV_QP_PKEY_INDEX, [](auto& w) { w.pkey_index = 0x0a0b; }},
        {IBV_QP_PORT, [](auto& w) { w.port_num = 1; }},
        {IBV_QP_QKEY, [](auto& w) { w.qkey = 0x11111111; }},
        {IBV_QP_AV,
         [](auto& w) {
             for (int i = 0; i < 16; ++i) {
                 w.ah_attr.dgid[i] = static_cast<uint8_t>(i + 1);
             }
             w.ah_attr.flow_label = 0xabcde;
             w.ah_attr.sgid_index = 3;
             w.ah_attr.hop_limit = 64;
             w.ah_attr.traffic_class = 0x28;
             w.ah_attr.is_global = 1;
             w.ah_attr.dlid = 0x1234;
             w.ah_attr.sl = 5;
             w.ah_attr.src_path_bits = 2;
             w.ah_attr.static_rate = 7;
             w.ah_attr.port_num = 1;
         }},
        {IBV_QP_PATH_MTU, [](auto& w) { w.path_mtu = IBV_MTU_1024; }},
        {IBV_QP_TIMEOUT, [](auto& w) { w.timeout = 15; }},
        {IBV_QP_RETRY_CNT, [](auto& w) { w.retry_cnt = 6; }},
        {IBV_QP_RNR_RETRY, [](auto& w) { w.rnr_retry = 7; }},
        {IBV_QP_RQ_PSN, [](auto& w) { w.rq_psn = 0x222222; }},
        {IBV_QP_MAX_QP_RD_ATOMIC, [](auto& w) { w.max_rd_atomic = 12; }},
        {IBV_QP_ALT_PATH,
         [](auto& w) {
             for (int i = 0; i < 16; ++i) {
                 w.alt_ah_attr.dgid[i] = static_cast<uint8_t>(0xf0 - i);
             }
             w.alt_ah_attr.flow_label = 0x54321;
             w.alt_ah_attr.sgid_index = 4;
             w.alt_ah_attr.hop_limit = 65;
             w.alt_ah_attr.traffic_class = 0x29;
             w.alt_ah_attr.is_global = 1;
             w.alt_ah_attr.dlid = 0x4321;
             w.alt_ah_attr.sl = 6;
             w.alt_ah_attr.src_path_bits = 3;
             w.alt_ah_attr.static_rate = 8;
             w.alt_ah_attr.port_num = 2;
             w.alt_pkey_index = 0x0c0d;
             w.alt_port_num = 2;
             w.alt_timeout = 16;
         }},
        {IBV_QP_MIN_RNR_TIMER, [](auto& w) { w.min_rnr_timer = 14; }},
        {IBV_QP_SQ_PSN, [](auto& w) { w.sq_psn = 0x333333; }},
        {IBV_QP_MAX_DEST_RD_ATOMIC, [](auto& w) { w.max_dest_rd_atomic = 13; }},
        {IBV_QP_PATH_MIG_STATE, [](auto& w) { w.path_mig_state = IBV_MIG_REARM; }},
        {IBV_QP_CAP,
         [](auto& w) {
             w.max_send_wr = 5;
             w.max_recv_wr = 6;
             w.max_send_sge = 7;
             w.max_recv_sge = 8;
             w.max_inline_data = 9;
         }},
        {IBV_QP_DEST_QPN, [](auto& w) { w.dest_qp_num = 0x444444; }},
        {IBV_QP_RATE_LIMIT, [](auto& w) { w.rate_limit = 0x77777; }},
    };
    int all = 0;
    for (const auto& [bit, fill] : bits) {
        all |= bit;
        ibv_qp_attr a = in;
        ASSERT_EQ(modify_qp(qp, &a, bit), 0) << bit;
        proto::qp_attr_wire expected;
        std::memset(&expected, 0, sizeof(expected));
        fill(expected);
        const std::lock_guard lock(fake->mutex());
        EXPECT_EQ(fake->last_modify().attr_mask, bit);
        EXPECT_EQ(std::memcmp(&fake->last_modify().attr, &expected, sizeof(expected)), 0)
            << "mask bit " << bit;
    }
    EXPECT_EQ(all, known_qp_attr_mask) << "the table covers every bit";

    // Whatever the program left in the other fields (garbage here) stays home.
    ibv_qp_attr garbage;
    std::memset(&garbage, 0x5a, sizeof(garbage));
    garbage.qp_state = IBV_QPS_INIT;
    ASSERT_EQ(modify_qp(qp, &garbage, IBV_QP_STATE), 0);
    proto::qp_attr_wire expected;
    std::memset(&expected, 0, sizeof(expected));
    expected.qp_state = IBV_QPS_INIT;
    {
        const std::lock_guard lock(fake->mutex());
        EXPECT_EQ(std::memcmp(&fake->last_modify().attr, &expected, sizeof(expected)), 0);
    }
    EXPECT_EQ(qp->state, IBV_QPS_INIT);
    EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(ShimQp, ModifyRefusesUnknownMaskBitsAndKeepsTheStateWhenJakirodRefuses) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    const std::size_t sent = fake->count(proto::opcode::modify_qp);
    EXPECT_EQ(modify_qp(qp, &a, IBV_QP_STATE | (1 << 21)), EINVAL);
    EXPECT_EQ(modify_qp(qp, &a, IBV_QP_STATE | (1 << 26)), EINVAL);
    EXPECT_EQ(modify_qp(qp, nullptr, IBV_QP_STATE), EINVAL);
    EXPECT_EQ(fake->count(proto::opcode::modify_qp), sent) << "nothing was sent";

    fake->fail_next(proto::opcode::modify_qp, EINVAL);
    EXPECT_EQ(modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_EQ(modify_qp(qp, &a, IBV_QP_STATE), 0);
    EXPECT_EQ(qp->state, IBV_QPS_INIT);
    // A modify without IBV_QP_STATE leaves the state alone.
    a.qp_state = IBV_QPS_RTS;
    EXPECT_EQ(modify_qp(qp, &a, IBV_QP_PKEY_INDEX), 0);
    EXPECT_EQ(qp->state, IBV_QPS_INIT);
    EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(ShimQp, QueryTakesTheStateJakirodReports) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(move_to(qp, IBV_QPS_INIT), 0);
    {
        const std::lock_guard lock(fake->mutex());
        fake->qps().at(qp->handle).attr.qp_state = IBV_QPS_ERR;  // the engine gave up on it
    }
    ibv_qp_attr out{};
    EXPECT_EQ(query_qp(qp, &out, IBV_QP_CAP, nullptr), 0) << "init_attr may be NULL";
    EXPECT_EQ(qp->state, IBV_QPS_INIT) << "not asked for the state";
    EXPECT_EQ(query_qp(qp, &out, IBV_QP_STATE, nullptr), 0);
    EXPECT_EQ(out.qp_state, IBV_QPS_ERR);
    EXPECT_EQ(qp->state, IBV_QPS_ERR);
    EXPECT_EQ(query_qp(qp, nullptr, IBV_QP_STATE, nullptr), EINVAL);
    fake->fail_next(proto::opcode::query_qp, EIO);
    EXPECT_EQ(query_qp(qp, &out, IBV_QP_STATE, nullptr), EIO);
    EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(ShimQp, DestroyKeepsTheQpWhenJakirodRefuses) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    fake->fail_next(proto::opcode::destroy_qp, EBUSY);
    EXPECT_EQ(destroy_qp(qp), EBUSY);
    ASSERT_NE(to_qp(qp), nullptr) << "still ours, still usable";
    ibv_qp_attr out{};
    EXPECT_EQ(query_qp(qp, &out, IBV_QP_STATE, nullptr), 0);
    EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(ShimQp, DestroySucceedsOnceJakirodIsGone) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    fake->stop();
    EXPECT_EQ(destroy_qp(qp), 0);
    ibv_qp_init_attr init = rc_attr();
    errno = 0;
    EXPECT_EQ(create_qp(pd, &init), nullptr);
    EXPECT_EQ(errno, EIO);
}

TEST_F(ShimQp, AsyncEventsNameTheQp) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    const std::pair<proto::event_type, ibv_event_type> events[] = {
        {proto::event_type::qp_fatal, IBV_EVENT_QP_FATAL},
        {proto::event_type::qp_req_err, IBV_EVENT_QP_REQ_ERR},
        {proto::event_type::qp_access_err, IBV_EVENT_QP_ACCESS_ERR},
        {proto::event_type::comm_est, IBV_EVENT_COMM_EST},
        {proto::event_type::sq_drained, IBV_EVENT_SQ_DRAINED},
    };
    for (const auto& [wire, expected] : events) {
        fake->send_async(wire, qp->handle);
        ibv_async_event e{};
        ASSERT_EQ(get_async_event(ctx, &e), 0);
        EXPECT_EQ(e.event_type, expected);
        EXPECT_EQ(e.element.qp, qp);
        ack_async_event(&e);
    }
    EXPECT_EQ(qp->events_completed, 5u);
    // An event for a QP that is not (or no longer) there is skipped.
    fake->send_async(proto::event_type::qp_fatal, qp->handle ^ 0xff00);
    fake->send_async(proto::event_type::port_active, 0, 1);
    ibv_async_event e{};
    ASSERT_EQ(get_async_event(ctx, &e), 0);
    EXPECT_EQ(e.event_type, IBV_EVENT_PORT_ACTIVE);
    ack_async_event(&e);
    EXPECT_EQ(destroy_qp(qp), 0);
}

TEST_F(ShimQp, DestroyWaitsUntilItsAsyncEventsAreAcknowledged) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    const uint32_t handle = qp->handle;
    fake->send_async(proto::event_type::qp_fatal, handle);
    ibv_async_event e{};
    ASSERT_EQ(get_async_event(ctx, &e), 0);
    ASSERT_EQ(e.element.qp, qp);
    std::atomic<bool> done{false};
    std::thread destroyer([&] {
        EXPECT_EQ(destroy_qp(qp), 0);
        done = true;
    });
    usleep(100'000);
    EXPECT_FALSE(done) << "an unacknowledged event keeps the QP";
    ack_async_event(&e);
    destroyer.join();
    EXPECT_TRUE(done);
    // Its later events are dropped.
    fake->send_async(proto::event_type::qp_fatal, handle);
    fake->send_async(proto::event_type::port_error, 0, 1);
    ASSERT_EQ(get_async_event(ctx, &e), 0);
    EXPECT_EQ(e.event_type, IBV_EVENT_PORT_ERR);
}

}  // namespace
}  // namespace jakiro::verbs_shim::testing
