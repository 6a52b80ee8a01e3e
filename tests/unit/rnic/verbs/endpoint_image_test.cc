// A vNIC's RDMA face across a restart (vnic_endpoint.hh freeze/save/hand_over/restore, through
// channel_server): a program that holds a context with every kind of object and rdma_cm ids
// goes on using all of it, with the same handles and mappings and without reconnecting, once
// the face was frozen, saved into a state image, let go by its server and restored by a new
// one with an engine of its own (as a successor process has). A truncated or corrupt image is
// refused and the old face serves again.
//
// This binary links the shim where a program links libibverbs: every ibv_* below is the
// shim's. The engines have no worker; the test runs them (run_engine) over a loopback port.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "handover/image.hh"
#include "rnic/engine.hh"
#include "rnic/packet_port.hh"
#include "rnic/verbs/channel_server.hh"
#include "rnic/wire/icrc.hh"
#include "tests/unit/rnic/verbs/cm_connection.hh"
#include "tests/unit/rnic/verbs/test_endpoints.hh"
#include "verbs_abi/rings.hh"

namespace jakiro::verbs {
namespace {

constexpr uint32_t vnic_ip = 0xC6130101;  // 198.19.1.1, own_vnic("t1", 0x01, 0)
constexpr std::size_t region_bytes = 1 << 16;
constexpr uint16_t cm_port = 7471;

// The fabric of a host with one vNIC: every frame the engine sends comes back to it, and a QP
// talking to its own vNIC's address takes the intra-host shortcut.
class loopback_port final : public rnic::packet_port {
  public:
    uint8_t* begin_frame(uint32_t len) override {
        _building.assign(len, 0);
        return _building.data();
    }
    void end_frame(uint16_t, uint32_t, uint32_t len) override {
        _building.resize(len);
        frames.push_back(std::move(_building));
    }
    uint16_t local_vnic(uint16_t, uint32_t dst_ip_be) const override {
        return dst_ip_be == htonl(vnic_ip) ? 0 : no_local_vnic;
    }
    std::deque<std::vector<uint8_t>> frames;

  private:
    std::vector<uint8_t> _building;
};

class EndpointImage : public testing::Test {
  protected:
    void SetUp() override {
        config = test::test_host({test::own_vnic("t1", 0x01, 0)});
        engine = std::make_unique<rnic::engine>(1, 16);
        server = std::make_unique<channel_server>(config);
        server->enable_qps({engine.get()}, {});
        std::string error;
        ASSERT_TRUE(server->start(error)) << error;
        setenv("JAKIRO_VERBS_SOCKET", server->socket_path(0).c_str(), 1);
    }
    void TearDown() override {
        unsetenv("JAKIRO_VERBS_SOCKET");
        server.reset();
        engine.reset();
    }

    ibv_context* open_first() {
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        EXPECT_EQ(n, 1);
        ibv_context* ctx = n == 1 ? ibv_open_device(list[0]) : nullptr;
        ibv_free_device_list(list);
        return ctx;
    }

    // What a worker does, for a while: the QPs' turns, and every frame they sent delivered.
    void run_engine(int rounds = 64) {
        for (int i = 0; i < rounds; ++i) {
            now_ns += 100'000;
            engine->poll(port, now_ns);
            while (!port.frames.empty()) {
                std::vector<uint8_t> f = std::move(port.frames.front());
                port.frames.pop_front();
                uint8_t* ip = f.data() + 14;
                const auto ip_len = static_cast<uint32_t>(f.size() - 14);
                rnic::store_icrc(ip + ip_len - 4, *rnic::compute_icrc(ip, ip_len - 4));
                engine->receive(0, ip, ip_len, port, now_ns);
            }
        }
    }

    // The old process's side of a take-over: every face frozen and saved. `fds`: the
    // successor's own copies of the image's descriptors (what SCM_RIGHTS gives it).
    std::unique_ptr<handover::image_writer> freeze_and_save() {
        server->freeze();
        auto image = std::make_unique<handover::image_writer>("jakirod test");
        std::string error;
        EXPECT_TRUE(server->save(*image, error)) << error;
        return image;
    }
    static std::vector<int> received_fds(const handover::image_writer& image) {
        std::vector<int> fds;
        for (const int fd : image.fds()) {
            fds.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 0));
        }
        return fds;
    }

    // The successor: a server and an engine of its own, the faces restored from `data`.
    // Null with `error` when it refuses the image.
    std::unique_ptr<channel_server> restore(std::vector<std::byte> data, std::vector<int> fds,
                                            std::unique_ptr<rnic::engine>& its_engine,
                                            std::string& error) {
        its_engine = std::make_unique<rnic::engine>(1, 16);
        auto next = std::make_unique<channel_server>(config);
        next->enable_qps({its_engine.get()}, {});
        handover::image_reader image(std::move(data), std::move(fds));
        if (!image.open()) {
            error = image.error();
            return nullptr;
        }
        if (!next->restore(image, error)) {
            return nullptr;
        }
        if (!next->start(error)) {
            return nullptr;
        }
        return next;
    }

    // The whole take-over, successful. As when the old process has exited before the new one
    // restores: the old server lets go and is gone with its engine, so that only the image
    // (and the descriptors it names, the successor's own copies) carries the faces over.
    void take_over() {
        const auto image = freeze_and_save();
        std::vector<int> fds = received_fds(*image);
        const std::vector<std::byte> data = image->data();
        server->hand_over();
        server.reset();
        engine.reset();
        std::unique_ptr<rnic::engine> next_engine;
        std::string error;
        auto next = restore(data, std::move(fds), next_engine, error);
        ASSERT_NE(next, nullptr) << error;
        engine = std::move(next_engine);
        server = std::move(next);
    }

    // Completions of one CQ, as the program polls them, with the engine running meanwhile.
    std::vector<ibv_wc> poll_until(ibv_cq* cq, std::size_t n) {
        std::vector<ibv_wc> out;
        for (int i = 0; i < 50 && out.size() < n; ++i) {
            run_engine(16);
            ibv_wc wc[8];
            const int got = ibv_poll_cq(cq, 8, wc);
            for (int k = 0; k < got; ++k) {
                out.push_back(wc[k]);
            }
        }
        return out;
    }

    static bool readable(int fd, int timeout_ms = 2000) {
        pollfd p{fd, POLLIN, 0};
        return poll(&p, 1, timeout_ms) == 1;
    }

    channel_config config;
    std::unique_ptr<rnic::engine> engine;
    std::unique_ptr<channel_server> server;
    loopback_port port;
    uint64_t now_ns = 1'000'000'000;
};

// A program's objects: one context with a PD, an MR over its own memory, a send CQ and a
// receive CQ on a completion channel, an SRQ, two RC QPs connected to each other (the
// receiver on the SRQ), a UC and a UD QP, a type-1 memory window and an address handle.
struct program {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    std::byte* region = nullptr;
    ibv_mr* mr = nullptr;
    ibv_comp_channel* channel = nullptr;
    ibv_cq* send_cq = nullptr;
    ibv_cq* recv_cq = nullptr;
    ibv_srq* srq = nullptr;
    ibv_qp* rc_a = nullptr;
    ibv_qp* rc_b = nullptr;
    ibv_qp* uc = nullptr;
    ibv_qp* ud = nullptr;
    ibv_mw* mw = nullptr;
    ibv_ah* ah = nullptr;
    uint64_t next_wr = 1;

    ibv_qp* create(ibv_qp_type type, bool on_srq) {
        ibv_qp_init_attr a{};
        a.send_cq = send_cq;
        a.recv_cq = recv_cq;
        a.srq = on_srq ? srq : nullptr;
        a.qp_type = type;
        a.cap.max_send_wr = a.cap.max_recv_wr = 16;
        a.cap.max_send_sge = a.cap.max_recv_sge = 1;
        return ibv_create_qp(pd, &a);
    }

    static ibv_ah_attr own_address() {
        ibv_ah_attr ah{};
        ah.is_global = 1;
        ah.port_num = 1;
        ah.grh.hop_limit = 64;
        const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 19, 1, 1};
        std::memcpy(ah.grh.dgid.raw, gid, 16);
        return ah;
    }

    // RESET -> RTS towards `peer` (a QP of the same vNIC).
    static int connect(ibv_qp* qp, uint32_t peer, ibv_qp_type type) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        a.qkey = 0x11111111;
        const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                              (type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
        if (const int e = ibv_modify_qp(qp, &a, init_mask)) {
            return e;
        }
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = peer;
        a.rq_psn = 0x100;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 1;
        a.ah_attr = own_address();
        int mask = IBV_QP_STATE;
        if (type != IBV_QPT_UD) {
            mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        }
        if (type == IBV_QPT_RC) {
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
        if (const int e = ibv_modify_qp(qp, &a, mask)) {
            return e;
        }
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = 0x100;
        a.max_rd_atomic = 1;
        mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        if (type == IBV_QPT_RC) {
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        }
        return ibv_modify_qp(qp, &a, mask);
    }

    bool build(ibv_context* c) {
        ctx = c;
        pd = ibv_alloc_pd(ctx);
        void* mem =
            mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        region = static_cast<std::byte*>(mem);
        mr = ibv_reg_mr(pd, region, region_bytes,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_MW_BIND);
        channel = ibv_create_comp_channel(ctx);
        send_cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
        recv_cq = ibv_create_cq(ctx, 64, nullptr, channel, 0);
        ibv_srq_init_attr sa{};
        sa.attr.max_wr = 32;
        sa.attr.max_sge = 1;
        srq = ibv_create_srq(pd, &sa);
        if (!pd || !mr || !channel || !send_cq || !recv_cq || !srq) {
            return false;
        }
        rc_a = create(IBV_QPT_RC, false);
        rc_b = create(IBV_QPT_RC, true);
        uc = create(IBV_QPT_UC, false);
        ud = create(IBV_QPT_UD, false);
        mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
        ibv_ah_attr ah_attr = own_address();
        ah = ibv_create_ah(pd, &ah_attr);
        return rc_a && rc_b && uc && ud && mw && ah &&
               connect(rc_a, rc_b->qp_num, IBV_QPT_RC) == 0 &&
               connect(rc_b, rc_a->qp_num, IBV_QPT_RC) == 0 &&
               connect(uc, uc->qp_num, IBV_QPT_UC) == 0 && connect(ud, 0, IBV_QPT_UD) == 0;
    }

    // Everything gone again, as a program tears down; true when every verb succeeded.
    bool destroy() {
        bool ok = true;
        for (ibv_qp* qp : {rc_a, rc_b, uc, ud}) {
            ok = ibv_destroy_qp(qp) == 0 && ok;
        }
        ok = ibv_destroy_ah(ah) == 0 && ok;
        ok = ibv_dealloc_mw(mw) == 0 && ok;
        ok = ibv_destroy_srq(srq) == 0 && ok;
        ok = ibv_destroy_cq(send_cq) == 0 && ok;
        ok = ibv_destroy_cq(recv_cq) == 0 && ok;
        ok = ibv_destroy_comp_channel(channel) == 0 && ok;
        ok = ibv_dereg_mr(mr) == 0 && ok;
        ok = ibv_dealloc_pd(pd) == 0 && ok;
        munmap(region, region_bytes);
        return ok;
    }

    int post_srq_recv(std::size_t offset, uint32_t length) {
        ibv_sge sge{reinterpret_cast<uint64_t>(region + offset), length, mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = next_wr++;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        return ibv_post_srq_recv(srq, &wr, &bad);
    }
    int post_recv(ibv_qp* qp, std::size_t offset, uint32_t length) {
        ibv_sge sge{reinterpret_cast<uint64_t>(region + offset), length, mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = next_wr++;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        return ibv_post_recv(qp, &wr, &bad);
    }
    // A signaled SEND of `length` bytes at `offset` (UD: to `remote_qpn` through the AH).
    int post_send(ibv_qp* qp, std::size_t offset, uint32_t length, uint32_t remote_qpn = 0) {
        ibv_sge sge{reinterpret_cast<uint64_t>(region + offset), length, mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = next_wr++;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        if (qp->qp_type == IBV_QPT_UD) {
            wr.wr.ud.ah = ah;
            wr.wr.ud.remote_qpn = remote_qpn;
            wr.wr.ud.remote_qkey = 0x11111111;
        }
        ibv_send_wr* bad = nullptr;
        return ibv_post_send(qp, &wr, &bad);
    }
    int bind_window(std::size_t offset, uint64_t length) {
        ibv_mw_bind bind{};
        bind.wr_id = next_wr++;
        bind.send_flags = IBV_SEND_SIGNALED;
        bind.bind_info.mr = mr;
        bind.bind_info.addr = reinterpret_cast<uint64_t>(region + offset);
        bind.bind_info.length = length;
        bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
        return ibv_bind_mw(rc_a, mw, &bind);
    }
};

// rdma_cm_event_type (rdma/rdma_cma.h, which this binary does not link).
constexpr uint32_t cm_event_addr_resolved = 0;
constexpr uint32_t cm_event_route_resolved = 2;
constexpr uint32_t cm_event_connect_request = 4;

// The next event on an rdma_cm channel's socket, as the shim reads it (up to two seconds).
uint32_t read_cm_event(int fd) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, 2000) != 1) {
        return UINT32_MAX;
    }
    std::array<std::byte, sizeof(cm_proto::event_header) + sizeof(rdma_ucm_event_resp)> m{};
    const ssize_t n = recv(fd, m.data(), m.size(), 0);
    rdma_ucm_event_resp e{};
    if (n < static_cast<ssize_t>(sizeof(cm_proto::event_header) +
                                 offsetof(rdma_ucm_event_resp, status))) {
        return UINT32_MAX;
    }
    std::memcpy(&e, m.data() + sizeof(cm_proto::event_header),
                static_cast<std::size_t>(n) - sizeof(cm_proto::event_header));
    return e.event;
}

TEST_F(EndpointImage, EveryObjectAndRdmaCmIdCarriesOverAndTheSameProgramGoesOnUsingIt) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    program p;
    ASSERT_TRUE(p.build(ctx)) << std::strerror(errno);

    // Traffic before: an RC SEND into the SRQ, a UD datagram to itself.
    std::memcpy(p.region, "before", 6);
    ASSERT_EQ(p.post_srq_recv(4096, 64), 0);
    ASSERT_EQ(p.post_send(p.rc_a, 0, 6), 0);
    ASSERT_EQ(poll_until(p.send_cq, 1).size(), 1u);
    ASSERT_EQ(poll_until(p.recv_cq, 1).size(), 1u);
    EXPECT_EQ(std::memcmp(p.region + 4096, "before", 6), 0);

    // rdma_cm: one connection listens, another resolved a route to it.
    test::cm_connection listener_side, dialler_side;
    for (auto* c : {&listener_side, &dialler_side}) {
        int pair[2];
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
        ASSERT_TRUE(server->adopt(pair[1], 0));
        c->fd = pair[0];
        ASSERT_TRUE(c->open());
    }
    const uint32_t listening = listener_side.listener(cm_port);
    ASSERT_NE(listening, 0u);
    rdma_ucm_create_id cid{};
    cid.ps = RDMA_PS_TCP;
    cid.qp_type = IBV_QPT_RC;
    const auto created = dialler_side.ucma(RDMA_USER_CM_CMD_CREATE_ID, cid);
    ASSERT_EQ(created.status, 0);
    rdma_ucm_create_id_resp cr{};
    std::memcpy(&cr, created.response.data(), sizeof cr);
    rdma_ucm_resolve_ip rip{};
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(cm_port);
    dst.sin_addr.s_addr = htonl(vnic_ip);
    std::memcpy(&rip.dst_addr, &dst, sizeof dst);
    rip.id = cr.id;
    rip.timeout_ms = 1000;
    ASSERT_EQ(dialler_side.ucma(RDMA_USER_CM_CMD_RESOLVE_IP, rip).status, 0);
    EXPECT_EQ(read_cm_event(dialler_side.events), cm_event_addr_resolved);
    rdma_ucm_resolve_route rr{cr.id, 1000};
    ASSERT_EQ(dialler_side.ucma(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr).status, 0);
    EXPECT_EQ(read_cm_event(dialler_side.events), cm_event_route_resolved);

    // Armed before the take-over: the next receive completion wakes the channel, and the SRQ
    // tells the program when fewer than 3 receives are left.
    ASSERT_EQ(ibv_req_notify_cq(p.recv_cq, 0), 0);
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(p.post_srq_recv(8192 + 1024 * i, 64), 0);
    }
    ibv_srq_attr limit{};
    limit.srq_limit = 3;
    ASSERT_EQ(ibv_modify_srq(p.srq, &limit, IBV_SRQ_LIMIT), 0);

    const resource_counts objects = server->resources(0).count();
    const channel_stats stats = server->stats();
    const std::size_t clients = server->client_count();
    const uint32_t lkey = p.mr->lkey, rkey = p.mr->rkey, mw_rkey = p.mw->rkey;

    take_over();
    ASSERT_FALSE(HasFatalFailure());

    // The same objects under the same handles, the counters never lower.
    const resource_counts after = server->resources(0).count();
    EXPECT_EQ(after.pds, objects.pds);
    EXPECT_EQ(after.mrs, objects.mrs);
    EXPECT_EQ(after.mws, objects.mws);
    EXPECT_EQ(after.cqs, objects.cqs);
    EXPECT_EQ(after.srqs, objects.srqs);
    EXPECT_EQ(after.qps, objects.qps);
    EXPECT_EQ(after.mr_bytes, objects.mr_bytes);
    EXPECT_EQ(server->client_count(), clients);
    const channel_stats now = server->stats();
    EXPECT_GE(now.faces.accepted, stats.faces.accepted);
    EXPECT_GE(now.faces.requests, stats.faces.requests);
    EXPECT_GE(now.cm_commands, stats.cm_commands);
    EXPECT_EQ(now.faces.disconnected, stats.faces.disconnected) << "nobody was dropped";
    EXPECT_EQ(p.mr->lkey, lkey);
    EXPECT_EQ(p.mr->rkey, rkey);
    EXPECT_EQ(p.mw->rkey, mw_rkey);
    EXPECT_FALSE(readable(ctx->async_fd, 0)) << "no DEVICE_FATAL, no event at all";

    // RC: a SEND lands in the SRQ's next receive, its completion wakes the armed channel and
    // takes the SRQ below its limit.
    std::memcpy(p.region + 100, "after!", 6);
    ASSERT_EQ(p.post_send(p.rc_a, 100, 6), 0);
    EXPECT_EQ(poll_until(p.send_cq, 1).size(), 1u);
    ASSERT_TRUE(readable(p.channel->fd));
    ibv_cq* woken = nullptr;
    void* cq_context = nullptr;
    ASSERT_EQ(ibv_get_cq_event(p.channel, &woken, &cq_context), 0);
    EXPECT_EQ(woken, p.recv_cq);
    ibv_ack_cq_events(p.recv_cq, 1);
    const auto received = poll_until(p.recv_cq, 1);
    ASSERT_EQ(received.size(), 1u);
    EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(received[0].qp_num, p.rc_b->qp_num);
    EXPECT_EQ(std::memcmp(p.region + 8192, "after!", 6), 0);
    ASSERT_TRUE(readable(ctx->async_fd));
    ibv_async_event event{};
    ASSERT_EQ(ibv_get_async_event(ctx, &event), 0);
    EXPECT_EQ(event.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    EXPECT_EQ(event.element.srq, p.srq);
    ibv_ack_async_event(&event);

    // UC to itself, UD to itself through the AH, a window bound on the RC QP.
    ASSERT_EQ(p.post_recv(p.uc, 12288, 64), 0);
    std::memcpy(p.region + 200, "uc", 2);
    ASSERT_EQ(p.post_send(p.uc, 200, 2), 0);
    ASSERT_EQ(p.post_recv(p.ud, 16384, 64 + 40), 0);
    std::memcpy(p.region + 300, "ud", 2);
    ASSERT_EQ(p.post_send(p.ud, 300, 2, p.ud->qp_num), 0);
    ASSERT_EQ(p.bind_window(0, 4096), 0);
    const auto sends = poll_until(p.send_cq, 3);
    ASSERT_EQ(sends.size(), 3u);
    for (const auto& wc : sends) {
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    }
    const auto recvs = poll_until(p.recv_cq, 2);
    ASSERT_EQ(recvs.size(), 2u);
    EXPECT_EQ(std::memcmp(p.region + 12288, "uc", 2), 0);
    EXPECT_EQ(std::memcmp(p.region + 16384 + 40, "ud", 2), 0) << "after the GRH";
    EXPECT_NE(p.mw->rkey, mw_rkey) << "bound: a new rkey";

    // rdma_cm: the dialler connects to the listener, which hears the request on its channel.
    rdma_ucm_connect conn{};
    conn.id = cr.id;
    conn.conn_param.valid = 1;
    conn.conn_param.qp_num = p.rc_a->qp_num;
    conn.conn_param.responder_resources = 1;
    conn.conn_param.initiator_depth = 1;
    conn.conn_param.retry_count = 7;
    conn.conn_param.rnr_retry_count = 7;
    ASSERT_EQ(dialler_side.ucma(RDMA_USER_CM_CMD_CONNECT, conn).status, 0);
    EXPECT_EQ(read_cm_event(listener_side.events), cm_event_connect_request);
    EXPECT_EQ(listener_side.query(listening), 0);

    // New objects too, without a new context.
    ibv_pd* another = ibv_alloc_pd(ctx);
    ASSERT_NE(another, nullptr);
    EXPECT_NE(another->handle, p.pd->handle);
    EXPECT_EQ(ibv_dealloc_pd(another), 0);
    EXPECT_TRUE(p.destroy()) << "every object destroyed as usual";
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

// What a tenant writes into its rings' shared pages is no reason to refuse a take-over (one
// tenant would hold every tenant of the host on the old binary): the successor restores each
// ring from what the image says, never from the ring's own header. Here the program scribbles
// over the identity fields (magic, version, capacities, QP number) of every ring it maps.
TEST_F(EndpointImage, ScribbledRingHeadersDoNotStopTheTakeOver) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    program p;
    ASSERT_TRUE(p.build(ctx)) << std::strerror(errno);
    struct identity {
        const char* memfd;
        std::size_t offset, bytes;
    };
    const identity rings[] = {
        {"/memfd:jakiro-cq", offsetof(verbs_proto::cq_ring_header, magic), 16},
        {"/memfd:jakiro-qp", offsetof(verbs_proto::qp_ring_header, magic), 36},
        {"/memfd:jakiro-srq", offsetof(verbs_proto::srq_ring_header, magic), 20},
    };
    int scribbled = 0;
    FILE* maps = fopen("/proc/self/maps", "re");
    ASSERT_NE(maps, nullptr);
    char line[512];
    while (fgets(line, sizeof line, maps) != nullptr) {
        for (const identity& r : rings) {
            if (std::strstr(line, r.memfd) == nullptr) {
                continue;
            }
            const std::string range(line, std::strchr(line, ' '));
            const int fd = ::open(("/proc/self/map_files/" + range).c_str(), O_RDWR | O_CLOEXEC);
            ASSERT_GE(fd, 0) << range;
            const std::vector<uint8_t> junk(r.bytes, 0xA5);
            ASSERT_EQ(pwrite(fd, junk.data(), junk.size(), static_cast<off_t>(r.offset)),
                      static_cast<ssize_t>(junk.size()));
            close(fd);
            ++scribbled;
        }
    }
    fclose(maps);
    ASSERT_GE(scribbled, 7) << "2 CQs, 4 QPs and an SRQ";

    take_over();
    ASSERT_FALSE(HasFatalFailure());
    std::memcpy(p.region, "scribbled", 9);
    ASSERT_EQ(p.post_srq_recv(4096, 64), 0);
    ASSERT_EQ(p.post_send(p.rc_a, 0, 9), 0);
    EXPECT_EQ(poll_until(p.send_cq, 1).size(), 1u);
    EXPECT_EQ(poll_until(p.recv_cq, 1).size(), 1u);
    EXPECT_EQ(std::memcmp(p.region + 4096, "scribbled", 9), 0);
    EXPECT_TRUE(p.destroy()) << "every object destroyed as usual";
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

// A failed take-over (the successor refused the image) leaves the old face frozen, whole:
// thaw() serves its clients again, and what came in while it was frozen is answered then.
TEST_F(EndpointImage, ThawAfterFreezeServesAgainWithNothingLost) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    const resource_counts objects = server->resources(0).count();

    server->freeze();
    // A new connection while frozen: nobody answers it yet.
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    ASSERT_TRUE(server->adopt(pair[1], 0));
    test::cm_connection late;
    late.fd = pair[0];
    auto hello = verbs_proto::make_message<verbs_proto::hello_request>(
        static_cast<uint16_t>(verbs_proto::opcode::hello), 1);
    ASSERT_EQ(send(late.fd, &hello, sizeof hello, MSG_NOSIGNAL),
              static_cast<ssize_t>(sizeof hello));
    EXPECT_FALSE(readable(late.fd, 300)) << "frozen: not served";
    EXPECT_FALSE(readable(ctx->async_fd, 0)) << "frozen: nobody is told anything";
    EXPECT_EQ(server->resources(0).count().pds, objects.pds);

    std::string error;
    ASSERT_TRUE(server->thaw(error)) << error;
    EXPECT_TRUE(readable(late.fd)) << "the HELLO sent while frozen is answered";
    ibv_pd* second = ibv_alloc_pd(ctx);
    ASSERT_NE(second, nullptr) << "the old context is served";
    EXPECT_EQ(server->resources(0).count().pds, objects.pds + 1);
    EXPECT_FALSE(readable(ctx->async_fd, 0));
    EXPECT_EQ(ibv_dealloc_pd(second), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

// Every cut of the section and a count made huge: the successor refuses the image with a
// message, touches nothing the tenant holds (no ring punched, no socket written), and the old
// face, thawed, goes on serving the same objects.
TEST_F(EndpointImage, ATruncatedOrCorruptSectionIsRefusedAndTheOldFaceServesOn) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    program p;
    ASSERT_TRUE(p.build(ctx)) << std::strerror(errno);
    test::cm_connection cm;
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    ASSERT_TRUE(server->adopt(pair[1], 0));
    cm.fd = pair[0];
    ASSERT_TRUE(cm.open());
    const uint32_t listening = cm.listener(cm_port);
    ASSERT_NE(listening, 0u);

    // Work posted just before the freeze, not yet taken by the engine: it waits in the rings.
    std::memcpy(p.region, "still", 5);
    ASSERT_EQ(p.post_srq_recv(4096, 64), 0);
    ASSERT_EQ(p.post_send(p.rc_a, 0, 5), 0);

    const auto image = freeze_and_save();
    const std::vector<std::byte>& whole = image->data();
    // The image: its header, then the one section (kind u16, version u16, length u64).
    std::size_t section_at = 0;
    for (std::size_t at = 0; at + 12 <= whole.size(); ++at) {
        uint16_t kind = 0;
        uint64_t length = 0;
        std::memcpy(&kind, whole.data() + at, 2);
        std::memcpy(&length, whole.data() + at + 4, 8);
        if (kind == static_cast<uint16_t>(handover::section_kind::rdma_faces) &&
            at + 12 + length == whole.size()) {
            section_at = at;
            break;
        }
    }
    ASSERT_NE(section_at, 0u);
    const std::size_t fields = whole.size() - section_at - 12;

    auto refused = [&](std::vector<std::byte> data, const char* what) {
        std::unique_ptr<rnic::engine> its_engine;
        std::string error;
        auto next = restore(std::move(data), received_fds(*image), its_engine, error);
        EXPECT_EQ(next, nullptr) << what;
        EXPECT_FALSE(error.empty()) << what;
    };
    for (std::size_t cut = 0; cut < fields; cut += 1 + fields / 97) {
        std::vector<std::byte> data(
            whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(section_at + 12 + cut));
        const uint64_t length = cut;
        std::memcpy(data.data() + section_at + 4, &length, 8);
        refused(std::move(data), "truncated");
    }
    {
        // The face count (after the client-id counter), made huge.
        std::vector<std::byte> data = whole;
        const uint32_t huge = 0xFFFFFFF0u;
        std::memcpy(data.data() + section_at + 12 + 8, &huge, 4);
        refused(std::move(data), "a huge count");
    }
    {
        // The section written by a newer binary.
        std::vector<std::byte> data = whole;
        const uint16_t newer = 99;
        std::memcpy(data.data() + section_at + 2, &newer, 2);
        refused(std::move(data), "a newer version");
    }
    EXPECT_FALSE(readable(ctx->async_fd, 0)) << "nobody was told anything";

    std::string error;
    ASSERT_TRUE(server->thaw(error)) << error;
    // The old face: the rings are whole (a refused restore never gives their pages back), so
    // the work posted before the freeze is done now.
    EXPECT_EQ(poll_until(p.send_cq, 1).size(), 1u);
    EXPECT_EQ(poll_until(p.recv_cq, 1).size(), 1u);
    EXPECT_EQ(std::memcmp(p.region + 4096, "still", 5), 0);
    EXPECT_EQ(cm.query(listening), 0) << "the rdma_cm listener is still there";
    EXPECT_FALSE(readable(ctx->async_fd, 0));
    EXPECT_TRUE(p.destroy()) << "every object destroyed as usual";
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

}  // namespace
}  // namespace jakiro::verbs
