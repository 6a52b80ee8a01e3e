// jakirod going away (device_death.hh) against a fake jakirod that is stopped mid-test: the
// completions it had published come first, then one IBV_WC_WR_FLUSH_ERR per work request still
// outstanding and nothing more; posting fails with EIO; ibv_get_cq_event and
// ibv_get_async_event end within a bound instead of waiting forever; IBV_EVENT_DEVICE_FATAL is
// reported exactly once; control verbs fail with EIO while destroy verbs still succeed.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "tests/unit/verbs_shim/qp_fixture.hh"
#include "verbs_shim/device_death.hh"

namespace jakiro::verbs_shim::testing {
namespace {

namespace proto = verbs_proto;
using namespace std::chrono_literals;

// How long the shim may take to notice: the hot path looks every check_interval_ns (a coarse
// clock, so up to a jiffy more); the blocking waits at once. Generous for a loaded machine.
constexpr auto notice_bound = 1s;

class DeviceDeath : public QpFixture {
  protected:
    // An RC QP in RTS on the fixture's CQ (sends and receives), 8 slots each way.
    void SetUp() override {
        QpFixture::SetUp();
        if (HasFatalFailure()) {
            return;
        }
        qp = make_qp(8, 8, 1, 0);
        ASSERT_NE(qp, nullptr);
        for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
            ASSERT_EQ(move_to(qp, s), 0);
        }
        rec = &fake->qp(qp->handle);
    }
    void TearDown() override {
        if (qp != nullptr) {
            EXPECT_EQ(destroy_qp(qp), 0) << "destroy succeeds on a dead device";
        }
        QpFixture::TearDown();
    }

    int post_sends(std::initializer_list<std::pair<uint64_t, ibv_wr_opcode>> wrs,
                   bool signaled = true) {
        for (const auto& [id, op] : wrs) {
            ibv_send_wr w{};
            w.wr_id = id;
            w.opcode = op;
            w.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
            w.wr.rdma.remote_addr = 0x1000;
            w.wr.rdma.rkey = 1;
            ibv_send_wr* bad = nullptr;
            if (const int e = ibv_post_send(qp, &w, &bad); e != 0) {
                return e;
            }
        }
        return 0;
    }
    int post_recvs(std::initializer_list<uint64_t> ids) {
        for (uint64_t id : ids) {
            ibv_recv_wr w{};
            w.wr_id = id;
            ibv_recv_wr* bad = nullptr;
            if (const int e = ibv_post_recv(qp, &w, &bad); e != 0) {
                return e;
            }
        }
        return 0;
    }
    // What jakirod does for a finished WR: retire its slot, publish its completion.
    void complete_send(uint32_t retire_upto, uint64_t wr_id) {
        proto::retire_slots(rec->ring->sq_consumer, retire_upto);
        proto::cq_ring_header& r = *to_cq(cq)->ring;
        const uint32_t p = r.producer;
        proto::cqe& e = proto::cq_slots(&r)[p & (to_cq(cq)->capacity - 1)];
        e = proto::cqe{};
        e.wr_id = wr_id;
        e.status = IBV_WC_SUCCESS;
        e.opcode = IBV_WC_RDMA_WRITE;
        e.qp_num = qp->qp_num;
        proto::publish_producer(r, p + 1);
    }
    // Polls (`batch` at a time) until the shim has flushed and returns nothing more; every
    // completion seen, in order. Fails if it takes longer than notice_bound.
    std::vector<ibv_wc> drain(int batch) {
        std::vector<ibv_wc> out;
        const auto deadline = std::chrono::steady_clock::now() + notice_bound;
        int empty_after_flush = 0;
        while (std::chrono::steady_clock::now() < deadline && empty_after_flush < 100) {
            ibv_wc wc[16];
            const int n = ibv_poll_cq(cq, batch, wc);
            EXPECT_GE(n, 0);
            if (n <= 0) {
                empty_after_flush += ctx_dead() ? 1 : 0;
                continue;
            }
            EXPECT_LE(n, batch);
            out.insert(out.end(), wc, wc + n);
        }
        EXPECT_EQ(empty_after_flush, 100) << "the shim did not notice within the bound";
        return out;
    }
    bool ctx_dead() { return to_context(ctx)->death->dead(); }

    ibv_qp* qp = nullptr;
    fake_jakirod::qp_record* rec = nullptr;
};

struct flushed {
    uint64_t wr_id;
    ibv_wc_opcode opcode;
    bool operator==(const flushed&) const = default;
};

std::vector<flushed> flushes(const std::vector<ibv_wc>& wcs, uint32_t qp_num) {
    std::vector<flushed> out;
    for (const ibv_wc& w : wcs) {
        if (w.status != IBV_WC_WR_FLUSH_ERR) {
            continue;
        }
        EXPECT_EQ(w.qp_num, qp_num);
        EXPECT_EQ(w.vendor_err, vendor_err_jakirod_gone);
        EXPECT_EQ(w.byte_len, 0u);
        EXPECT_EQ(w.wc_flags, 0u);
        out.push_back({w.wr_id, w.opcode});
    }
    return out;
}

TEST_F(DeviceDeath, PollCqFlushesExactlyTheOutstandingWrsAfterPublishedOnesThenNothing) {
    ASSERT_EQ(post_sends({{10, IBV_WR_RDMA_WRITE}, {11, IBV_WR_RDMA_WRITE}}), 0);
    ASSERT_EQ(post_sends({{12, IBV_WR_SEND}, {13, IBV_WR_RDMA_READ}}, /*signaled=*/false), 0);
    ASSERT_EQ(post_sends({{14, IBV_WR_SEND_WITH_IMM}}), 0);
    ASSERT_EQ(post_recvs({20, 21, 22}), 0);
    // jakirod finished 10 and 11; 11's completion is published but not polled yet; one
    // receive slot was consumed and its completion polled (not outstanding any more).
    complete_send(1, 10);
    ibv_wc first{};
    ASSERT_EQ(ibv_poll_cq(cq, 1, &first), 1);
    EXPECT_EQ(first.wr_id, 10u);
    complete_send(2, 11);
    proto::retire_slots(rec->ring->rq_consumer, 1);
    // A half-written completion it never published must not appear.
    proto::cq_slots(to_cq(cq)->ring)[to_cq(cq)->ring->producer & 63].wr_id = 0xbad;

    fake->stop();
    const std::vector<ibv_wc> wcs = drain(16);
    ASSERT_FALSE(wcs.empty());
    EXPECT_EQ(wcs[0].wr_id, 11u) << "what jakirod published comes first";
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    const std::vector<flushed> expected = {{12, IBV_WC_SEND},
                                           {13, IBV_WC_RDMA_READ},
                                           {14, IBV_WC_SEND},
                                           {21, IBV_WC_RECV},
                                           {22, IBV_WC_RECV}};
    EXPECT_EQ(flushes(wcs, qp->qp_num), expected) << "signaled or not, each exactly once";
    EXPECT_EQ(wcs.size(), 1 + expected.size());
    ibv_wc more[4];
    EXPECT_EQ(ibv_poll_cq(cq, 4, more), 0) << "then nothing, for good";
}

TEST_F(DeviceDeath, ExtendedCqSessionsFlushTheOutstandingWrsTooThenStayEmpty) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 16;
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    ibv_cq_ex* cx = ibv_create_cq_ex(ctx, &attr);
    ASSERT_NE(cx, nullptr) << std::strerror(errno);
    ibv_qp_init_attr qa = rc_attr(8, 8, 1, 0);
    qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cx);
    ibv_qp* q2 = create_qp(pd, &qa);
    ASSERT_NE(q2, nullptr);
    for (ibv_qp_state st : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
        ASSERT_EQ(move_to(q2, st), 0);
    }
    for (uint64_t id : {30, 31}) {
        ibv_send_wr w{};
        w.wr_id = id;
        w.opcode = IBV_WR_SEND;
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(q2, &w, &bad), 0);
    }
    fake->stop();
    std::vector<std::pair<uint64_t, uint32_t>> seen;  // wr_id, vendor_err
    const auto deadline = std::chrono::steady_clock::now() + notice_bound;
    while (seen.size() < 2 && std::chrono::steady_clock::now() < deadline) {
        ibv_poll_cq_attr pa{};
        if (ibv_start_poll(cx, &pa) != 0) {
            continue;
        }
        do {
            EXPECT_EQ(cx->status, IBV_WC_WR_FLUSH_ERR);
            seen.emplace_back(cx->wr_id, ibv_wc_read_vendor_err(cx));
        } while (ibv_next_poll(cx) == 0);
        ibv_end_poll(cx);
    }
    const std::vector<std::pair<uint64_t, uint32_t>> expected = {{30, vendor_err_jakirod_gone},
                                                                 {31, vendor_err_jakirod_gone}};
    EXPECT_EQ(seen, expected);
    ibv_poll_cq_attr pa{};
    EXPECT_EQ(ibv_start_poll(cx, &pa), ENOENT) << "then nothing, for good";
    EXPECT_EQ(destroy_qp(q2), 0);
    EXPECT_EQ(destroy_cq(ibv_cq_ex_to_cq(cx)), 0);
}

TEST_F(DeviceDeath, FlushHandsOutOneCompletionPerPollWhenAskedForOne) {
    ASSERT_EQ(post_sends({{1, IBV_WR_SEND}, {2, IBV_WR_SEND}, {3, IBV_WR_SEND}}), 0);
    ASSERT_EQ(post_recvs({4, 5}), 0);
    fake->stop();
    const std::vector<flushed> expected = {
        {1, IBV_WC_SEND}, {2, IBV_WC_SEND}, {3, IBV_WC_SEND}, {4, IBV_WC_RECV}, {5, IBV_WC_RECV}};
    EXPECT_EQ(flushes(drain(1), qp->qp_num), expected);
}

TEST_F(DeviceDeath, FlushCoversEveryQpOfTheCqAndOnlyItsOwnQueues) {
    // A second CQ takes the receives of a second QP; the fixture's CQ its sends.
    ibv_cq* other = create_cq(ctx, 16, nullptr, nullptr, 0);
    ASSERT_NE(other, nullptr);
    ibv_qp_init_attr a = rc_attr(4, 4, 1, 0);
    a.recv_cq = other;
    ibv_qp* qp2 = create_qp(pd, &a);
    ASSERT_NE(qp2, nullptr);
    for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
        ASSERT_EQ(move_to(qp2, s), 0);
    }
    ibv_send_wr w{};
    w.wr_id = 200;
    w.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp2, &w, &bad), 0);
    ibv_recv_wr r{};
    r.wr_id = 300;
    ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp2, &r, &rbad), 0);
    ASSERT_EQ(post_sends({{100, IBV_WR_SEND}}), 0);

    fake->stop();
    std::vector<uint64_t> ids;
    for (const ibv_wc& c : drain(16)) {
        EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
        ids.push_back(c.wr_id);
    }
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, (std::vector<uint64_t>{100, 200}));
    ibv_wc c[4];
    ASSERT_EQ(ibv_poll_cq(other, 4, c), 1);
    EXPECT_EQ(c[0].wr_id, 300u);
    EXPECT_EQ(c[0].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(c[0].qp_num, qp2->qp_num);
    EXPECT_EQ(ibv_poll_cq(other, 4, c), 0);
    EXPECT_EQ(destroy_qp(qp2), 0);
    EXPECT_EQ(destroy_cq(other), 0);
}

TEST_F(DeviceDeath, NonsenseRetiredIndexFlushesEverySlotWritten) {
    ASSERT_EQ(post_sends({{1, IBV_WR_SEND}, {2, IBV_WR_SEND}}), 0);
    proto::retire_slots(rec->ring->sq_consumer, 1000);  // a scribbled index
    fake->stop();
    const std::vector<flushed> expected = {{1, IBV_WC_SEND}, {2, IBV_WC_SEND}};
    EXPECT_EQ(flushes(drain(16), qp->qp_num), expected);
}

TEST_F(DeviceDeath, PostFailsWithEioOnceJakirodIsGone) {
    ASSERT_EQ(post_sends({{1, IBV_WR_SEND}}), 0);
    fake->stop();
    std::this_thread::sleep_for(20ms);  // past the check interval (and a coarse clock tick)
    ibv_send_wr w[2] = {};
    w[0].wr_id = 2;
    w[0].opcode = IBV_WR_SEND;
    w[0].next = &w[1];
    w[1].wr_id = 3;
    w[1].opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp, w, &bad), EIO);
    EXPECT_EQ(bad, &w[0]) << "nothing of the call was posted";
    ibv_recv_wr r{};
    ibv_recv_wr* rbad = nullptr;
    EXPECT_EQ(ibv_post_recv(qp, &r, &rbad), EIO);
    EXPECT_EQ(rbad, &r);
    EXPECT_EQ(proto::load_posted_acquire(rec->ring->sq_producer), 1u);
    const std::vector<flushed> expected = {{1, IBV_WC_SEND}};
    EXPECT_EQ(flushes(drain(16), qp->qp_num), expected) << "only what was posted before";
}

TEST_F(DeviceDeath, LiveJakirodIsNeverTakenForDead) {
    ASSERT_EQ(post_sends({{1, IBV_WR_SEND}}), 0);
    const auto until = std::chrono::steady_clock::now() + 30ms;
    ibv_wc wc;
    while (std::chrono::steady_clock::now() < until) {
        ASSERT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
    }
    EXPECT_FALSE(ctx_dead());
    EXPECT_EQ(post_sends({{2, IBV_WR_SEND}}), 0);
}

TEST_F(DeviceDeath, BlockedGetCqEventReturnsQueuedEventsThenEioWithinTheBound) {
    ibv_comp_channel* ch = create_comp_channel(ctx);
    ASSERT_NE(ch, nullptr);
    ibv_cq* ecq = create_cq(ctx, 16, this, ch, 0);
    ASSERT_NE(ecq, nullptr);
    // One event already queued (jakirod's end is the shim's peer_fd copy here).
    auto ev = proto::make_message<proto::comp_event_message>(
        static_cast<uint16_t>(proto::opcode::comp_event), 0);
    ev.cq_handle = ecq->handle;
    ASSERT_EQ(send(to_channel(ch)->peer_fd, &ev, sizeof(ev), 0), ssize_t{sizeof(ev)});
    ibv_cq* got = nullptr;
    void* cq_ctx = nullptr;
    ASSERT_EQ(get_cq_event(ch, &got, &cq_ctx), 0);
    EXPECT_EQ(got, ecq);
    ack_cq_events(ecq, 1);
    ASSERT_EQ(send(to_channel(ch)->peer_fd, &ev, sizeof(ev), 0), ssize_t{sizeof(ev)});

    auto waiter = std::async(std::launch::async, [&] {
        ibv_cq* c = nullptr;
        void* x = nullptr;
        std::vector<int> results;
        for (int i = 0; i < 2; ++i) {
            const int r = get_cq_event(ch, &c, &x);
            results.push_back(r == 0 ? 0 : errno);
            if (r == 0) {
                ack_cq_events(c, 1);
            }
        }
        return results;
    });
    std::this_thread::sleep_for(50ms);  // the second call now waits
    fake->stop();
    ASSERT_EQ(waiter.wait_for(notice_bound), std::future_status::ready)
        << "ibv_get_cq_event still waits on a dead jakirod";
    EXPECT_EQ(waiter.get(), (std::vector<int>{0, EIO}));
    // The channel's descriptor reads as ready too, for a program waiting in its own poll().
    pollfd p{ch->fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 1);
    EXPECT_EQ(get_cq_event(ch, &got, &cq_ctx), -1);
    EXPECT_EQ(errno, EIO);
    EXPECT_EQ(destroy_cq(ecq), 0);
    EXPECT_EQ(destroy_comp_channel(ch), 0);
}

TEST_F(DeviceDeath, NonBlockingChannelSaysEagainWhileAliveAndEioOnceDead) {
    ibv_comp_channel* ch = create_comp_channel(ctx);
    ASSERT_NE(ch, nullptr);
    ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
    ibv_cq* got = nullptr;
    void* cq_ctx = nullptr;
    EXPECT_EQ(get_cq_event(ch, &got, &cq_ctx), -1);
    EXPECT_EQ(errno, EAGAIN);
    fake->stop();
    EXPECT_EQ(get_cq_event(ch, &got, &cq_ctx), -1);
    EXPECT_EQ(errno, EIO);
    EXPECT_EQ(destroy_comp_channel(ch), 0);
}

TEST_F(DeviceDeath, BlockedGetAsyncEventGetsDeviceFatalOnceThenEio) {
    auto waiter = std::async(std::launch::async, [&] {
        ibv_async_event e{};
        const int r = get_async_event(ctx, &e);
        return r == 0 ? int{e.event_type} : -errno;
    });
    std::this_thread::sleep_for(50ms);
    fake->stop();
    ASSERT_EQ(waiter.wait_for(notice_bound), std::future_status::ready);
    EXPECT_EQ(waiter.get(), int{IBV_EVENT_DEVICE_FATAL});
    ibv_async_event e{};
    EXPECT_EQ(get_async_event(ctx, &e), -1);
    EXPECT_EQ(errno, EIO);
    EXPECT_EQ(get_async_event(ctx, &e), -1) << "and stays so";
    EXPECT_EQ(errno, EIO);
    EXPECT_TRUE(ctx_dead());
}

TEST_F(DeviceDeath, JakirodsOwnDeviceFatalIsReportedOnceNotTwice) {
    fake->send_async(proto::event_type::device_fatal, 0);
    fake->stop();
    ibv_async_event e{};
    ASSERT_EQ(get_async_event(ctx, &e), 0);
    EXPECT_EQ(e.event_type, IBV_EVENT_DEVICE_FATAL);
    ack_async_event(&e);
    EXPECT_EQ(get_async_event(ctx, &e), -1);
    EXPECT_EQ(errno, EIO);
}

TEST_F(DeviceDeath, DeathNoticedByPollingQueuesDeviceFatal) {
    ASSERT_EQ(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK), 0);
    ibv_async_event e{};
    EXPECT_EQ(get_async_event(ctx, &e), -1);
    EXPECT_EQ(errno, EAGAIN) << "alive, nothing to report";
    fake->stop();
    drain(4);
    pollfd p{ctx->async_fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 1) << "the async fd is readable for a program's own poll()";
    ASSERT_EQ(get_async_event(ctx, &e), 0);
    EXPECT_EQ(e.event_type, IBV_EVENT_DEVICE_FATAL);
    EXPECT_EQ(get_async_event(ctx, &e), -1);
    EXPECT_EQ(errno, EIO);
}

TEST_F(DeviceDeath, ControlVerbsFailWithEioAndDestroyVerbsSucceed) {
    fake->stop();
    EXPECT_EQ(alloc_pd(ctx), nullptr);
    EXPECT_EQ(errno, EIO);
    ibv_device_attr attr;
    EXPECT_EQ(query_device(ctx, &attr), EIO);
    EXPECT_EQ(create_cq(ctx, 4, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EIO);
    ibv_qp_attr qa{};
    qa.qp_state = IBV_QPS_ERR;
    EXPECT_EQ(modify_qp(qp, &qa, IBV_QP_STATE), EIO);
    // TearDown: destroy_qp, destroy_cq, dealloc_pd, close_device all succeed.
}

}  // namespace
}  // namespace jakiro::verbs_shim::testing
