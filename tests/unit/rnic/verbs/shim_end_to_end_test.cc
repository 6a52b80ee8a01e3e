// libjakiro_verbs.so against a real channel server, called the way a program calls it: this
// binary links the shim where a program links libibverbs (and not libibverbs at all), so
// every ibv_* below, and every inline verb of verbs.h, must land in shim code.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include "rnic/engine.hh"
#include "rnic/verbs/channel_server.hh"
#include "tests/unit/rnic/verbs/maps_helper.hh"
#include "tests/unit/rnic/verbs/test_endpoints.hh"

namespace jakiro {
namespace {

class ShimEndToEnd : public testing::Test {
  protected:
    void SetUp() override {
        config = verbs::test::test_host({verbs::test::own_vnic("t1", 0x01, 0)});
        server = std::make_unique<verbs::channel_server>(config);
        if (with_qps) {
            // No worker attached: the engine runs control calls inline, nobody sends packets.
            engine = std::make_unique<rnic::engine>(1, 16);
            server->enable_qps({engine.get()}, {});
        }
        std::string error;
        ASSERT_TRUE(server->start(error)) << error;
        setenv("JAKIRO_VERBS_SOCKET", server->socket_path(0).c_str(), 1);
    }
    void TearDown() override {
        unsetenv("JAKIRO_VERBS_SOCKET");
        server.reset();
        engine.reset();
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

    // What the engine would do: a completion into the CQ jakirod knows by this handle.
    bool complete(ibv_cq* cq, uint64_t wr_id, bool solicited = false) {
        auto queue = server->resources(0).find_cq(cq->handle);
        EXPECT_NE(queue, nullptr);
        verbs_proto::cqe e{};
        e.wr_id = wr_id;
        e.status = IBV_WC_SUCCESS;
        e.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
        e.byte_len = 4096;
        e.imm_data = htobe32(0xfeedbeef);
        e.qp_num = 0x123;
        e.src_qp = 0x456;
        e.wc_flags = IBV_WC_WITH_IMM;
        e.solicited = solicited ? 1 : 0;
        return queue != nullptr && queue->complete(e);
    }

    bool readable(int fd, int timeout_ms = 2000) {
        pollfd p{fd, POLLIN, 0};
        return poll(&p, 1, timeout_ms) == 1;
    }

    bool with_qps = false;  // set by fixtures that need QPs, before SetUp
    verbs::channel_config config;
    std::unique_ptr<rnic::engine> engine;
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
    EXPECT_EQ(ex.orig_attr.atomic_cap, IBV_ATOMIC_HCA);
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
    // A QP and a CQ that are not the shim's (zeroed room as large as a provider's object);
    // the inline verbs only follow qp->context / cq->context to the ops, which refuse them.
    struct {
        alignas(64) unsigned char bytes[1024] = {};
    } foreign_qp;
    auto& qp = *reinterpret_cast<ibv_qp*>(foreign_qp.bytes);
    qp.context = ctx;
    ibv_send_wr swr{};
    ibv_send_wr* bad_send = nullptr;
    EXPECT_EQ(ibv_post_send(&qp, &swr, &bad_send), EINVAL);
    EXPECT_EQ(bad_send, &swr);
    ibv_recv_wr rwr{};
    ibv_recv_wr* bad_recv = nullptr;
    EXPECT_EQ(ibv_post_recv(&qp, &rwr, &bad_recv), EINVAL);
    EXPECT_EQ(bad_recv, &rwr);
    ibv_cq cq{};
    cq.context = ctx;
    ibv_wc wc;
    EXPECT_LT(ibv_poll_cq(&cq, 1, &wc), 0) << "a CQ that is not ours: an error, no completions";
    EXPECT_EQ(ibv_req_notify_cq(&cq, 0), EINVAL);
    errno = 0;
    ibv_qp_init_attr_ex qp_attr{};
    // PD alone would take the legacy ibv_create_qp path; ask for an extended QP, without a PD.
    qp_attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    EXPECT_EQ(ibv_create_qp_ex(ctx, &qp_attr), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, MemoryRegionsAreTheApplicationsOwnPagesInJakirod) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    EXPECT_EQ(pd->context, ctx);
    constexpr std::size_t size = 3 * 4096 + 100;
    auto* buffer = static_cast<char*>(std::aligned_alloc(4096, 4 * 4096));
    ASSERT_NE(buffer, nullptr);
    std::memset(buffer, 'a', size);
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    ibv_mr* mr = ibv_reg_mr(pd, buffer + 50, size - 50, access);  // verbs.h inline -> iova2
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    EXPECT_EQ(mr->addr, buffer + 50);
    EXPECT_EQ(mr->length, size - 50);
    EXPECT_EQ(mr->pd, pd);
    EXPECT_EQ(mr->lkey, mr->rkey);
    EXPECT_NE(mr->lkey, 0u);
    EXPECT_EQ(buffer[0], 'a') << "contents survive registration";

    // What the engine gets for an RDMA WRITE with this rkey: the program's own bytes.
    const auto iova = reinterpret_cast<uintptr_t>(buffer + 50);
    auto r = server->resources(0).mrs().find(pd->handle, mr->rkey, iova + 10, 5,
                                             verbs_proto::access_remote_write);
    ASSERT_TRUE(r);
    std::memcpy(r.bytes.data(), "HELLO", 5);
    EXPECT_EQ(std::memcmp(buffer + 60, "HELLO", 5), 0) << "no copy between jakirod and us";
    buffer[70] = '!';
    EXPECT_EQ(r.bytes[10], std::byte{'!'}) << "and the other way round";
    EXPECT_EQ(server->resources(0).mrs().find(pd->handle, mr->rkey, iova, size - 49, 0).status,
              verbs::mr_status::out_of_bounds);
    r = {};

    // A second MR over part of the same pages shares them.
    ibv_mr* mr2 = ibv_reg_mr_iova(pd, buffer + 4096, 100, 0, IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr2, nullptr);
    EXPECT_NE(mr2->lkey, mr->lkey);
    const auto r2 = server->resources(0).mrs().find(pd->handle, mr2->rkey, 0, 100,
                                                    verbs_proto::access_remote_read);
    ASSERT_TRUE(r2) << "iova 0: ibv_reg_mr_iova names the first byte 0";
    buffer[4096] = 'Z';
    EXPECT_EQ(r2.bytes[0], std::byte{'Z'});
    EXPECT_EQ(server->resources(0)
                  .mrs()
                  .find(pd->handle, mr2->rkey, 0, 1, verbs_proto::access_remote_write)
                  .status,
              verbs::mr_status::no_access);

    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "MRs still use it";
    EXPECT_EQ(ibv_dereg_mr(mr2), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(server->resources(0).count().mrs, 0u);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(std::memcmp(buffer + 60, "HELLO", 5), 0) << "the memory stays the program's";
    std::free(buffer);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, RegistrationRefusesWhatItCannotShareAndSaysWhy) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    char on_stack[128];
    setenv("JAKIRO_VERBS_DEBUG", "1", 1);
    testing::internal::CaptureStderr();
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(pd, on_stack, sizeof(on_stack), IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    const std::string said = testing::internal::GetCapturedStderr();
    unsetenv("JAKIRO_VERBS_DEBUG");
    EXPECT_NE(said.find("a stack"), std::string::npos) << said;

    char path[] = "/tmp/jakiro-e2e-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    void* file = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(file, MAP_FAILED);
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(pd, file, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP) << "a shared file mapping: never silently copied";
    munmap(file, 4096);
    close(fd);

    auto* heap = static_cast<char*>(std::malloc(64));
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(pd, heap, 64, IBV_ACCESS_REMOTE_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL) << "remote write needs local write";
    EXPECT_EQ(ibv_reg_mr(pd, heap, 64, IBV_ACCESS_ON_DEMAND), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP) << "no on-demand paging";
    EXPECT_EQ(ibv_reg_mr(pd, heap, 0, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_reg_mr(pd, heap, (size_t{1} << 30) + 1, 0), nullptr);
    EXPECT_EQ(errno, EINVAL) << "beyond max_mr_size";
    ibv_mr* relaxed =
        ibv_reg_mr(pd, heap, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    EXPECT_NE(relaxed, nullptr) << "optional access bits are dropped, not refused";
    EXPECT_EQ(ibv_dereg_mr(relaxed), 0);
    std::free(heap);
    EXPECT_EQ(server->resources(0).count().mrs, 0u);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, CompletionsJakirodWritesArePolledFromSharedMemory) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    int token = 0;
    ibv_cq* cq = ibv_create_cq(ctx, 100, &token, nullptr, 0);
    ASSERT_NE(cq, nullptr) << std::strerror(errno);
    EXPECT_EQ(cq->cqe, 128) << "a power of two at least as large";
    EXPECT_EQ(cq->cq_context, &token);
    EXPECT_EQ(cq->context, ctx);
    ibv_wc wc[8];
    EXPECT_EQ(ibv_poll_cq(cq, 8, wc), 0) << "empty";
    for (uint64_t i = 1; i <= 5; ++i) {
        ASSERT_TRUE(complete(cq, i));
    }
    ASSERT_EQ(ibv_poll_cq(cq, 3, wc), 3);  // verbs.h inline -> our poll_cq op
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_EQ(wc[2].wr_id, 3u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(wc[0].byte_len, 4096u);
    EXPECT_EQ(be32toh(wc[0].imm_data), 0xfeedbeefu);
    EXPECT_EQ(wc[0].qp_num, 0x123u);
    EXPECT_EQ(wc[0].src_qp, 0x456u);
    EXPECT_EQ(wc[0].wc_flags, static_cast<unsigned>(IBV_WC_WITH_IMM));
    ASSERT_EQ(ibv_poll_cq(cq, 8, wc), 2);
    EXPECT_EQ(wc[1].wr_id, 5u);
    EXPECT_EQ(ibv_poll_cq(cq, 8, wc), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(server->resources(0).count().cqs, 0u);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, ACqOverflowIsAnAsyncErrorNotACorruption) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    for (uint64_t i = 0; i < 4; ++i) {
        ASSERT_TRUE(complete(cq, 10 + i));
    }
    EXPECT_FALSE(complete(cq, 99));
    ibv_async_event event;
    ASSERT_EQ(ibv_get_async_event(ctx, &event), 0);
    EXPECT_EQ(event.event_type, IBV_EVENT_CQ_ERR);
    EXPECT_EQ(event.element.cq, cq);
    ibv_ack_async_event(&event);
    ibv_wc wc[8];
    ASSERT_EQ(ibv_poll_cq(cq, 8, wc), 4);
    EXPECT_EQ(wc[0].wr_id, 10u);
    EXPECT_EQ(wc[3].wr_id, 13u) << "the oldest completions are intact";
    EXPECT_EQ(ibv_destroy_cq(cq), 0) << "the event was acknowledged: no wait";
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, ResizeCqGrowsAndShrinksWithCompletionsOutstandingAndLosesNone) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    ibv_wc wc[64];
    // Wrap the ring of 4 first, so the unconsumed completions straddle its end.
    for (uint64_t i = 1; i <= 3; ++i) {
        ASSERT_TRUE(complete(cq, i));
    }
    ASSERT_EQ(ibv_poll_cq(cq, 3, wc), 3);
    for (uint64_t i = 4; i <= 7; ++i) {
        ASSERT_TRUE(complete(cq, i));
    }
    EXPECT_FALSE(complete(cq, 99)) << "full at 4";
    ASSERT_EQ(ibv_resize_cq(cq, 40), 0);
    EXPECT_EQ(cq->cqe, 64);
    for (uint64_t i = 8; i <= 60; ++i) {
        ASSERT_TRUE(complete(cq, i)) << "room for 64 now, " << i;
    }
    ASSERT_EQ(ibv_poll_cq(cq, 64, wc), 57);
    for (int i = 0; i < 57; ++i) {
        EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(i + 4)) << "in order, none lost";
        EXPECT_EQ(wc[i].byte_len, 4096u);
    }
    // Shrink with some waiting.
    for (uint64_t i = 61; i <= 63; ++i) {
        ASSERT_TRUE(complete(cq, i));
    }
    ASSERT_EQ(ibv_resize_cq(cq, 3), 0);
    EXPECT_EQ(cq->cqe, 4);
    ASSERT_TRUE(complete(cq, 64));
    EXPECT_FALSE(complete(cq, 65)) << "4 slots, all taken";
    ASSERT_EQ(ibv_poll_cq(cq, 64, wc), 4);
    EXPECT_EQ(wc[0].wr_id, 61u);
    EXPECT_EQ(wc[3].wr_id, 64u);
    EXPECT_EQ(server->resources(0).count().cqes, 4u) << "the quota counts the ring it has now";
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, ResizeCqBelowTheOutstandingCountIsEinvalAndTheCqIsUnchanged) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    for (uint64_t i = 1; i <= 5; ++i) {
        ASSERT_TRUE(complete(cq, i));
    }
    EXPECT_EQ(ibv_resize_cq(cq, 4), EINVAL) << "5 completions wait; 4 do not hold them";
    EXPECT_EQ(cq->cqe, 16);
    EXPECT_EQ(ibv_resize_cq(cq, 0), EINVAL);
    EXPECT_EQ(ibv_resize_cq(cq, -1), EINVAL);
    EXPECT_EQ(ibv_resize_cq(cq, 1 << 30), EINVAL) << "beyond max_cqe";
    ASSERT_TRUE(complete(cq, 6));
    ibv_wc wc[16];
    ASSERT_EQ(ibv_poll_cq(cq, 16, wc), 6);
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_EQ(wc[5].wr_id, 6u);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, AnArmedCqStaysArmedAcrossAResize) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_comp_channel* channel = ibv_create_comp_channel(ctx);
    ASSERT_NE(channel, nullptr);
    ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, channel, 0);
    ASSERT_NE(cq, nullptr);
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
    ASSERT_EQ(ibv_resize_cq(cq, 32), 0);
    ASSERT_TRUE(complete(cq, 1));
    ASSERT_TRUE(readable(channel->fd)) << "the arm made before the resize still wakes";
    ibv_cq* ev_cq = nullptr;
    void* ev_context = nullptr;
    ASSERT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_context), 0);
    EXPECT_EQ(ev_cq, cq);
    ibv_ack_cq_events(cq, 1);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

uint64_t now_ns(clockid_t clock) {
    timespec ts{};
    clock_gettime(clock, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

TEST_F(ShimEndToEnd, TheDeviceClockIsAdvertisedAndReadable) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_device_attr_ex attr{};
    ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &attr), 0);
    EXPECT_EQ(attr.hca_core_clock, 1'000'000u) << "kHz: a 1 GHz clock, i.e. nanoseconds";
    EXPECT_EQ(attr.completion_timestamp_mask, ~uint64_t{0});
    const uint64_t before = now_ns(CLOCK_MONOTONIC);
    ibv_values_ex values{};
    values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    ASSERT_EQ(ibv_query_rt_values_ex(ctx, &values), 0);
    const uint64_t after = now_ns(CLOCK_MONOTONIC);
    EXPECT_EQ(values.comp_mask, static_cast<uint32_t>(IBV_VALUES_MASK_RAW_CLOCK));
    const uint64_t raw = static_cast<uint64_t>(values.raw_clock.tv_sec) * 1'000'000'000ull +
                         static_cast<uint64_t>(values.raw_clock.tv_nsec);
    EXPECT_GE(raw, before);
    EXPECT_LE(raw, after);
    values = {};
    values.comp_mask = 1u << 7;  // not defined: not filled, and the answer says so
    ASSERT_EQ(ibv_query_rt_values_ex(ctx, &values), 0);
    EXPECT_EQ(values.comp_mask, 0u);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, CompletionsOfATimestampedCqCarryTheDeviceAndWallClocks) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_cq_init_attr_ex a{};
    a.cqe = 8;
    a.wc_flags = uint64_t{IBV_WC_STANDARD_FLAGS} | uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP} |
                 uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};
    ibv_cq_ex* stamped = ibv_create_cq_ex(ctx, &a);
    ASSERT_NE(stamped, nullptr) << std::strerror(errno);
    a.wc_flags = IBV_WC_STANDARD_FLAGS;
    ibv_cq_ex* plain = ibv_create_cq_ex(ctx, &a);
    ASSERT_NE(plain, nullptr);
    ibv_cq* cq = ibv_cq_ex_to_cq(stamped);
    const uint64_t mono_before = now_ns(CLOCK_MONOTONIC);
    const uint64_t real_before = now_ns(CLOCK_REALTIME);
    ASSERT_TRUE(complete(cq, 1));
    ASSERT_TRUE(complete(cq, 2));
    ASSERT_TRUE(complete(ibv_cq_ex_to_cq(plain), 3));
    const uint64_t mono_after = now_ns(CLOCK_MONOTONIC);
    const uint64_t real_after = now_ns(CLOCK_REALTIME);
    ASSERT_EQ(ibv_start_poll(stamped, nullptr), 0);
    const uint64_t first = ibv_wc_read_completion_ts(stamped);
    EXPECT_GE(first, mono_before);
    EXPECT_LE(first, mono_after);
    EXPECT_GE(ibv_wc_read_completion_wallclock_ns(stamped), real_before);
    EXPECT_LE(ibv_wc_read_completion_wallclock_ns(stamped), real_after);
    ASSERT_EQ(ibv_next_poll(stamped), 0);
    EXPECT_GE(ibv_wc_read_completion_ts(stamped), first) << "the device clock does not go back";
    ibv_end_poll(stamped);
    ASSERT_EQ(ibv_start_poll(plain, nullptr), 0);
    EXPECT_EQ(ibv_wc_read_completion_ts(plain), 0u) << "not asked for: not stamped";
    ibv_end_poll(plain);
    // A resize keeps the CQ stamping.
    ASSERT_EQ(ibv_resize_cq(cq, 64), 0);
    ASSERT_TRUE(complete(cq, 4));
    ASSERT_EQ(ibv_start_poll(stamped, nullptr), 0);
    EXPECT_GE(ibv_wc_read_completion_ts(stamped), mono_after);
    ibv_end_poll(stamped);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(plain)), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, CompletionChannelsWakeUpOnArmedCqsOnly) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_comp_channel* channel = ibv_create_comp_channel(ctx);
    ASSERT_NE(channel, nullptr);
    EXPECT_GE(channel->fd, 0);
    int token = 7;
    ibv_cq* cq = ibv_create_cq(ctx, 16, &token, channel, 0);
    ASSERT_NE(cq, nullptr);
    EXPECT_EQ(cq->channel, channel);
    EXPECT_EQ(ibv_destroy_comp_channel(channel), EBUSY) << "a CQ uses it";

    ASSERT_TRUE(complete(cq, 1));
    EXPECT_FALSE(readable(channel->fd, 50)) << "not armed: no event";
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
    ASSERT_TRUE(complete(cq, 2));
    ASSERT_TRUE(readable(channel->fd));
    ibv_cq* ev_cq = nullptr;
    void* ev_context = nullptr;
    ASSERT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_context), 0);
    EXPECT_EQ(ev_cq, cq);
    EXPECT_EQ(ev_context, &token);
    ibv_wc wc[4];
    EXPECT_EQ(ibv_poll_cq(cq, 4, wc), 2);

    // Solicited-only: an ordinary completion does not wake, a solicited one does.
    ASSERT_EQ(ibv_req_notify_cq(cq, 1), 0);
    ASSERT_TRUE(complete(cq, 3, false));
    EXPECT_FALSE(readable(channel->fd, 50));
    ASSERT_TRUE(complete(cq, 4, true));
    ASSERT_TRUE(readable(channel->fd));
    ASSERT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_context), 0);
    ibv_ack_cq_events(cq, 2);

    // Non-blocking channels say EAGAIN when there is nothing, as the kernel's do.
    fcntl(channel->fd, F_SETFL, fcntl(channel->fd, F_GETFL) | O_NONBLOCK);
    errno = 0;
    EXPECT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_context), -1);
    EXPECT_EQ(errno, EAGAIN);

    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, DestroyCqWaitsUntilItsEventsAreAcknowledged) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_comp_channel* channel = ibv_create_comp_channel(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, channel, 0);
    ASSERT_NE(cq, nullptr);
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
    ASSERT_TRUE(complete(cq, 1));
    ibv_cq* ev_cq = nullptr;
    void* ev_context = nullptr;
    ASSERT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_context), 0);
    std::atomic<bool> destroyed{false};
    std::thread destroyer([&] {
        EXPECT_EQ(ibv_destroy_cq(cq), 0);
        destroyed = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(destroyed) << "libibverbs semantics: one event not acknowledged yet";
    ibv_ack_cq_events(ev_cq, 1);
    destroyer.join();
    EXPECT_TRUE(destroyed);
    EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, AProcessThatDiesLeavesNothingBehindInJakirod) {
    // A child makes a PD, an MR, a completion channel and a CQ, says so, and is killed.
    int ready[2];
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ibv_context* ctx = open_first();
        ibv_pd* pd = ctx != nullptr ? ibv_alloc_pd(ctx) : nullptr;
        void* buffer =
            mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ibv_mr* mr = pd != nullptr ? ibv_reg_mr(pd, buffer, 8192, IBV_ACCESS_LOCAL_WRITE) : nullptr;
        ibv_comp_channel* channel = ctx != nullptr ? ibv_create_comp_channel(ctx) : nullptr;
        ibv_cq* cq = channel != nullptr ? ibv_create_cq(ctx, 8, nullptr, channel, 0) : nullptr;
        const char outcome = mr != nullptr && cq != nullptr ? 'y' : 'n';
        [[maybe_unused]] const ssize_t n = write(ready[1], &outcome, 1);
        for (;;) {
            pause();
        }
    }
    close(ready[1]);
    char outcome = 0;
    ASSERT_EQ(read(ready[0], &outcome, 1), 1);
    close(ready[0]);
    const auto before = server->resources(0).count();
    kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_EQ(outcome, 'y') << "the child could not create its objects";
    EXPECT_EQ(before.pds + before.mrs + before.cqs, 3u);
    // The server thread, here in the parent, saw the child's connection close.
    ASSERT_TRUE(clients_become(0));
    const auto left = server->resources(0).count();
    EXPECT_EQ(left.pds + left.mrs + left.cqs, 0u);
}

TEST_F(ShimEndToEnd, QueuePairsNeedJakirodsEngine) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ASSERT_NE(pd, nullptr);
    ASSERT_NE(cq, nullptr);
    ibv_qp_init_attr attr{};
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 16;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    errno = 0;
    EXPECT_EQ(ibv_create_qp(pd, &attr), nullptr) << "a jakirod without an engine";
    EXPECT_EQ(errno, EOPNOTSUPP);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ShimEndToEnd, DestroyVerbsSucceedOnceJakirodIsGone) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    auto* heap = static_cast<char*>(std::malloc(100));
    ibv_mr* mr = ibv_reg_mr(pd, heap, 100, IBV_ACCESS_LOCAL_WRITE);
    ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
    ASSERT_TRUE(pd && mr && cq);
    server->stop();
    // After IBV_EVENT_DEVICE_FATAL a program cleans up; nothing is left to refuse it.
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    errno = 0;
    EXPECT_EQ(ibv_alloc_pd(ctx), nullptr);
    EXPECT_EQ(errno, EIO);
    std::free(heap);
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

// The same server with QPs: jakirod's real create/modify/query/destroy and QP ring behind the
// shim, run by an engine that no worker polls (its control calls run inline).
class ShimEndToEndQp : public ShimEndToEnd {
  protected:
    ShimEndToEndQp() { with_qps = true; }

    void SetUp() override {
        ShimEndToEnd::SetUp();
        ctx = open_first();
        ASSERT_NE(ctx, nullptr);
        pd = ibv_alloc_pd(ctx);
        cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
        ASSERT_TRUE(pd && cq);
    }

    ibv_qp* create_rc(uint32_t wr = 16) {
        ibv_qp_init_attr attr{};
        attr.qp_context = this;
        attr.send_cq = cq;
        attr.recv_cq = cq;
        attr.qp_type = IBV_QPT_RC;
        attr.cap.max_send_wr = attr.cap.max_recv_wr = wr;
        attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = 64;
        ibv_qp* qp = ibv_create_qp(pd, &attr);
        EXPECT_NE(qp, nullptr) << std::strerror(errno);
        created_caps = attr.cap;
        return qp;
    }

    // RESET -> INIT -> RTR -> RTS towards 198.19.1.2, QPN 0x77, as ibv_rc_pingpong does it.
    int to_rts(ibv_qp* qp) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = 1;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        if (const int e = ibv_modify_qp(
                qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
            return e;
        }
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = 0x77;
        a.rq_psn = 0x1234;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.grh.hop_limit = 64;
        const uint8_t peer[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 19, 1, 2};
        std::memcpy(a.ah_attr.grh.dgid.raw, peer, 16);
        if (const int e = ibv_modify_qp(qp, &a,
                                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                            IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
            return e;
        }
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = 0x5678;
        a.max_rd_atomic = 1;
        return ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    }

    void finish() {
        EXPECT_EQ(ibv_destroy_cq(cq), 0);
        EXPECT_EQ(ibv_dealloc_pd(pd), 0);
        EXPECT_EQ(ibv_close_device(ctx), 0);
    }

    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp_cap created_caps{};
};

void* never_called_alloc(ibv_pd*, void* pd_context, size_t, size_t, uint64_t) {
    ++*static_cast<int*>(pd_context);
    return IBV_ALLOCATOR_USE_DEFAULT;
}
void never_called_free(ibv_pd*, void* pd_context, void*, uint64_t) {
    ++*static_cast<int*>(pd_context);
}

TEST_F(ShimEndToEndQp, AParentDomainIsItsPdInEveryVerbAndOutlivesNothing) {
    ibv_td_init_attr td_attr{};
    ibv_td* td = ibv_alloc_td(ctx, &td_attr);
    ASSERT_NE(td, nullptr) << std::strerror(errno);
    int allocator_calls = 0;
    ibv_parent_domain_init_attr attr{};
    attr.pd = pd;
    attr.td = td;
    attr.comp_mask =
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    attr.alloc = never_called_alloc;
    attr.free = never_called_free;
    attr.pd_context = &allocator_calls;
    ibv_pd* parent = ibv_alloc_parent_domain(ctx, &attr);
    ASSERT_NE(parent, nullptr) << std::strerror(errno);
    EXPECT_EQ(parent->handle, pd->handle) << "jakirod sees the protection domain";
    EXPECT_EQ(server->resources(0).count().pds, 1u) << "nothing new in jakirod";

    // An MR, a CQ and a QP made with the parent domain.
    static char buffer[8192];
    ibv_mr* mr = ibv_reg_mr(parent, buffer, sizeof(buffer), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    EXPECT_EQ(mr->pd, parent);
    ibv_cq_init_attr_ex cq_attr{};
    cq_attr.cqe = 8;
    cq_attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    cq_attr.parent_domain = parent;
    ibv_cq_ex* cq_ex = ibv_create_cq_ex(ctx, &cq_attr);
    ASSERT_NE(cq_ex, nullptr) << std::strerror(errno);
    cq_attr.parent_domain = pd;
    errno = 0;
    EXPECT_EQ(ibv_create_cq_ex(ctx, &cq_attr), nullptr) << "a PD is not a parent domain";
    EXPECT_EQ(errno, EINVAL);
    ibv_qp_init_attr qp_attr{};
    qp_attr.send_cq = qp_attr.recv_cq = ibv_cq_ex_to_cq(cq_ex);
    qp_attr.qp_type = IBV_QPT_RC;
    qp_attr.cap.max_send_wr = qp_attr.cap.max_recv_wr = 4;
    qp_attr.cap.max_send_sge = qp_attr.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(parent, &qp_attr);
    ASSERT_NE(qp, nullptr) << std::strerror(errno);
    EXPECT_EQ(qp->pd, parent);
    EXPECT_EQ(to_rts(qp), 0);

    // Lifetimes: the PD and the TD are busy while the parent domain stands on them.
    EXPECT_EQ(ibv_dealloc_td(td), EBUSY);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq_ex)), 0);
    EXPECT_EQ(ibv_dealloc_pd(parent), 0);
    EXPECT_EQ(ibv_dealloc_td(td), 0);
    EXPECT_EQ(server->resources(0).count().pds, 1u) << "the PD itself is still there";
    EXPECT_EQ(allocator_calls, 0) << "no provider buffer lives in the program's memory";
    finish();
}

TEST_F(ShimEndToEndQp, TheCapsPromiseNothingThatFailsWithEopnotsupp) {
    // What is not built is not advertised, and what is advertised works: no XRC, no type-2A
    // windows, no CQ moderation. Memory windows of type 1 and 2B are (as rxe), and so is ATOMIC
    // WRITE (the kernel's bit 40, as rxe sets it; this libibverbs names no flag for it): QPs
    // that ask for them are made.
    ibv_device_attr_ex attr{};
    ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &attr), 0);
    EXPECT_GT(attr.orig_attr.max_mw, 0);
    EXPECT_EQ(attr.orig_attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_XRC |
                                                 IBV_DEVICE_RESIZE_MAX_WR | IBV_DEVICE_SRQ_RESIZE),
              0u);
    EXPECT_EQ(
        attr.orig_attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B),
        unsigned{IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B});
    EXPECT_EQ(attr.cq_mod_caps.max_cq_count, 0u);
    ibv_pd* mw_pd = ibv_alloc_pd(ctx);
    ASSERT_NE(mw_pd, nullptr);
    for (ibv_mw_type type : {IBV_MW_TYPE_1, IBV_MW_TYPE_2}) {
        ibv_mw* mw = ibv_alloc_mw(mw_pd, type);
        ASSERT_NE(mw, nullptr) << std::strerror(errno);
        EXPECT_EQ(mw->type, type);
        EXPECT_EQ(mw->pd, mw_pd);
        EXPECT_NE(mw->rkey, 0u);
        EXPECT_EQ(ibv_dealloc_pd(mw_pd), EBUSY) << "a window stands on it";
        EXPECT_EQ(ibv_dealloc_mw(mw), 0);
    }
    EXPECT_EQ(ibv_dealloc_pd(mw_pd), 0);
    ibv_qp_init_attr_ex qp_attr{};
    qp_attr.qp_type = IBV_QPT_RC;
    qp_attr.send_cq = qp_attr.recv_cq = cq;
    qp_attr.pd = pd;
    qp_attr.cap.max_send_wr = qp_attr.cap.max_recv_wr = 4;
    qp_attr.cap.max_send_sge = qp_attr.cap.max_recv_sge = 1;
    qp_attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qp_attr.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE;
    EXPECT_NE(attr.device_cap_flags_ex & (uint64_t{1} << 40), 0u);
    ibv_qp* atomic_write_qp = ibv_create_qp_ex(ctx, &qp_attr);
    ASSERT_NE(atomic_write_qp, nullptr) << std::strerror(errno);
    EXPECT_NE(ibv_qp_to_qp_ex(atomic_write_qp), nullptr);
    EXPECT_EQ(ibv_destroy_qp(atomic_write_qp), 0);
    qp_attr.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW |
                             IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;
    ibv_qp* mw_qp = ibv_create_qp_ex(ctx, &qp_attr);
    ASSERT_NE(mw_qp, nullptr) << std::strerror(errno);
    EXPECT_EQ(ibv_destroy_qp(mw_qp), 0);
    qp_attr.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_TSO;
    errno = 0;
    EXPECT_EQ(ibv_create_qp_ex(ctx, &qp_attr), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP) << "refused at creation, never later";
    // Resize and timestamps, which the caps do promise, work (the tests above).
    EXPECT_GT(attr.hca_core_clock, 0u);
    finish();
}

// rdma-core's generic QP tests build ibv_qp_init_attr_ex from the device's own answers
// (caps up to max_qp_wr / 8 and max_sge / 2, IBV_QP_INIT_ATTR_CREATE_FLAGS with no flag, send
// ops): such a QP of every type is made, reports at least those caps, and moves on to INIT.
// What the answers do not promise (TSO, RSS, XRC, multicast, raw packet offloads) is refused
// with EOPNOTSUPP at creation and leaves nothing in jakirod.
TEST_F(ShimEndToEndQp, CreateQpExTakesInitAttrsBuiltFromTheDevicesOwnLimits) {
    ibv_device_attr_ex dev{};
    ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &dev), 0);
    const ibv_device_attr& lim = dev.orig_attr;
    ASSERT_GE(lim.max_qp_wr, 8);
    ASSERT_GE(lim.max_sge, 2);
    struct shape {
        uint32_t wr, sge;
        uint32_t mask;
        uint64_t ops;
    };
    const uint32_t flags_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    const uint32_t wr = static_cast<uint32_t>(lim.max_qp_wr);
    const uint32_t sge = static_cast<uint32_t>(lim.max_sge);
    for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
        for (const shape& sh :
             {shape{wr / 8, sge / 2, flags_mask, 0},
              shape{1, 1, flags_mask | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM},
              shape{wr, sge, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                    IBV_QP_EX_WITH_SEND}}) {
            SCOPED_TRACE(testing::Message() << "type " << type << " mask " << sh.mask << " wr "
                                            << sh.wr << " sge " << sh.sge);
            ibv_qp_init_attr_ex init{};
            init.qp_type = type;
            init.send_cq = init.recv_cq = cq;
            init.pd = pd;
            init.sq_sig_all = 1;
            init.cap.max_send_wr = init.cap.max_recv_wr = sh.wr;
            init.cap.max_send_sge = init.cap.max_recv_sge = sh.sge;
            init.comp_mask = sh.mask;
            init.send_ops_flags = sh.ops;
            const ibv_qp_cap asked = init.cap;
            ibv_qp* qp = ibv_create_qp_ex(ctx, &init);
            ASSERT_NE(qp, nullptr) << std::strerror(errno);
            EXPECT_EQ(ibv_qp_to_qp_ex(qp) != nullptr, sh.ops != 0);
            ibv_qp_attr attr{};
            ibv_qp_init_attr got{};
            ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &got), 0);
            EXPECT_EQ(attr.qp_state, IBV_QPS_RESET);
            EXPECT_EQ(got.qp_type, type);
            EXPECT_GE(got.cap.max_send_wr, asked.max_send_wr);
            EXPECT_GE(got.cap.max_recv_wr, asked.max_recv_wr);
            EXPECT_GE(got.cap.max_send_sge, asked.max_send_sge);
            EXPECT_GE(got.cap.max_recv_sge, asked.max_recv_sge);

            ibv_qp_attr to_init{};
            to_init.qp_state = IBV_QPS_INIT;
            to_init.pkey_index = 0;
            to_init.port_num = 1;
            int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
            if (type == IBV_QPT_UD) {
                to_init.qkey = 0x11111111;
                mask |= IBV_QP_QKEY;
            } else {
                to_init.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
                mask |= IBV_QP_ACCESS_FLAGS;
            }
            ASSERT_EQ(ibv_modify_qp(qp, &to_init, mask), 0);
            attr = {};
            ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PORT, &got), 0);
            EXPECT_EQ(attr.qp_state, IBV_QPS_INIT);
            EXPECT_EQ(attr.port_num, 1);
            EXPECT_EQ(ibv_destroy_qp(qp), 0);
        }
    }

    // Not advertised, not made.
    EXPECT_EQ(dev.tso_caps.max_tso, 0u);
    EXPECT_EQ(dev.rss_caps.max_rwq_indirection_tables, 0u);
    EXPECT_EQ(dev.raw_packet_caps, 0u);
    EXPECT_EQ(lim.max_mcast_grp, 0);
    EXPECT_EQ(lim.device_cap_flags & IBV_DEVICE_XRC, 0u);
    EXPECT_EQ(
        dev.device_cap_flags_ex & (IBV_DEVICE_RAW_SCATTER_FCS | IBV_DEVICE_PCI_WRITE_END_PADDING),
        0u);
    ibv_qp_init_attr_ex init{};
    init.qp_type = IBV_QPT_UD;
    init.send_cq = init.recv_cq = cq;
    init.pd = pd;
    init.cap.max_send_wr = init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    for (uint32_t flag :
         {uint32_t{IBV_QP_CREATE_BLOCK_SELF_MCAST_LB}, uint32_t{IBV_QP_CREATE_SCATTER_FCS},
          uint32_t{IBV_QP_CREATE_CVLAN_STRIPPING}, uint32_t{IBV_QP_CREATE_SOURCE_QPN},
          uint32_t{IBV_QP_CREATE_PCI_WRITE_END_PADDING}}) {
        init.comp_mask = flags_mask;
        init.create_flags = flag;
        init.source_qpn = 0x1234;
        errno = 0;
        EXPECT_EQ(ibv_create_qp_ex(ctx, &init), nullptr) << flag;
        EXPECT_EQ(errno, EOPNOTSUPP) << flag;
    }
    init.create_flags = 0;
    for (uint32_t more :
         {uint32_t{IBV_QP_INIT_ATTR_MAX_TSO_HEADER}, uint32_t{IBV_QP_INIT_ATTR_IND_TABLE},
          uint32_t{IBV_QP_INIT_ATTR_RX_HASH}, uint32_t{IBV_QP_INIT_ATTR_XRCD}}) {
        init.comp_mask = flags_mask | more;
        init.max_tso_header = 64;
        errno = 0;
        EXPECT_EQ(ibv_create_qp_ex(ctx, &init), nullptr) << more;
        EXPECT_EQ(errno, EOPNOTSUPP) << more;
    }
    EXPECT_EQ(server->resources(0).count().qps, 0u) << "no refusal left a QP in jakirod";
    finish();
}

TEST_F(ShimEndToEndQp, ParentDomainsRefuseWhatRdmaCoreRefuses) {
    ibv_parent_domain_init_attr attr{};
    errno = 0;
    EXPECT_EQ(ibv_alloc_parent_domain(ctx, &attr), nullptr) << "no PD";
    EXPECT_EQ(errno, EINVAL);
    attr.pd = pd;
    attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;  // without the functions
    EXPECT_EQ(ibv_alloc_parent_domain(ctx, &attr), nullptr);
    EXPECT_EQ(errno, EINVAL);
    attr.comp_mask = 1u << 6;
    EXPECT_EQ(ibv_alloc_parent_domain(ctx, &attr), nullptr);
    EXPECT_EQ(errno, EINVAL);
    attr.comp_mask = 0;
    ibv_pd* parent = ibv_alloc_parent_domain(ctx, &attr);
    ASSERT_NE(parent, nullptr);
    attr.pd = parent;
    EXPECT_EQ(ibv_alloc_parent_domain(ctx, &attr), nullptr) << "a parent of a parent";
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "a parent domain stands on it";
    EXPECT_EQ(ibv_dealloc_pd(parent), 0);
    ibv_td_init_attr td_attr{};
    td_attr.comp_mask = 1;
    EXPECT_EQ(ibv_alloc_td(ctx, &td_attr), nullptr);
    EXPECT_EQ(errno, EINVAL);
    finish();
}

TEST_F(ShimEndToEndQp, AnRcQpGoesToRtsReportsItsAttributesAndIsDestroyed) {
    ibv_qp* qp = create_rc();
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(server->resources(0).count().qps, 1u);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_EQ(qp->qp_num, qp->handle) << "jakirod's handle is the QPN";
    EXPECT_GE(created_caps.max_send_wr, 16u);
    EXPECT_GE(created_caps.max_inline_data, 64u);

    ibv_qp_attr bad{};
    bad.qp_state = IBV_QPS_RTS;
    EXPECT_EQ(ibv_modify_qp(qp, &bad, IBV_QP_STATE), EINVAL) << "RESET -> RTS is no transition";
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    ASSERT_EQ(to_rts(qp), 0);
    EXPECT_EQ(qp->state, IBV_QPS_RTS);

    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(attr.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(attr.dest_qp_num, 0x77u);
    EXPECT_EQ(attr.rq_psn, 0x1234u);
    EXPECT_EQ(attr.sq_psn, 0x5678u);
    EXPECT_EQ(attr.timeout, 14);
    EXPECT_EQ(attr.retry_cnt, 7);
    EXPECT_EQ(attr.min_rnr_timer, 12);
    EXPECT_EQ(attr.qp_access_flags, unsigned{IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ});
    EXPECT_EQ(attr.ah_attr.grh.dgid.raw[15], 2);
    EXPECT_EQ(attr.ah_attr.is_global, 1);
    EXPECT_EQ(attr.cap.max_send_wr, created_caps.max_send_wr);
    EXPECT_EQ(attr.cap.max_inline_data, created_caps.max_inline_data);
    EXPECT_EQ(init.send_cq, cq);
    EXPECT_EQ(init.recv_cq, cq);
    EXPECT_EQ(init.qp_context, this);
    EXPECT_EQ(init.qp_type, IBV_QPT_RC);
    EXPECT_EQ(init.cap.max_recv_wr, created_caps.max_recv_wr);

    // Its PD and CQ are in use while it exists.
    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
    EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(server->resources(0).count().qps, 0u);
    finish();
}

// RESET empties a QP, its unread completions included (as mlx4/mlx5 clean their CQs): a QP
// brought back from ERR through RESET must not hand its old flushes to the program's next
// poll as if they were its new WRs' results. Other QPs' completions stay, in order.
TEST_F(ShimEndToEndQp, ResetTakesTheQpsUnreadCompletionsWithItAndNoOtherQps) {
    ibv_cq* recv_cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ASSERT_NE(recv_cq, nullptr);
    ibv_qp_init_attr attr{};
    attr.send_cq = cq;
    attr.recv_cq = recv_cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    ibv_qp* reset = ibv_create_qp(pd, &attr);
    ibv_qp* other = create_rc();
    ASSERT_TRUE(reset && other);
    ASSERT_EQ(to_rts(reset), 0);
    const auto publish = [&](ibv_cq* into, ibv_qp* of, uint64_t wr_id) {
        auto queue = server->resources(0).find_cq(into->handle);
        ASSERT_NE(queue, nullptr);
        verbs_proto::cqe e{};
        e.wr_id = wr_id;
        e.status = IBV_WC_WR_FLUSH_ERR;
        e.opcode = IBV_WC_RECV;
        e.qp_num = of->qp_num;
        ASSERT_TRUE(queue->complete(e));
    };
    publish(cq, reset, 1);
    publish(cq, other, 2);
    publish(cq, reset, 3);
    publish(cq, other, 4);
    publish(recv_cq, reset, 5);
    publish(recv_cq, other, 6);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(reset, &a, IBV_QP_STATE), 0);
    ibv_wc wc[8];
    ASSERT_EQ(ibv_poll_cq(cq, 1, wc), 1) << "ERR keeps them: the program may read its flushes";
    EXPECT_EQ(wc[0].wr_id, 1u);
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(reset, &a, IBV_QP_STATE), 0);
    ASSERT_EQ(ibv_poll_cq(cq, 8, wc), 2) << "the send CQ keeps only the other QP's";
    EXPECT_EQ(wc[0].wr_id, 2u);
    EXPECT_EQ(wc[1].wr_id, 4u);
    ASSERT_EQ(ibv_poll_cq(recv_cq, 8, wc), 1) << "the receive CQ is cleaned too";
    EXPECT_EQ(wc[0].wr_id, 6u);
    // Back to RTS: what completes from now on is the program's to read.
    ASSERT_EQ(to_rts(reset), 0);
    publish(cq, reset, 7);
    ASSERT_EQ(ibv_poll_cq(cq, 8, wc), 1);
    EXPECT_EQ(wc[0].wr_id, 7u);
    EXPECT_EQ(ibv_destroy_qp(reset), 0);
    EXPECT_EQ(ibv_destroy_qp(other), 0);
    EXPECT_EQ(ibv_destroy_cq(recv_cq), 0);
    finish();
}

TEST_F(ShimEndToEndQp, PostedWorkRingsTheSleepingEnginesDoorbellOnly) {
    ibv_qp* qp = create_rc();
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(to_rts(qp), 0);
    uint32_t seen = engine->doorbell_count();
    auto rung = [this, &seen] {
        const uint32_t now = engine->doorbell_count();
        const bool moved = now != seen;
        seen = now;
        return moved;
    };
    char buf[32] = "inline bytes";
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), sizeof(buf), 0};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    ibv_recv_wr rwr{};
    ibv_recv_wr* bad_recv = nullptr;

    // Awake: posting costs no system call, the engine finds the work by polling.
    ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    EXPECT_FALSE(rung());
    EXPECT_FALSE(engine->prepare_sleep()) << "a posted send is work: the engine must not sleep";
    EXPECT_EQ(ibv_destroy_qp(qp), 0);  // abandons that send: nothing will carry it

    // Asleep: a receive posted to a connected QP rings nothing (it waits for a packet, and the
    // responder reads the receive queue when one comes); a send rings.
    ibv_qp* idle = create_rc();
    ASSERT_NE(idle, nullptr);
    ASSERT_EQ(to_rts(idle), 0);
    ASSERT_TRUE(engine->prepare_sleep());
    ASSERT_EQ(ibv_post_recv(idle, &rwr, &bad_recv), 0);
    EXPECT_FALSE(rung()) << "a receive woke the sleeping engine";
    ASSERT_EQ(ibv_post_send(idle, &wr, &bad), 0);
    EXPECT_TRUE(rung());
    engine->after_sleep();
    ASSERT_EQ(ibv_post_recv(idle, &rwr, &bad_recv), 0);
    EXPECT_FALSE(rung()) << "awake again";
    EXPECT_EQ(ibv_destroy_qp(idle), 0);
    finish();
}

TEST_F(ShimEndToEndQp, QpAsyncEventsNameTheProgramsQp) {
    ibv_qp* qp = create_rc();
    ASSERT_NE(qp, nullptr);
    uint64_t owner = 0;
    for (const auto& r : engine->report()) {
        if (r.qpn == qp->qp_num) {
            owner = r.owner;
        }
    }
    ASSERT_NE(owner, 0u);
    // What the engine raises when it gives up on a QP (retries exhausted, a CQ overflowed).
    server->raise_event(owner, verbs_proto::event_type::qp_fatal, qp->handle);
    ASSERT_TRUE(readable(ctx->async_fd));
    ibv_async_event event;
    ASSERT_EQ(ibv_get_async_event(ctx, &event), 0);
    EXPECT_EQ(event.event_type, IBV_EVENT_QP_FATAL);
    EXPECT_EQ(event.element.qp, qp);
    ibv_ack_async_event(&event);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    finish();
}

TEST_F(ShimEndToEndQp, DestroyQpSucceedsOnceJakirodIsGone) {
    ibv_qp* qp = create_rc();
    ASSERT_NE(qp, nullptr);
    server->stop();
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    finish();
}

}  // namespace
}  // namespace jakiro

namespace jakiro {
namespace {

// ibv_rereg_mr with every combination of flags: the MR keeps its keys (a peer's rkey stays
// good) and jakirod's view becomes the new PD, range and rights, over the program's own pages.
TEST_F(ShimEndToEnd, ReregKeepsTheKeysAndTakesEveryFlagCombination) {
    ibv_context* ctx = open_first();
    ASSERT_NE(ctx, nullptr);
    ibv_pd* pd1 = ibv_alloc_pd(ctx);
    ibv_pd* pd2 = ibv_alloc_pd(ctx);
    ASSERT_TRUE(pd1 && pd2);
    constexpr std::size_t size = 2 * 4096;
    auto* first = static_cast<char*>(std::aligned_alloc(4096, size));
    auto* second = static_cast<char*>(std::aligned_alloc(4096, size));
    ASSERT_TRUE(first && second);
    std::memset(first, 'a', size);
    std::memset(second, 'b', size);
    const int read_only = IBV_ACCESS_REMOTE_READ;
    const int writable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC;
    const auto& mrs = server->resources(0).mrs();
    for (int flags = 1; flags <= 7; ++flags) {
        SCOPED_TRACE(testing::Message() << "flags " << flags);
        ibv_mr* mr = ibv_reg_mr(pd1, first, size, read_only);
        ASSERT_NE(mr, nullptr) << std::strerror(errno);
        const uint32_t lkey = mr->lkey, rkey = mr->rkey;
        const bool access = (flags & IBV_REREG_MR_CHANGE_ACCESS) != 0;
        const bool translation = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
        const bool new_pd = (flags & IBV_REREG_MR_CHANGE_PD) != 0;
        // libibverbs: access bits only with CHANGE_ACCESS.
        ASSERT_EQ(ibv_rereg_mr(mr, flags, pd2, second, size, access ? writable : 0), 0)
            << std::strerror(errno);
        EXPECT_EQ(mr->lkey, lkey) << "the keys stay";
        EXPECT_EQ(mr->rkey, rkey);
        EXPECT_EQ(mr->pd, new_pd ? pd2 : pd1);
        EXPECT_EQ(mr->addr, translation ? second : first);
        EXPECT_EQ(mr->length, size);
        char* buffer = translation ? second : first;
        ibv_pd* pd = new_pd ? pd2 : pd1;
        const auto iova = reinterpret_cast<uintptr_t>(buffer);
        // A peer's READ with the rkey it already had: the program's bytes.
        auto r = mrs.find(pd->handle, rkey, iova + 8, 8, verbs_proto::access_remote_read);
        ASSERT_TRUE(r);
        EXPECT_EQ(r.bytes[0], std::byte{static_cast<unsigned char>(translation ? 'b' : 'a')});
        // A peer's WRITE: allowed exactly when the rights were changed to writable.
        r = mrs.find(pd->handle, rkey, iova + 16, 5, verbs_proto::access_remote_write);
        EXPECT_EQ(r.status, access ? verbs::mr_status::ok : verbs::mr_status::no_access);
        if (r) {
            std::memcpy(r.bytes.data(), "HELLO", 5);
            EXPECT_EQ(std::memcmp(buffer + 16, "HELLO", 5), 0) << "no copy after rereg either";
            std::memset(buffer + 16, translation ? 'b' : 'a', 5);
        }
        r = {};
        if (new_pd) {
            EXPECT_EQ(mrs.find(pd1->handle, rkey, iova, 8, 0).status, verbs::mr_status::pd_mismatch)
                << "the old PD no longer reaches it";
        }
        if (translation) {
            EXPECT_EQ(mrs.find(pd->handle, rkey, reinterpret_cast<uintptr_t>(first), 8, 0).status,
                      verbs::mr_status::out_of_bounds)
                << "the old range is gone";
        }
        EXPECT_EQ(server->resources(0).count().mrs, 1u);
        EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "the MR counts in its new PD";
        EXPECT_EQ(ibv_dereg_mr(mr), 0);
        EXPECT_EQ(server->resources(0).count().mrs, 0u);
    }
    // Refused as libibverbs and the kernel refuse them: what libibverbs checks is an input
    // error, what the device refuses a command error; either way the MR stays as it was.
    ibv_mr* mr = ibv_reg_mr(pd1, first, size, read_only);
    ASSERT_NE(mr, nullptr);
    const uint32_t rkey = mr->rkey;
    struct refusal {
        const char* what;
        int flags;
        ibv_pd* pd;
        void* addr;
        std::size_t length;
        int access;
        int result;
        int error;
    };
    const refusal refusals[] = {
        {"remote write needs local write", IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
         IBV_ACCESS_REMOTE_WRITE, IBV_REREG_MR_ERR_CMD, EINVAL},
        {"on-demand paging is not offered", IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, IBV_REREG_MR_ERR_CMD, EOPNOTSUPP},
        {"access without CHANGE_ACCESS", IBV_REREG_MR_CHANGE_PD, pd2, nullptr, 0, writable,
         IBV_REREG_MR_ERR_INPUT, EINVAL},
        {"no flag at all", 0, nullptr, nullptr, 0, 0, IBV_REREG_MR_ERR_CMD, EINVAL},
        {"an unknown flag (KEEP_VALID in newer headers)", (1 << 3) | IBV_REREG_MR_CHANGE_ACCESS,
         nullptr, nullptr, 0, writable, IBV_REREG_MR_ERR_INPUT, EINVAL},
        {"a translation without an address", IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr,
         size, 0, IBV_REREG_MR_ERR_INPUT, EINVAL},
        {"a translation without a length", IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, second, 0, 0,
         IBV_REREG_MR_ERR_INPUT, EINVAL},
        {"CHANGE_PD without a PD", IBV_REREG_MR_CHANGE_PD, nullptr, nullptr, 0, 0,
         IBV_REREG_MR_ERR_CMD, EINVAL},
    };
    for (const refusal& r : refusals) {
        errno = 0;
        EXPECT_EQ(ibv_rereg_mr(mr, r.flags, r.pd, r.addr, r.length, r.access), r.result) << r.what;
        EXPECT_EQ(errno, r.error) << r.what;
        EXPECT_EQ(mr->pd, pd1) << r.what;
        EXPECT_EQ(mr->addr, first) << r.what;
        EXPECT_EQ(mr->rkey, rkey) << r.what;
        EXPECT_TRUE(mrs.find(pd1->handle, rkey, reinterpret_cast<uintptr_t>(first), 8,
                             verbs_proto::access_remote_read))
            << r.what << ": the old registration is still in place";
        EXPECT_EQ(mrs.find(pd1->handle, rkey, reinterpret_cast<uintptr_t>(first), 8,
                           verbs_proto::access_remote_write)
                      .status,
                  verbs::mr_status::no_access)
            << r.what << ": with its old rights";
    }
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd1), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
    std::free(first);
    std::free(second);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

}  // namespace
}  // namespace jakiro
