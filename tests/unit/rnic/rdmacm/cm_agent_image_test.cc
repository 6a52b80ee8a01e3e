// The rdma_cm agent across a restart (cm_agent.hh save/restore): an agent saved into a state
// image and restored into a new one (a successor's) goes on where the old one stood: its
// connections' state machines, comm and transaction IDs and retransmission timers, its listeners,
// the events it still owed a channel, its counters.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "handover/image.hh"
#include "tests/unit/rnic/rdmacm/cm_agents.hh"

namespace {

class CmAgentImage : public CmAgentTest {
  protected:
    // `n`'s agent into an image, and a new agent of the same identity restored from it, its
    // channel on the same event socket: what a successor jakirod does. False if refused.
    bool restart(node& n, uint32_t ip, uint64_t guid) {
        jakiro::handover::image_writer w("jakirod test");
        w.begin(jakiro::handover::section_kind::rdma_faces);
        n.agent->save(w);
        w.end();
        auto next = fresh(ip, guid);
        jakiro::handover::image_reader image(w.data(), {});
        if (!image.open()) {
            return false;
        }
        auto r = image.section(jakiro::handover::section_kind::rdma_faces);
        const int event_fd = n.events[0];
        const uint64_t client = n.client;
        if (!next->restore(r, [&](uint64_t c) { return c == client ? event_fd : -1; })) {
            return false;
        }
        n.agent = std::move(next);
        return r.done();
    }

    std::unique_ptr<cm_agent> fresh(uint32_t ip, uint64_t guid) {
        agent_identity self{0, ip, htobe64(guid), 3};
        self.ip6 = ip6_of(ip);
        return std::make_unique<cm_agent>(
            self,
            [this, ip](const gid& dst, const mad_buffer& m) {
                w.queue.push_back({is_ipv4_gid(dst) ? ipv4_gid(ip) : ip6_of(ip), dst, m});
            },
            [this](const gid& remote) { return remote == ipv4_gid(refused) ? EACCES : 0; });
    }
};

}  // namespace

// The REQ was lost just before the restart: the successor's timer sends it again, under the same
// communication ID, and the connection completes towards the program's same event socket.
TEST_F(CmAgentImage, ARestartedAgentRetransmitsItsLostReqAndCompletesTheConnection) {
    listen_on(b, 7000);
    const uint32_t id = resolved(a, ip_b, 7000);
    w.drop_next = 1;  // the REQ
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    EXPECT_FALSE(next_event(b).has_value());
    const agent_stats before = a.agent->stats();
    const auto deadline = a.agent->next_deadline();
    ASSERT_NE(deadline, cm_agent::clock::time_point::max());

    ASSERT_TRUE(restart(a, ip_a, 0x0211'22ff'fe00'0001ull));
    EXPECT_EQ(a.agent->next_deadline(), deadline) << "the same timer, not a new one";
    EXPECT_EQ(a.agent->id_count(), 1u);
    EXPECT_EQ(a.agent->stats().mads_sent, before.mads_sent);
    EXPECT_EQ(a.agent->stats().commands, before.commands);
    a.agent->run_timers(deadline);
    pump();
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value());
    EXPECT_EQ(req->event, 4u);  // CONNECT_REQUEST
    EXPECT_EQ(a.agent->stats().retransmissions, before.retransmissions + 1);

    rdma_ucm_accept acc{};
    acc.id = req->id;
    acc.conn_param.valid = 1;
    acc.conn_param.qp_num = 0x222;
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_ACCEPT, acc)), 0);
    pump();
    const auto rep = next_event(a);
    ASSERT_TRUE(rep.has_value());
    EXPECT_EQ(rep->event, 5u) << "the restored id takes the REP: same comm ID, same peer";
    EXPECT_EQ(rep->id, id);
    EXPECT_EQ(init_qp_attr(a, id, IBV_QPS_RTR).dest_qp_num, 0x222u);
}

// Both ends restarted while established: a DISCONNECT after it reaches the peer, whose restored
// connection answers it.
TEST_F(CmAgentImage, AnEstablishedConnectionDisconnectsAfterBothEndsRestarted) {
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
    ASSERT_EQ(next_event(b)->event, 9u);  // ESTABLISHED

    ASSERT_TRUE(restart(a, ip_a, 0x0211'22ff'fe00'0001ull));
    ASSERT_TRUE(restart(b, ip_b, 0x0211'22ff'fe00'0002ull));
    rdma_ucm_disconnect dc{id};
    ASSERT_EQ(run(a, command(RDMA_USER_CM_CMD_DISCONNECT, dc)), 0);
    pump();
    EXPECT_EQ(next_event(b)->event, 10u);  // DISCONNECTED at the peer on DREQ
    rdma_ucm_disconnect dc2{req->id};
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_DISCONNECT, dc2)), 0);
    pump();
    EXPECT_EQ(next_event(a)->event, 10u);  // and here on its DREP
}

// Every cut of the agent's fields is refused, with the agent left empty; so is a channel the
// successor has no socket for.
TEST_F(CmAgentImage, ACutImageOrAChannelWithoutASocketIsRefused) {
    listen_on(b, 7000);
    const uint32_t id = resolved(a, ip_b, 7000);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    jakiro::handover::image_writer w("jakirod test");
    w.begin(jakiro::handover::section_kind::rdma_faces);
    a.agent->save(w);
    w.end();
    const std::vector<std::byte> whole = w.data();
    // The section is the last thing in the image: kind u16, version u16, length u64, fields.
    jakiro::handover::image_writer empty("jakirod test");
    const std::size_t section_at = empty.data().size();
    const std::size_t fields = whole.size() - section_at - 12;
    for (std::size_t cut = 0; cut < fields; cut += 1 + fields / 211) {
        std::vector<std::byte> data(
            whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(section_at + 12 + cut));
        const uint64_t length = cut;
        std::memcpy(data.data() + section_at + 4, &length, 8);
        jakiro::handover::image_reader image(std::move(data), {});
        ASSERT_TRUE(image.open());
        auto r = image.section(jakiro::handover::section_kind::rdma_faces);
        auto next = fresh(ip_a, 1);
        EXPECT_FALSE(next->restore(r, [&](uint64_t) { return a.events[0]; })) << cut;
        EXPECT_FALSE(image.error().empty());
        EXPECT_EQ(next->id_count(), 0u);
    }
    jakiro::handover::image_reader image(whole, {});
    ASSERT_TRUE(image.open());
    auto r = image.section(jakiro::handover::section_kind::rdma_faces);
    auto next = fresh(ip_a, 1);
    EXPECT_FALSE(next->restore(r, [](uint64_t) { return -1; }));
    EXPECT_NE(image.error().find("channel"), std::string::npos) << image.error();
    EXPECT_EQ(next->id_count(), 0u);
}
