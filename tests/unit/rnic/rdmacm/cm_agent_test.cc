// Two vNICs' rdma_cm agents back to back over a test wire that can lose MADs, driven with the
// ucma commands librdmacm writes: connect/accept/establish/disconnect, SIDR, REJ for a missing
// listener and for a security-group refusal (counted), retransmission after loss, UNREACHABLE
// after the retries, and hostile commands answered with errnos.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "rnic/rdmacm/cm_agent.hh"
#include "rnic/rdmacm/cma_header.hh"
#include "rnic/rdmacm/path_timing.hh"
#include "verbs_abi/cm_protocol.hh"

#include "tests/unit/rnic/rdmacm/cm_agents.hh"

TEST_F(CmAgentTest, ConnectAcceptEstablishAndDisconnectLikeRdmaCm) {
    const uint32_t listener = listen_on(b, 7000);
    const uint32_t id = resolved(a, ip_b, 7000);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value());
    EXPECT_EQ(req->event, 4u);  // CONNECT_REQUEST, to the listener's uid with a new id
    EXPECT_EQ(req->uid, 0x1000u + b.client);
    EXPECT_NE(req->id, listener);
    EXPECT_EQ(req->param.conn.qp_num, 0x111u);
    EXPECT_EQ(std::memcmp(req->param.conn.private_data, "ping", 4), 0);  // after the IP header
    const uint32_t child = req->id;

    // The passive side readies its QP from the REQ: the peer's QPN and PSN, the GID of its IP.
    const auto rtr = init_qp_attr(b, child, IBV_QPS_RTR);
    EXPECT_EQ(rtr.dest_qp_num, 0x111u);
    EXPECT_EQ(rtr.ah_attr.is_global, 1);
    EXPECT_EQ(std::memcmp(rtr.ah_attr.grh.dgid + 12, &ip_a, 4), 0);
    EXPECT_TRUE(rtr.qp_attr_mask & IBV_QP_DEST_QPN);
    const auto rts_b = init_qp_attr(b, child, IBV_QPS_RTS);

    rdma_ucm_accept acc{};
    acc.id = child;
    acc.uid = 0xC0FFEE;
    acc.conn_param.valid = 1;
    acc.conn_param.qp_num = 0x222;
    acc.conn_param.responder_resources = 4;
    acc.conn_param.initiator_depth = 4;
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_ACCEPT, acc)), 0);
    pump();
    const auto rep = next_event(a);
    ASSERT_TRUE(rep.has_value());
    EXPECT_EQ(rep->event, 5u);  // CONNECT_RESPONSE: librdmacm moves the QP, then ACCEPTs
    EXPECT_EQ(rep->param.conn.qp_num, 0x222u);
    const auto rtr_a = init_qp_attr(a, id, IBV_QPS_RTR);
    EXPECT_EQ(rtr_a.dest_qp_num, 0x222u);
    EXPECT_EQ(rtr_a.rq_psn, rts_b.sq_psn);  // each side receives what the other sends
    EXPECT_EQ(init_qp_attr(a, id, IBV_QPS_RTS).sq_psn, rtr.rq_psn);

    rdma_ucm_accept rtu{};
    rtu.id = id;
    ASSERT_EQ(run(a, command(RDMA_USER_CM_CMD_ACCEPT, rtu)), 0);
    pump();
    const auto est = next_event(b);
    ASSERT_TRUE(est.has_value());
    EXPECT_EQ(est->event, 9u);  // ESTABLISHED, under the uid ACCEPT gave
    EXPECT_EQ(est->uid, 0xC0FFEEu);

    rdma_ucm_disconnect dc{id};
    ASSERT_EQ(run(a, command(RDMA_USER_CM_CMD_DISCONNECT, dc)), 0);
    pump();
    EXPECT_EQ(next_event(b)->event, 10u);  // DISCONNECTED at the peer on DREQ
    rdma_ucm_disconnect dc2{child};
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_DISCONNECT, dc2)), 0);
    pump();
    EXPECT_EQ(next_event(a)->event, 10u);  // and here on its DREP
    const std::vector<cm_attribute> expected = {cm_attribute::req, cm_attribute::rep,
                                                cm_attribute::rtu, cm_attribute::dreq,
                                                cm_attribute::drep};
    EXPECT_EQ(w.seen, expected);
}

// A QP rdma_cm connects retransmits after the ACK timeout the kernel's CM would give it on this
// device (Soft-RoCE's values: 537 ms), on both sides, so that a restart of jakirod is outlasted
// on the first retry; a program that chooses its own timeout gets it on both sides.
TEST_F(CmAgentTest, ConnectedQpsGetTheKernelCmsAckTimeoutOrTheOneTheProgramChose) {
    for (const std::optional<uint8_t> chosen :
         {std::optional<uint8_t>{}, std::optional<uint8_t>{12}}) {
        const uint16_t port = chosen ? 7002 : 7001;
        listen_on(b, port);
        const uint32_t id = resolved(a, ip_b, port);
        if (chosen) {
            rdma_ucm_set_option o{};
            o.id = id;
            o.level = RDMA_OPTION_ID;
            o.optname = RDMA_OPTION_ID_ACK_TIMEOUT;
            o.optlen = 1;
            const uint8_t value = *chosen;
            ASSERT_EQ(run(a, command(RDMA_USER_CM_CMD_SET_OPTION, o), nullptr, {&value, 1}), 0);
        }
        ASSERT_EQ(connect(a, id, 0x111), 0);
        pump();
        const auto req = next_event(b);
        ASSERT_TRUE(req.has_value());
        const uint8_t expected = chosen.value_or(17);
        const auto passive = init_qp_attr(b, req->id, IBV_QPS_RTS);
        EXPECT_TRUE(passive.qp_attr_mask & IBV_QP_TIMEOUT);
        EXPECT_EQ(passive.timeout, expected);
        rdma_ucm_accept acc{};
        acc.id = req->id;
        acc.conn_param.valid = 1;
        acc.conn_param.qp_num = 0x222;
        ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_ACCEPT, acc)), 0);
        pump();
        ASSERT_TRUE(next_event(a).has_value());  // CONNECT_RESPONSE
        EXPECT_EQ(init_qp_attr(a, id, IBV_QPS_RTS).timeout, expected);
    }
}

TEST(LocalAckTimeout, IsTwiceThePacketLifeTimePlusTheAckDelayRoundedUpToAPowerOfTwo) {
    using jakiro::rdmacm::local_ack_timeout;
    EXPECT_EQ(local_ack_timeout(16, 15), 17);  // Soft-RoCE's path and device: 2^17 + 2^15
    EXPECT_EQ(local_ack_timeout(16, 16), 18);  // mlx5's ack delay: 2^17 + 2^16 needs a bit more
    EXPECT_EQ(local_ack_timeout(0, 15), 15);   // the ack delay dominates
    EXPECT_EQ(local_ack_timeout(14, 0), 15);
    EXPECT_EQ(local_ack_timeout(30, 31), 31);  // never past the 5-bit field
}

TEST_F(CmAgentTest, NoListenerIsRejectedWithInvalidServiceId) {
    const uint32_t id = resolved(a, ip_b, 7999);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    EXPECT_FALSE(next_event(a).has_value()) << "held a moment for a listener first";
    EXPECT_LE(b.agent->next_deadline(), cm_agent::clock::now() + std::chrono::milliseconds(100));
    b.agent->run_timers(cm_agent::clock::now() + std::chrono::milliseconds(101));
    pump();
    const auto ev = next_event(a);
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->event, 8u);   // REJECTED
    EXPECT_EQ(ev->status, 8u);  // invalid service ID
    EXPECT_EQ(b.agent->stats().rejected_no_listener, 1u);
}

// perftest -R's server listens again for its data connection right after its control
// connection, and its client dials at once: the REQ may come first.
TEST_F(CmAgentTest, ARequestThatComesJustBeforeItsListenerIsTakenWhenTheListenerComes) {
    const uint32_t id = resolved(a, ip_b, 7001);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    ASSERT_FALSE(next_event(a).has_value());
    // Retransmitted while held (the active side's timer): still one request.
    a.agent->run_timers(cm_agent::clock::now() + std::chrono::seconds(1));
    pump();
    listen_on(b, 7001);
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value());
    EXPECT_EQ(req->event, 4u);  // CONNECT_REQUEST
    EXPECT_EQ(req->param.conn.qp_num, 0x111u);
    EXPECT_FALSE(next_event(b).has_value()) << "one request for one REQ, retransmitted or not";
    pump();
    b.agent->run_timers(cm_agent::clock::now() + std::chrono::milliseconds(101));
    pump();
    EXPECT_FALSE(next_event(a).has_value()) << "no REJ once the listener took it";
    EXPECT_EQ(b.agent->stats().rejected_no_listener, 0u);
}

TEST_F(CmAgentTest, OnlyAFewRequestsWaitForAListenerTheRestAreRejectedAtOnce) {
    for (uint16_t port = 7100; port < 7100 + 17; ++port) {
        ASSERT_EQ(connect(a, resolved(a, ip_b, port), 0x100 + port), 0);
    }
    pump();
    // 16 held, the 17th rejected at once.
    EXPECT_EQ(b.agent->stats().rejected_no_listener, 1u);
    int rejected = 0;
    while (const auto ev = next_event(a)) {
        rejected += ev->event == 8u;
    }
    EXPECT_EQ(rejected, 1);
}

// Any member of the VPC can send REQs for ports nobody listens on (QP1 is not filtered by the
// security groups). One that keeps every wait slot of a vNIC taken gives its oldest up to a
// peer holding fewer, so another peer's REQ still waits and is taken when its listener comes.
TEST_F(CmAgentTest, APeerThatHoldsEveryWaitingSlotGivesOneUpToAnotherPeersRequest) {
    for (uint16_t port = 7100; port < 7100 + 40; ++port) {
        ASSERT_EQ(connect(a, resolved(a, ip_b, port), 0x100 + port), 0);
    }
    pump();
    EXPECT_EQ(b.agent->stats().held_reqs_refused, 40u - 16u) << "a's own beyond 16: at once";
    ASSERT_EQ(connect(c, resolved(c, ip_b, 7300), 0x333), 0);
    pump();
    EXPECT_EQ(b.agent->stats().held_reqs_refused, 40u - 16u + 1u);
    listen_on(b, 7300);
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value()) << "c's REQ waited for its listener";
    EXPECT_EQ(req->event, 4u);  // CONNECT_REQUEST
    EXPECT_EQ(req->param.conn.qp_num, 0x333u);
    int rejected = 0;
    while (const auto ev = next_event(a)) {
        rejected += ev->event == 8u && ev->status == 8u;
    }
    EXPECT_EQ(rejected, 40 - 16 + 1) << "a's extra ones and the one it gave up: invalid service ID";
}

// A peer the security groups refuse takes no waiting slot: its REJ (consumer defined) goes at
// once, and a listener that comes later never hears of it.
TEST_F(CmAgentTest, ARefusedPeersRequestNeverWaitsForAListener) {
    refused = ip_a;
    ASSERT_EQ(connect(a, resolved(a, ip_b, 7400), 0x111), 0);
    pump();
    const auto ev = next_event(a);
    ASSERT_TRUE(ev.has_value()) << "rejected at once";
    EXPECT_EQ(ev->status, 28u);
    listen_on(b, 7400);
    EXPECT_FALSE(next_event(b).has_value());
    EXPECT_EQ(b.agent->next_deadline(), cm_agent::clock::time_point::max()) << "nothing held";
}

// SIDR_REQs that no application answered each hold an id of the vNIC: bounded like REQs, by
// the listener's backlog and by the vNIC's (max_backlog), so a peer's requests never fill the
// vNIC's ids. Beyond the bound they are dropped (the sender retries) and counted; the vNIC's
// own processes still create ids. The control: the first ones are taken as requests.
TEST_F(CmAgentTest, SidrRequestsNobodyAnsweredAreBoundedAndNeverFillTheVnicsIds) {
    agent_limits small;
    small.max_ids = 64;
    small.max_backlog = 16;
    b.agent->set_limits(small);
    const uint32_t listener = create(b, port_space_udp, IBV_QPT_UD);
    rdma_ucm_bind_ip bind{};
    bind.id = listener;
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(7500);
    std::memcpy(&bind.addr, &sin, sizeof(sin));
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_BIND_IP, bind)), 0);
    rdma_ucm_listen l{listener, 1024};  // the application asks for a deep backlog
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_LISTEN, l)), 0);
    for (int i = 0; i < 100; ++i) {
        ASSERT_EQ(connect(a, resolved(a, ip_b, 7500, port_space_udp, IBV_QPT_UD), 0x200 + i), 0);
    }
    pump();
    int requests = 0;
    while (const auto ev = next_event(b)) {
        requests += ev->event == 4u;
    }
    EXPECT_EQ(requests, 16);
    EXPECT_EQ(b.agent->id_count(), 1u + 16u);
    EXPECT_EQ(b.agent->stats().requests_over_backlog, 100u - 16u);
    EXPECT_NE(create(b), 0u) << "the vNIC's own processes still get ids";
    EXPECT_EQ(b.agent->stats().ids_refused, 0u);
}

TEST_F(CmAgentTest, SecurityGroupRefusalIsARejectAndCounted) {
    listen_on(b, 7000);
    refused = ip_a;
    const uint32_t id = resolved(a, ip_b, 7000);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    const auto ev = next_event(a);
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->event, 8u);
    EXPECT_EQ(ev->status, 28u);               // consumer defined
    EXPECT_FALSE(next_event(b).has_value());  // the listener never hears of it
    EXPECT_EQ(b.agent->stats().rejected_by_policy, 1u);
}

TEST_F(CmAgentTest, LostReqIsRetransmittedAndLostRtuRecoveredByRepeatedRep) {
    listen_on(b, 7000);
    const uint32_t id = resolved(a, ip_b, 7000);
    w.drop_next = 1;  // the REQ
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    EXPECT_FALSE(next_event(b).has_value());
    a.agent->run_timers(cm_agent::clock::now() + std::chrono::seconds(1));
    pump();
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value());
    EXPECT_EQ(a.agent->stats().retransmissions, 1u);
    rdma_ucm_accept acc{};
    acc.id = req->id;
    acc.conn_param.valid = 1;
    acc.conn_param.qp_num = 0x222;
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_ACCEPT, acc)), 0);
    pump();
    ASSERT_EQ(next_event(a)->event, 5u);
    rdma_ucm_accept rtu{};
    rtu.id = id;
    w.drop_next = 1;  // the RTU
    ASSERT_EQ(run(a, command(RDMA_USER_CM_CMD_ACCEPT, rtu)), 0);
    pump();
    EXPECT_FALSE(next_event(b).has_value());
    b.agent->run_timers(cm_agent::clock::now() + std::chrono::seconds(1));  // REP again
    pump();                                                                 // → RTU again
    EXPECT_EQ(next_event(b)->event, 9u);
}

TEST_F(CmAgentTest, UnansweredReqEndsUnreachableAfterTheRetries) {
    const uint32_t id = resolved(a, inet_addr("198.19.1.99"), 7000);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    auto t = cm_agent::clock::now();
    for (int i = 0; i < 20; ++i) {
        t += std::chrono::seconds(1);
        a.agent->run_timers(t);
    }
    w.queue.clear();
    const auto ev = next_event(a);
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->event, 7u);  // UNREACHABLE
    EXPECT_EQ(static_cast<int32_t>(ev->status), -ETIMEDOUT);
    EXPECT_EQ(a.agent->next_deadline(), cm_agent::clock::time_point::max());
}

TEST_F(CmAgentTest, SidrResolvesTheListenersQpAndQkey) {
    listen_on(b, 7002, port_space_udp, IBV_QPT_UD);
    const uint32_t id = resolved(a, ip_b, 7002, port_space_udp, IBV_QPT_UD);
    EXPECT_EQ(init_qp_attr(a, id, IBV_QPS_INIT).qkey, 0x01234567u);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value());
    EXPECT_EQ(req->event, 4u);
    EXPECT_EQ(std::memcmp(req->param.ud.ah_attr.grh.dgid + 12, &ip_a, 4), 0);
    rdma_ucm_accept acc{};
    acc.id = req->id;
    acc.conn_param.valid = 1;
    acc.conn_param.qp_num = 0x333;
    acc.conn_param.qkey = 0x01234567;
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_ACCEPT, acc)), 0);
    pump();
    const auto est = next_event(a);
    ASSERT_TRUE(est.has_value());
    EXPECT_EQ(est->event, 9u);
    EXPECT_EQ(est->param.ud.qp_num, 0x333u);
    EXPECT_EQ(est->param.ud.qkey, 0x01234567u);
    EXPECT_EQ(std::memcmp(est->param.ud.ah_attr.grh.dgid + 12, &ip_b, 4), 0);
}

TEST_F(CmAgentTest, HostileCommandsGetErrnosNeverStateChanges) {
    std::vector<uint8_t> out;
    std::vector<uint8_t> tiny = {1, 2, 3};
    EXPECT_EQ(run(a, tiny), EINVAL);
    rdma_ucm_cmd_hdr h{RDMA_USER_CM_CMD_CONNECT, 200, 0};  // `in` beyond the bytes written
    std::vector<uint8_t> lying(sizeof(h));
    std::memcpy(lying.data(), &h, sizeof(h));
    EXPECT_EQ(run(a, lying), EINVAL);
    rdma_ucm_cmd_hdr unknown{999, 0, 0};
    std::vector<uint8_t> u(sizeof(unknown));
    std::memcpy(u.data(), &unknown, sizeof(unknown));
    EXPECT_EQ(run(a, u), EINVAL);
    // Another vNIC's or a never-created id.
    rdma_ucm_listen l{12345, 1};
    EXPECT_EQ(run(a, command(RDMA_USER_CM_CMD_LISTEN, l)), ENOENT);
    // Another client's id on the same vNIC.
    const uint32_t id = create(a);
    std::vector<uint8_t> resp;
    rdma_ucm_destroy_id d{};
    d.id = id;
    EXPECT_EQ(a.agent->command(99, command(RDMA_USER_CM_CMD_DESTROY_ID, d), {}, resp), EINVAL);
    // Connect before a route; a response buffer too small; AF_IB.
    EXPECT_EQ(connect(a, id, 1), EINVAL);
    rdma_ucm_query q{};
    q.id = id;
    EXPECT_EQ(run(a, command(RDMA_USER_CM_CMD_QUERY_ROUTE, q, 8)), ENOSPC);
    rdma_ucm_bind bind{};
    bind.id = id;
    bind.addr.ss_family = AF_IB;
    EXPECT_EQ(run(a, command(RDMA_USER_CM_CMD_BIND, bind)), EAFNOSUPPORT);
    // SET_OPTION whose value is not what it says; multicast refused cleanly.
    rdma_ucm_set_option so{};
    so.id = id;
    so.level = RDMA_OPTION_ID;
    so.optname = RDMA_OPTION_ID_TOS;
    so.optlen = 4;
    const uint8_t one = 1;
    EXPECT_EQ(run(a, command(RDMA_USER_CM_CMD_SET_OPTION, so), nullptr, {&one, 1}), EINVAL);
    rdma_ucm_join_ip_mcast j{};
    j.id = id;
    EXPECT_EQ(run(a, command(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j)), EOPNOTSUPP);
    EXPECT_EQ(a.agent->id_count(), 1u);
}

TEST_F(CmAgentTest, IdsAreBoundedPerVnic) {
    agent_limits lim;
    lim.max_ids = 4;
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds), 0);
    cm_agent small(
        agent_identity{0, ip_a, 1, 3}, [](const gid&, const mad_buffer&) {}, {}, lim);
    ASSERT_TRUE(small.open_channel(7, fds[0]));
    rdma_ucm_create_id c{};
    c.ps = port_space_tcp;
    c.qp_type = IBV_QPT_RC;
    std::vector<uint8_t> out;
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(small.command(7, command(RDMA_USER_CM_CMD_CREATE_ID, c), {}, out), 0);
    }
    EXPECT_EQ(small.command(7, command(RDMA_USER_CM_CMD_CREATE_ID, c), {}, out), EDQUOT);
    small.close_channel(7);
    EXPECT_EQ(small.id_count(), 0u);
    close(fds[0]);
    close(fds[1]);
}

// MIGRATE_ID moves an id from the channel the caller proved it holds (the channel server
// checked the descriptor that came with the command), whatever number the command's `fd` names:
// the kernel takes the source from the caller's descriptor table, not from a guess.
TEST_F(CmAgentTest, MigrateIdTakesTheIdFromTheChannelTheCallerHoldsNeverFromANumber) {
    const uint32_t listener = listen_on(b, 7000);
    int second[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, second), 0);
    const uint64_t other = 2;
    ASSERT_TRUE(b.agent->open_channel(other, second[0]));
    std::vector<uint8_t> out;
    rdma_ucm_migrate_id m{};
    m.id = listener;
    for (m.fd = 0; m.fd < 8; ++m.fd) {
        EXPECT_EQ(b.agent->command(other, command(RDMA_USER_CM_CMD_MIGRATE_ID, m), {}, out), ENOENT)
            << "fd " << m.fd << " proves nothing";
        EXPECT_EQ(b.agent->command(other, command(RDMA_USER_CM_CMD_MIGRATE_ID, m), {}, out, other),
                  ENOENT)
            << "its own channel holds no such id";
    }
    // Control: with the source channel proven, the id moves, and its next connection request
    // is raised on the new channel.
    EXPECT_EQ(b.agent->command(other, command(RDMA_USER_CM_CMD_MIGRATE_ID, m), {}, out, b.client),
              0);
    ASSERT_EQ(connect(a, resolved(a, ip_b, 7000), 0x111), 0);
    pump();
    EXPECT_FALSE(next_event(b).has_value()) << "the old channel hears nothing more of it";
    alignas(8) uint8_t buf[1024];
    EXPECT_EQ(
        recv(second[1], buf, sizeof(buf), MSG_DONTWAIT),
        static_cast<ssize_t>(sizeof(jakiro::cm_proto::event_header) + sizeof(rdma_ucm_event_resp)));
    b.agent->close_channel(other);
    close(second[0]);
    close(second[1]);
}

TEST_F(CmAgentTest, MalformedAndForgedMadsAreDroppedAndCounted) {
    listen_on(b, 7000);
    mad_buffer junk{};
    b.agent->on_mad(ip_a, junk);
    EXPECT_EQ(b.agent->stats().mads_dropped, 1u);
    // A REQ whose IP header names another source than the packet's.
    cm_req r;
    r.local_comm_id = 5;
    r.service_id = service_id(port_space_tcp, 7000);
    r.local_qpn = 9;
    write_cma_header(r.private_data, {1234, inet_addr("10.9.9.9"), ip_b});
    b.agent->on_mad(ip_a, encode(cm_message{1, r}));
    EXPECT_FALSE(next_event(b).has_value());
    EXPECT_EQ(b.agent->stats().mads_dropped, 2u);
    EXPECT_EQ(b.agent->stats().mads_forged, 1u);
    // A DREQ for a connection that does not exist only gets a DREP.
    b.agent->on_mad(ip_a, encode(cm_message{1, cm_dreq{77, 88, 9}}));
    EXPECT_FALSE(next_event(b).has_value());
}

// A peer (its own QP1 is out of reach, so only an agent could) naming a third address as the
// source of its REQ or SIDR_REQ: the listener never hears of it; the same message naming the
// packet's real source is the control and reaches it.
TEST_F(CmAgentTest, RequestsWhoseIpHeaderNamesAnotherSourceAreForgeriesTheListenerNeverSees) {
    listen_on(b, 7000);
    listen_on(b, 7002, port_space_udp, IBV_QPT_UD);
    const uint32_t third = inet_addr("198.19.1.3");  // another vNIC of the VPC
    cm_req r;
    r.local_comm_id = 5;
    r.service_id = service_id(port_space_tcp, 7000);
    r.local_qpn = 9;
    cm_sidr_req s;
    s.request_id = 6;
    s.service_id = service_id(port_space_udp, 7002);
    write_cma_header(r.private_data, {1234, third, ip_b});
    write_cma_header(s.private_data, {1234, third, ip_b});
    b.agent->on_mad(ip_a, encode(cm_message{1, r}));
    b.agent->on_mad(ip_a, encode(cm_message{2, s}));
    EXPECT_FALSE(next_event(b).has_value());
    EXPECT_TRUE(w.queue.empty()) << "a forgery gets no answer either";
    EXPECT_EQ(b.agent->stats().mads_forged, 2u);
    EXPECT_EQ(b.agent->stats().mads_dropped, 2u);

    write_cma_header(r.private_data, {1234, ip_a, ip_b});
    write_cma_header(s.private_data, {1234, ip_a, ip_b});
    b.agent->on_mad(ip_a, encode(cm_message{3, r}));
    b.agent->on_mad(ip_a, encode(cm_message{4, s}));
    for (int i = 0; i < 2; ++i) {
        const auto ev = next_event(b);
        ASSERT_TRUE(ev.has_value());
        EXPECT_EQ(ev->event, 4u);  // CONNECT_REQUEST
    }
    EXPECT_EQ(b.agent->stats().mads_forged, 2u);
}

// SIDR has no acknowledgement: a lost SIDR_REP shows as the requester's retransmitted SIDR_REQ,
// which must get the same answer again (not silence until the requester gives up).
TEST_F(CmAgentTest, LostSidrRepIsSentAgainWhenTheSidrReqIsRetransmitted) {
    listen_on(b, 7002, port_space_udp, IBV_QPT_UD);
    const uint32_t id = resolved(a, ip_b, 7002, port_space_udp, IBV_QPT_UD);
    w.drop_next = 1;  // the first SIDR_REQ
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    EXPECT_FALSE(next_event(b).has_value());
    auto t = cm_agent::clock::now();
    a.agent->run_timers(t += std::chrono::seconds(1));
    pump();
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value());
    EXPECT_EQ(req->event, 4u);
    rdma_ucm_accept acc{};
    acc.id = req->id;
    acc.conn_param.valid = 1;
    acc.conn_param.qp_num = 0x333;
    acc.conn_param.qkey = 0x01234567;
    w.drop_next = 1;  // the SIDR_REP
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_ACCEPT, acc)), 0);
    pump();
    EXPECT_FALSE(next_event(a).has_value());
    a.agent->run_timers(t += std::chrono::seconds(1));  // SIDR_REQ again → SIDR_REP again
    pump();
    const auto est = next_event(a);
    ASSERT_TRUE(est.has_value());
    EXPECT_EQ(est->event, 9u);  // ESTABLISHED
    EXPECT_EQ(est->param.ud.qp_num, 0x333u);
    EXPECT_FALSE(next_event(b).has_value()) << "the listener hears of the request once";
    EXPECT_EQ(b.agent->stats().retransmissions, 1u);
}

TEST_F(CmAgentTest, DestroyingAConnectedIdKeepsResendingItsDreqUntilTheDrep) {
    listen_on(b, 7000);
    const uint32_t id = resolved(a, ip_b, 7000);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value());
    rdma_ucm_accept acc{};
    acc.id = req->id;
    acc.conn_param.valid = 1;
    acc.conn_param.qp_num = 0x222;
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_ACCEPT, acc)), 0);
    pump();
    ASSERT_EQ(next_event(a)->event, 5u);
    rdma_ucm_accept rtu{};
    rtu.id = id;
    ASSERT_EQ(run(a, command(RDMA_USER_CM_CMD_ACCEPT, rtu)), 0);
    pump();
    ASSERT_EQ(next_event(b)->event, 9u);
    // The program exits without rdma_disconnect, and its first DREQ is lost.
    w.drop_next = 1;
    rdma_ucm_destroy_id d{};
    d.id = id;
    ASSERT_EQ(run(a, command(RDMA_USER_CM_CMD_DESTROY_ID, d)), 0);
    pump();
    EXPECT_FALSE(next_event(b).has_value());
    a.agent->run_timers(cm_agent::clock::now() + std::chrono::seconds(1));
    pump();
    EXPECT_EQ(next_event(b)->event, 10u);  // DISCONNECTED at the peer all the same
    rdma_ucm_disconnect dc{req->id};
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_DISCONNECT, dc)), 0);
    pump();
    EXPECT_EQ(a.agent->id_count(), 0u);  // the orphan went with the DREP
    EXPECT_FALSE(next_event(a).has_value());
}

TEST_F(CmAgentTest, ConnectingToAPeerTheOwnSecurityGroupsRefuseIsRejectedWithoutAMad) {
    listen_on(b, 7000);
    refused = ip_b;  // a's own rules refuse b
    const uint32_t id = resolved(a, ip_b, 7000);
    EXPECT_EQ(connect(a, id, 0x111), 0);
    EXPECT_TRUE(w.queue.empty());
    const auto ev = next_event(a);
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->event, 8u);
    EXPECT_EQ(ev->status, 28u);
    EXPECT_EQ(a.agent->stats().rejected_by_policy, 1u);
}
