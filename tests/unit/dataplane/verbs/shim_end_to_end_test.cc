// libjakiro_verbs.so against a real channel server, called the way a program calls it: this
// binary links the shim where a program links libibverbs (and not libibverbs at all), so
// every ibv_* below, and every inline verb of verbs.h, must land in shim code.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "verbs/channel_server.hh"

namespace jakiro {
namespace {

class ShimEndToEnd : public testing::Test {
  protected:
    void SetUp() override {
        char dir[] = "/tmp/jakiro-verbs-e2e-XXXXXX";
        ASSERT_NE(mkdtemp(dir), nullptr);
        config.socket_dir = dir;
        config.host_name = "h1";
        config.tenant_mtu = 1450;
        config.vnics = {{"t1", {0x02, 0x00, 0xc6, 0x13, 0x01, 0x01}, 0xc6130101}};
        server = std::make_unique<verbs::channel_server>(config);
        std::string error;
        ASSERT_TRUE(server->start(error)) << error;
        setenv("JAKIRO_VERBS_SOCKET", server->socket_path(0).c_str(), 1);
    }
    void TearDown() override {
        unsetenv("JAKIRO_VERBS_SOCKET");
        server.reset();
        std::filesystem::remove_all(config.socket_dir);
    }

    // The server thread notices closed connections asynchronously.
    bool clients_become(std::size_t n) {
        for (int i = 0; i < 200 && server->client_count() != n; ++i) {
            usleep(10000);
        }
        return server->client_count() == n;
    }

    ibv_context* open_first() {
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        EXPECT_EQ(n, 1);
        ibv_context* ctx = n == 1 ? ibv_open_device(list[0]) : nullptr;
        ibv_free_device_list(list);
        return ctx;
    }

    verbs::channel_config config;
    std::unique_ptr<verbs::channel_server> server;
};

TEST_F(ShimEndToEnd, ListsOneDeviceNamedAfterTheVnic) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_EQ(n, 1);
    EXPECT_STREQ(ibv_get_device_name(list[0]), "jakiro_t1");
    EXPECT_EQ(list[0]->node_type, IBV_NODE_CA);
    EXPECT_EQ(list[0]->transport_type, IBV_TRANSPORT_IB);
    EXPECT_EQ(be64toh(ibv_get_device_guid(list[0])), 0x0000c6fffe130101ull);
    EXPECT_EQ(list[1], nullptr);
    ibv_free_device_list(list);
    EXPECT_TRUE(clients_become(0)) << "a scan leaves no client behind in jakirod";
}

TEST_F(ShimEndToEnd, OpenDeviceBuildsAnExtendedVerbsContext) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    EXPECT_EQ(ctx->abi_compat, __VERBS_ABI_IS_EXTENDED);
    verbs_context* v = verbs_get_ctx(ctx);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->sz, sizeof(verbs_context));
    EXPECT_GE(ctx->async_fd, 0);
    EXPECT_EQ(ctx->num_comp_vectors, 1);
    EXPECT_TRUE(clients_become(1));
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, InlineQueryVerbsLandInTheShim) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);

    ibv_port_attr port;
    ASSERT_EQ(ibv_query_port(ctx, 1, &port), 0);  // verbs.h inline -> vctx->query_port
    EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(port.active_mtu, IBV_MTU_1024);
    EXPECT_EQ(port.max_mtu, IBV_MTU_4096);
    EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(port.gid_tbl_len, 1);
    EXPECT_EQ(ibv_query_port(ctx, 2, &port), EINVAL);
    // The exported symbol (what binaries built against old headers call) fills only the
    // pre-extension struct: port_cap_flags2 is past its end.
    ibv_port_attr old{};
    old.port_cap_flags2 = 0xabcd;
    ASSERT_EQ((ibv_query_port)(ctx, 1, reinterpret_cast<_compat_ibv_port_attr*>(&old)), 0);
    EXPECT_EQ(old.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(old.link_layer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(old.port_cap_flags2, 0xabcd);

    ibv_device_attr_ex ex;
    ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &ex), 0);  // inline -> vctx->query_device_ex
    EXPECT_EQ(ex.orig_attr.phys_port_cnt, 1);
    EXPECT_EQ(ex.orig_attr.max_qp, 1024);
    EXPECT_EQ(ex.orig_attr.max_qp_wr, 4096);
    EXPECT_EQ(ex.orig_attr.max_sge, 16);
    EXPECT_EQ(ex.orig_attr.max_cqe, 65536);
    EXPECT_EQ(ex.orig_attr.max_mr_size, uint64_t{1} << 30);
    EXPECT_EQ(ex.orig_attr.atomic_cap, IBV_ATOMIC_NONE);
    EXPECT_NE(ex.orig_attr.vendor_id, 0x02c9u);

    ibv_device_attr attr;
    ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
    EXPECT_EQ(attr.max_qp_rd_atom, 16);

    ibv_gid_entry gid;
    ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &gid, 0), 0);  // inline -> _ibv_query_gid_ex
    union ibv_gid plain;
    ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &plain), 0);
    EXPECT_EQ(std::memcmp(plain.raw, gid.gid.raw, 16), 0);
    EXPECT_EQ(gid.gid_type, IBV_GID_TYPE_ROCE_V2);
    const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 19, 1, 1};
    EXPECT_EQ(std::memcmp(gid.gid.raw, want, 16), 0);
    EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 1, &gid, 0), EINVAL) << "one GID only";
    EXPECT_EQ(ibv_query_gid(ctx, 1, 1, &plain), -1);
    ibv_gid_entry table[4];
    EXPECT_EQ(ibv_query_gid_table(ctx, table, 4, 0), 1);

    __be16 pkey = 0;
    EXPECT_EQ(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
    EXPECT_EQ(be16toh(pkey), 0xffff);
    EXPECT_EQ(ibv_query_pkey(ctx, 1, 1, &pkey), -1);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, InlineDataPathVerbsFailCleanly) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    // No QP or CQ can exist yet; objects that point at the context stand in for them, as the
    // inline verbs only follow qp->context / cq->context to the ops.
    ibv_qp qp{};
    qp.context = ctx;
    ibv_send_wr swr{};
    ibv_send_wr* bad_send = nullptr;
    EXPECT_EQ(ibv_post_send(&qp, &swr, &bad_send), EOPNOTSUPP);
    EXPECT_EQ(bad_send, &swr);
    ibv_recv_wr rwr{};
    ibv_recv_wr* bad_recv = nullptr;
    EXPECT_EQ(ibv_post_recv(&qp, &rwr, &bad_recv), EOPNOTSUPP);
    ibv_cq cq{};
    cq.context = ctx;
    ibv_wc wc;
    EXPECT_LT(ibv_poll_cq(&cq, 1, &wc), 0);
    EXPECT_EQ(ibv_req_notify_cq(&cq, 0), EOPNOTSUPP);
    errno = 0;
    ibv_cq_init_attr_ex cq_attr{};
    cq_attr.cqe = 16;
    EXPECT_EQ(ibv_create_cq_ex(ctx, &cq_attr), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    ibv_qp_init_attr_ex qp_attr{};
    // PD alone would take the legacy ibv_create_qp path; ask for an extended QP.
    qp_attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    EXPECT_EQ(ibv_create_qp_ex(ctx, &qp_attr), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_values_ex values{};
    EXPECT_EQ(ibv_query_rt_values_ex(ctx, &values), EOPNOTSUPP);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, AsyncEventsReportTheDeviceGoneWhenJakirodStops) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    server->stop();
    ibv_async_event event;
    ASSERT_EQ(ibv_get_async_event(ctx, &event), 0);
    EXPECT_EQ(event.event_type, IBV_EVENT_DEVICE_FATAL);
    ibv_ack_async_event(&event);
    errno = 0;
    EXPECT_EQ(ibv_get_async_event(ctx, &event), -1);
    EXPECT_EQ(errno, EIO);
    // Control verbs fail with an error too, rather than hang or crash.
    ibv_port_attr port;
    EXPECT_EQ(ibv_query_port(ctx, 1, &port), EIO);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, ClosingAContextReleasesItInJakirod) {
    ibv_context* a = open_first();
    ibv_context* b = open_first();
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(clients_become(2));
    EXPECT_EQ(ibv_close_device(a), 0);
    EXPECT_TRUE(clients_become(1));
    EXPECT_EQ(ibv_close_device(b), 0);
}

}  // namespace
}  // namespace jakiro
