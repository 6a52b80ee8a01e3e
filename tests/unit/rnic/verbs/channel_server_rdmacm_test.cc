// The channel server's rdma_cm face (verbs_abi/cm_protocol.hh) spoken raw, as a hostile process
// of the tenant would speak it: what one connection can do to the rdma_cm ids of another
// connection of the same vNIC. No EAL; an engine no worker polls gives the vNIC its agent.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "rnic/engine.hh"
#include "rnic/verbs/channel_server.hh"
#include "tests/unit/rnic/verbs/cm_connection.hh"
#include "tests/unit/rnic/verbs/test_endpoints.hh"
#include "verbs_abi/cm_protocol.hh"
#include "verbs_abi/fd_passing.hh"

namespace jakiro::verbs {
namespace {

namespace proto = verbs_proto;
using test::cm_connection;

class ChannelServerRdmaCm : public testing::Test {
  protected:
    void SetUp() override {
        server = std::make_unique<channel_server>(test::test_host({test::own_vnic("t1", 0x01, 0)}));
        server->enable_qps({&engine}, {});
        std::string error;
        ASSERT_TRUE(server->start(error)) << error;
    }

    // A new connection of the vNIC (a socketpair adopted as its client), channel open.
    std::unique_ptr<cm_connection> connect() {
        auto c = std::make_unique<cm_connection>();
        int pair[2];
        EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
        EXPECT_TRUE(server->adopt(pair[1], 0));
        c->fd = pair[0];
        EXPECT_TRUE(c->open());
        return c;
    }

    rnic::engine engine{1, 16};  // no worker: its calls run inline
    std::unique_ptr<channel_server> server;
};

// Linux's MIGRATE_ID takes the source channel from the caller's own descriptor table, so a
// process moves only ids of channels it holds. Here another process of the same tenant (an
// unprivileged one, say) names the channel by every small number and the listener by every
// small id, and with its own channel's socket as the would-be proof: never taken. Control: the
// holder of the channel, showing its socket, moves its listener to a new channel.
TEST_F(ChannelServerRdmaCm, MigrateIdTakesAnIdOnlyFromAChannelTheCallerHolds) {
    auto owner = connect();
    const uint32_t listening = owner->listener(7000);
    ASSERT_NE(listening, 0u);
    auto intruder = connect();
    for (uint32_t channel = 0; channel <= 16; ++channel) {
        for (uint32_t id = 0; id <= listening + 4; ++id) {
            EXPECT_NE(intruder->migrate(id, channel), 0) << "channel " << channel << " id " << id;
        }
    }
    EXPECT_NE(intruder->migrate(listening, 0, intruder->events), 0)
        << "its own channel proves nothing about the owner's";
    EXPECT_EQ(owner->query(listening), 0) << "the listener stayed the owner's";
    EXPECT_NE(intruder->query(listening), 0);

    auto moved_to = connect();
    EXPECT_EQ(moved_to->migrate(listening, 0, owner->events), 0);
    EXPECT_EQ(moved_to->query(listening), 0) << "the id is the new channel's now";
    EXPECT_NE(owner->query(listening), 0);
}

// `apply` changes a vNIC's rdma_cm quota in place (serve() with the same endpoint): lowered,
// the next CREATE_ID is EDQUOT and counted for that vNIC, the ids it holds stay; raised, ids
// come again. Its clients never notice the change otherwise.
TEST_F(ChannelServerRdmaCm, ApplyChangesAVnicsRdmaCmIdsQuotaLive) {
    auto tenant = connect();
    ASSERT_NE(tenant->listener(7001), 0u);
    auto spec = test::own_vnic("t1", 0x01, 0);
    spec.identity.quota.max_cm_ids = 1;
    std::string error;
    ASSERT_TRUE(server->serve(spec, error)) << error;
    rdma_ucm_create_id c{};
    c.ps = RDMA_PS_TCP;
    c.qp_type = IBV_QPT_RC;
    // The endpoint's thread takes the new bound with its next turn: a request is one.
    EXPECT_EQ(tenant->ucma(RDMA_USER_CM_CMD_CREATE_ID, c).status, EDQUOT);
    const auto refused = server->reports().at(0);
    EXPECT_EQ(refused.cm.ids_refused, 1u);
    EXPECT_EQ(refused.cm_ids, 1u) << "the listener it held stays";
    EXPECT_EQ(refused.quota.max_cm_ids, 1u);
    spec.identity.quota.max_cm_ids = 2;
    ASSERT_TRUE(server->serve(spec, error)) << error;
    EXPECT_EQ(tenant->ucma(RDMA_USER_CM_CMD_CREATE_ID, c).status, 0);
}

}  // namespace
}  // namespace jakiro::verbs
