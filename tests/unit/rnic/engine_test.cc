// The engine (rnic/engine.cc): the RCFT check on receive, control calls through the mailbox,
// the worker's time shared out per vNIC, counters and reports, the security groups on every
// address vector and a policy change that refuses a connected peer.

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

// jakirod removes a vNIC while its worker is stalled for longer than a verbs call waits: the
// vNIC's QPs leave the engine only when the worker comes back, after the vNIC's objects went.
// A packet the worker meets first (it receives before it runs queued calls) still reaches such
// a QP: it must find no key in the vNIC's MR table (kept alive by the QP, emptied), never a
// freed table, and write nothing into the tenant's memory.
TEST_F(QueuePairTest, AVnicRemovedWhileItsWorkerIsStalledLeavesItsQpsNoFreedTable) {
    connect_both();
    fill(a, 0, 8192, 5);
    std::memset(b.region, 0, 8192);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 8192, a.mr, b.iova(0), b.mr));
    now += 10'000;
    eng.poll(wire, now);  // a's WRITE leaves; b's side has not received it
    ASSERT_FALSE(wire.frames.empty());
    // The worker stalls: calls wait 20 ms for it, then give up (removals stay queued).
    eng.set_call_timeout(std::chrono::milliseconds(20));
    eng.attach();
    b.res->release_client(b.client);  // the channel server drops the vNIC's clients...
    b.res.reset();                    // ...and its objects go
    ASSERT_NE(eng.find(1, b.qp), nullptr) << "the worker has not run the removal yet";
    // The worker comes back and receives before it polls.
    for (const auto& f : wire.frames) {
        eng.receive(1, f.bytes.data() + 14, static_cast<uint32_t>(f.bytes.size() - 14), wire, now);
    }
    wire.frames.clear();
    EXPECT_EQ(std::count(b.region, b.region + 8192, std::byte{0}), 8192)
        << "nothing lands in the memory of a vNIC that is gone";
    eng.poll(wire, now);  // the queued removal runs
    EXPECT_EQ(eng.find(1, b.qp), nullptr);
    eng.detach();
}

TEST_F(QueuePairTest, TheEnginesSentCounterCountsEveryPacketOnTheWireAcksIncluded) {
    connect_both();
    const uint64_t before = eng.counters().sent.read();
    const uint64_t wire_before = wire.sent;
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 20000, a.mr, b.iova(0), b.mr));
    run(300);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    // The WRITE's packets come from polls, its ACKs from receiving them: one counter for both.
    EXPECT_GT(wire.sent - wire_before, 20000u / 4096);
    EXPECT_EQ(eng.counters().sent.read() - before, wire.sent - wire_before);
}

TEST_F(QueuePairTest, PacketsFromAnyoneButTheConnectedPeerAreDroppedAndCounted) {
    connect_both();
    b.post_recv(1, 0, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 64, a.mr));
    eng.poll(wire, now);
    ASSERT_EQ(wire.frames.size(), 1u);
    auto forged = wire.frames.front();
    wire.frames.clear();
    // The same packet from another address of the VPC: RCFT mismatch.
    uint8_t* ip = forged.bytes.data() + 14;
    const uint32_t stranger = htonl(ip_stranger);
    std::memcpy(ip + 12, &stranger, 4);
    uint16_t sum = 0;
    std::memcpy(ip + 10, &sum, 2);
    store_icrc(ip + forged.bytes.size() - 14 - 4, *compute_icrc(ip, forged.bytes.size() - 14 - 4));
    eng.receive(1, ip, static_cast<uint32_t>(forged.bytes.size() - 14), wire, now);
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::not_connected)].read(), 1u);
    // To a QP number that does not exist.
    ip[20 + 8 + 7] ^= 0x7F;  // BTH DestQP, low byte
    eng.receive(1, ip, static_cast<uint32_t>(forged.bytes.size() - 14), wire, now);
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::bad_icrc)].read(), 1u)
        << "the ICRC is checked before anything is believed";
    store_icrc(ip + forged.bytes.size() - 14 - 4, *compute_icrc(ip, forged.bytes.size() - 14 - 4));
    eng.receive(1, ip, static_cast<uint32_t>(forged.bytes.size() - 14), wire, now);
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::unknown_qp)].read(), 1u);
    proto::cqe c{};
    EXPECT_FALSE(b.poll_recv(c)) << "nothing was delivered";
}

TEST(EngineCall, ACallTheWorkerNeverStartedTimesOutAndNeverRuns) {
    engine e{1, 16};
    e.attach();  // a worker "exists" but does not poll during the wait
    e.set_call_timeout(std::chrono::milliseconds(20));
    bool ran = false;
    EXPECT_EQ(e.call([&] {
        ran = true;
        return 0;
    }),
              ETIMEDOUT);
    test_wire w;
    e.poll(w, 0);  // the worker comes back
    EXPECT_FALSE(ran) << "cancelled: it must not run after its caller gave up";
    e.detach();
    EXPECT_FALSE(ran);
}

TEST(EngineCall, ARemovalThatTimesOutStillRunsWhenTheWorkerComes) {
    engine e{1, 16};
    e.attach();
    e.set_call_timeout(std::chrono::milliseconds(20));
    bool ran = false;
    EXPECT_EQ(e.call(
                  [&] {
                      ran = true;
                      return 0;
                  },
                  engine::on_timeout::run_later),
              ETIMEDOUT);
    test_wire w;
    e.poll(w, 0);
    EXPECT_TRUE(ran);
    e.detach();
}

TEST(EngineCall, ACallTheWorkerStartedBeforeTheTimeoutReturnsItsResult) {
    engine e{1, 16};
    e.attach();
    e.set_call_timeout(std::chrono::milliseconds(200));
    std::atomic<bool> stop{false}, polling{false};
    std::thread worker([&] {
        test_wire w;
        while (!stop.load()) {
            e.poll(w, 0);
            polling = true;
        }
    });
    while (!polling.load()) {
        std::this_thread::yield();
    }
    const int result = e.call([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past the timeout
        return 42;
    });
    EXPECT_EQ(result, 42) << "it ran: its caller must see what it did";
    stop = true;
    worker.join();
    e.detach();
}

TEST_F(QueuePairTest, ACreateQpThatTimesOutAddsNoQpToTheEngineOrTheQuota) {
    eng.attach();  // a worker that does not run during the call
    eng.set_call_timeout(std::chrono::milliseconds(20));
    const auto before = a.res->count();
    verbs::qp_created q;
    EXPECT_EQ(a.res->create_qp(a.client, qp_request(a), q), ETIMEDOUT);
    eng.poll(wire, now);  // the worker comes back
    EXPECT_EQ(eng.report().size(), 2u) << "only SetUp's QPs run";
    EXPECT_EQ(a.res->count().qps, before.qps);
    EXPECT_EQ(a.res->count().wqes, before.wqes);
    eng.detach();
    // And the slot is free again: with a live worker the same create succeeds.
    ASSERT_EQ(a.res->create_qp(a.client, qp_request(a), q), 0);
    EXPECT_EQ(eng.report().size(), 3u);
    close(q.ring_fd);
    close(q.doorbell_fd);
}

// The shaper asks, for every shaped vNIC, how much its QPs could send in one poll: only that
// vNIC's QPs are looked at, another vNIC's busy QP does not make this one look backlogged, and
// the room covers a full poll of path-MTU packets (a smaller one would hold RDMA below its
// share, a larger one lets a grant outrun the poll).
TEST_F(QueuePairTest, AVnicHasSendRoomOnlyWhenItsOwnQpsHaveWork) {
    connect_both();
    EXPECT_EQ(eng.vnic_send_room(0), 0u);
    EXPECT_EQ(eng.vnic_send_room(1), 0u);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 8, a.mr, b.iova(0), b.mr));
    const uint64_t room = eng.vnic_send_room(0);
    const uint64_t packets_per_poll = 8 * 32;
    const uint64_t mtu = eng.find(0, a.qp)->path_mtu_bytes();
    EXPECT_GE(room, packets_per_poll * mtu);
    EXPECT_LE(room, packets_per_poll * (mtu + 200));
    EXPECT_EQ(eng.vnic_send_room(1), 0u);
    EXPECT_EQ(eng.vnic_send_room(7), 0u) << "no such vNIC";
}

TEST_F(QueuePairTest, ADestroyedQpKeepsCountingInItsVnicsRetiredTotals) {
    // /metrics' per-vNIC counters are the live QPs plus the retired rows: a QP that lived
    // between two scrapes (a short ib_write_bw) must still be in them, and only once.
    connect_both();
    b.post_recv(1, 0, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    run(5);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    std::vector<qp_report> retired;
    uint64_t received = 0;
    for (const auto& r : eng.report(&retired)) {
        received += r.vnic == 1 ? r.packets_received : 0;
    }
    ASSERT_GT(received, 0u);
    EXPECT_TRUE(retired.empty()) << "nothing destroyed yet";
    ASSERT_EQ(b.res->destroy_qp(b.client, b.qp), 0);
    for (const auto& r : eng.report(&retired)) {
        EXPECT_NE(r.vnic, 1) << "vNIC 1's only QP is gone from the live rows";
    }
    ASSERT_EQ(retired.size(), 1u);
    EXPECT_EQ(retired[0].vnic, 1);
    EXPECT_EQ(retired[0].packets_received, received);
    EXPECT_EQ(retired[0].completions, 1u) << "the receive";
    // The vNIC goes too (vnic_resources' destructor): a vNIC given its slot later starts at 0.
    eng.forget_vnic(1);
    eng.report(&retired);
    EXPECT_TRUE(retired.empty());
}

// A tenant cannot buy more of the worker with more QPs: vNIC 0 drives four QPs, vNIC 2 one,
// each QP with a 512-packet WRITE; one poll sends as many packets for each vNIC.
TEST_F(QueuePairTest, ATenantWithManyQpsGetsOneVnicsTurnPerPoll) {
    constexpr uint32_t ip_c = 0xC6130103;
    constexpr uint32_t message = 512 * 1024;  // 512 packets at path MTU 1024
    std::vector<std::unique_ptr<side>> hogs, peers;
    for (int i = 0; i < 3; ++i) {
        hogs.push_back(std::make_unique<side>());
        make_side(*hogs.back(), 0, ip_a, 300 + i);
        peers.push_back(std::make_unique<side>());
        make_side(*peers.back(), 1, ip_b, 400 + i);
    }
    side fair, fair_peer;
    make_side(fair, 2, ip_c, 500);
    make_side(fair_peer, 1, ip_b, 501);
    connect_both();
    for (std::size_t i = 0; i < hogs.size(); ++i) {
        connect(*hogs[i], *peers[i], ip_b);
        connect(*peers[i], *hogs[i], ip_a);
    }
    connect(fair, fair_peer, ip_b);
    connect(fair_peer, fair, ip_c);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), message, a.mr, b.iova(0), b.mr));
    for (std::size_t i = 0; i < hogs.size(); ++i) {
        hogs[i]->post_send(wqe(1, IBV_WR_RDMA_WRITE, hogs[i]->iova(0), message, hogs[i]->mr,
                               peers[i]->iova(0), peers[i]->mr));
    }
    fair.post_send(
        wqe(1, IBV_WR_RDMA_WRITE, fair.iova(0), message, fair.mr, fair_peer.iova(0), fair_peer.mr));
    eng.poll(wire, now += 10'000);
    std::map<uint16_t, std::size_t> by_vnic;
    for (const auto& f : wire.frames) {
        ++by_vnic[f.from];
    }
    EXPECT_GT(by_vnic[2], 0u);
    EXPECT_EQ(by_vnic[0], by_vnic[2]) << "four QPs send what one QP of another vNIC sends";
    EXPECT_LE(by_vnic[0], engine::vnic_units_per_poll) << "at most a vNIC's units per poll";
    wire.frames.clear();
    hogs.clear();
    peers.clear();
}

TEST_F(QueuePairTest, EveryAddressVectorAModifySetsPassesTheSecurityGroups) {
    denied = {{0, htonl(ip_stranger)}};
    connect_both();  // RTR towards an allowed peer
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_SQD;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    // The drained QP is where a path may change: to a denied peer it may not.
    attr = {};
    attr.qp_state = IBV_QPS_SQD;
    attr.ah_attr = av_to(ip_stranger);
    EXPECT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_AV), EACCES) << "SQD -> SQD, new AV";
    attr = {};
    attr.ah_attr = av_to(ip_stranger);
    EXPECT_EQ(modify(a, attr, IBV_QP_AV), EACCES) << "the same without naming the state";
    attr = {};
    attr.qp_state = IBV_QPS_SQD;
    attr.alt_ah_attr = av_to(ip_stranger);
    attr.alt_port_num = 1;
    EXPECT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_ALT_PATH), EACCES) << "nor the alternate path";
    // The QP is unchanged: still connected to b.
    proto::query_qp_reply q{};
    ASSERT_EQ(a.res->query_qp(a.client, a.qp, q), 0);
    ibv_qp_attr now_attr{};
    proto::from_wire(q.attr, now_attr);
    uint32_t peer = 0;
    std::memcpy(&peer, now_attr.ah_attr.grh.dgid.raw + 12, 4);
    EXPECT_EQ(peer, htonl(ip_b));
    EXPECT_EQ(now_attr.alt_port_num, 0);
    EXPECT_EQ(report_of(eng.report(), a)->remote_ip_be, htonl(ip_b));

    // Control: a new AV towards an allowed peer is taken, and the QP works on.
    attr = {};
    attr.qp_state = IBV_QPS_SQD;
    attr.ah_attr = av_to(ip_b);
    EXPECT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_AV), 0);
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE), 0);
    fill(a, 0, 4096, 9);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 4096, a.mr, b.iova(0), b.mr));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(a, 0, b, 0, 4096));

    // And a fresh QP cannot reach RTR towards the denied peer either.
    TearDownSides();
    make_side(a, 0, ip_a, 101);
    make_side(b, 1, ip_b, 202);
    attr = {};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = qp_access;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = b.qp;
    attr.max_dest_rd_atomic = 1;
    attr.ah_attr = av_to(ip_stranger);
    EXPECT_EQ(modify(a, attr,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              EACCES);
}

TEST_F(QueuePairTest, APolicyChangeThatRefusesThePeerErrsTheQpAtTheNextPoll) {
    eng.use_policy(1);
    connect_both();
    run(1);
    EXPECT_EQ(wire.connection_checks, 2u) << "each connected QP checked once under policy 1";
    for (int i = 0; i < 32; ++i) {
        a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 65536, a.mr, b.iova(0), b.mr));
    }
    std::vector<uint8_t> late_from_b;  // an ACK of b's, replayed after the change
    run(3, 10'000, [&](const test_wire::frame& f) {
        if (f.from == 1) {
            late_from_b = f.bytes;
        }
        return true;
    });
    // Control: a change that keeps the rule leaves the connection alone.
    eng.use_policy(2);
    run(1);
    EXPECT_EQ(wire.connection_checks, 4u);
    EXPECT_EQ(report_of(eng.report(), a)->state, IBV_QPS_RTS);
    EXPECT_EQ(eng.counters().qps_revoked.read(), 0u);
    // The rule that admitted a -> b goes: a's very next poll puts it in ERR.
    wire.refused = {{0, htonl(ip_b)}};
    eng.use_policy(3);
    events.clear();
    wire.frames.clear();
    const uint64_t sent_before = wire.sent;
    eng.poll(wire, now += 10'000);
    EXPECT_EQ(report_of(eng.report(), a)->state, IBV_QPS_ERR);
    EXPECT_EQ(report_of(eng.report(), b)->state, IBV_QPS_RTS) << "b's groups still allow a";
    EXPECT_EQ(eng.counters().qps_revoked.read(), 1u);
    EXPECT_NE(
        std::find(events.begin(), events.end(), static_cast<uint32_t>(proto::event_type::qp_fatal)),
        events.end());
    for (const auto& f : wire.frames) {
        EXPECT_NE(f.from, 0) << "a sends nothing after the change";
    }
    (void)sent_before;
    // Every outstanding WR of a is flushed.
    proto::cqe c{};
    int completed = 0, flushed = 0;
    while (a.poll_send(c)) {
        ++completed;
        flushed += c.status == IBV_WC_WR_FLUSH_ERR ? 1 : 0;
    }
    EXPECT_EQ(completed, 32);
    EXPECT_GT(flushed, 0);
    // What b still sends to a is dropped and counted.
    ASSERT_FALSE(late_from_b.empty());
    eng.receive(0, late_from_b.data() + 14, static_cast<uint32_t>(late_from_b.size() - 14), wire,
                now);
    EXPECT_EQ(drops_of(eng, engine_drop::revoked), 1u);
}

// A noisy neighbour's QPs on vNIC 0, each connected to a peer on vNIC 1 and holding a type-2
// window it may bind and invalidate: work that retires at once and never reaches the wire.
struct silent_hog {
    std::unique_ptr<side> qp, peer;
    uint32_t bind_mr = 0, mw = 0;
    uint32_t rkey = 0;  // the window's last key
};

class NoisyNeighbourTest : public QueuePairMwTest {
  protected:
    static constexpr uint32_t ip_c = 0xC6130103;
    static constexpr unsigned hogs = 8;

    void SetUp() override {
        QueuePairMwTest::SetUp();
        make_side(victim, 2, ip_c, 900);
        make_side(victim_peer, 1, ip_b, 901);
        connect(victim, victim_peer, ip_b);
        connect(victim_peer, victim, ip_c);
        for (unsigned i = 0; i < hogs; ++i) {
            silent_hog h{std::make_unique<side>(), std::make_unique<side>()};
            // One tenant's programs: the hogs share vNIC 0's resources and doorbell.
            make_side(*h.qp, 0, ip_a, 600 + i, hogs, hog.empty() ? nullptr : hog.front().qp.get());
            make_side(*h.peer, 1, ip_b, 700 + i);
            connect(*h.qp, *h.peer, ip_b);
            connect(*h.peer, *h.qp, ip_a);
            auto mr = proto::make_message<proto::reg_mr_request>(
                static_cast<uint16_t>(proto::opcode::reg_mr), 1);
            mr.pd_handle = h.qp->pd;
            mr.access = proto::mr_access_all | proto::access_mw_bind;
            mr.addr = region_iova;
            mr.iova = region_iova;
            mr.length = region_bytes;
            ASSERT_EQ(h.qp->res->reg_mr(h.qp->client, mr, h.qp->region_fd, h.bind_mr), 0);
            ASSERT_EQ(h.qp->res->alloc_mw(h.qp->client, h.qp->pd, IBV_MW_TYPE_2, h.mw), 0);
            hog.push_back(std::move(h));
        }
    }

    // Fills every hog's free send-queue slots with unsignaled binds and invalidations of its
    // window, each pair succeeding: nothing to send, nothing to complete.
    void fill_with_silent_work() {
        for (auto& h : hog) {
            if (h.rkey == 0) {
                h.rkey = h.mw;
            }
            const uint32_t capacity = h.qp->ring->sq_capacity;
            while (h.qp->sq_posted + 2 - proto::load_posted_acquire(h.qp->ring->sq_consumer) <=
                   capacity) {
                h.rkey = next_key(h.rkey);
                auto bind =
                    bind_wqe(1, h.mw, h.rkey, h.bind_mr, h.qp->iova(0), 4096, window_rights);
                bind.send_flags = 0;
                auto inv = local_inv_wqe(2, h.rkey);
                inv.send_flags = 0;
                h.qp->post_send(bind);
                h.qp->post_send(inv);
            }
        }
    }

    uint32_t hogs_retired() const {
        uint32_t retired = 0;
        for (const auto& h : hog) {
            retired += proto::load_posted_acquire(h.qp->ring->sq_consumer);
        }
        return retired;
    }

    // Packets the victim's 64-packet WRITE puts on the wire in one poll.
    std::size_t victim_packets_in_one_poll() {
        wire.frames.clear();
        victim.post_send(wqe(1, IBV_WR_RDMA_WRITE, victim.iova(0), 64 * 1024, victim.mr,
                             victim_peer.iova(0), victim_peer.mr));
        eng.poll(wire, now += 10'000);
        std::size_t packets = 0;
        for (const auto& f : wire.frames) {
            packets += f.from == 2 ? 1 : 0;
        }
        wire.frames.clear();
        return packets;
    }

    side victim, victim_peer;
    std::vector<silent_hog> hog;
};

// WQEs that send nothing (memory-window binds and invalidations) cost the worker as much as
// packets do: a tenant with many QPs full of them spends its vNIC's units per poll and no
// more, and another tenant's QP sends in that poll what it sends alone.
TEST_F(NoisyNeighbourTest, WqesThatSendNothingSpendTheirVnicsUnitsAndNoMore) {
    const std::size_t alone = victim_packets_in_one_poll();  // the control
    ASSERT_GT(alone, 0u);
    fill_with_silent_work();
    const uint32_t before = hogs_retired();
    const std::size_t loaded = victim_packets_in_one_poll();
    const uint32_t retired = hogs_retired() - before;
    EXPECT_GT(retired, 0u) << "the hogs' work is done, only bounded";
    EXPECT_LE(retired, engine::vnic_units_per_poll) << "one vNIC's units per poll, in WQEs";
    EXPECT_EQ(loaded, alone);
    // What the operator sees: the hogs' vNIC spent its units and met its bound.
    std::map<uint16_t, std::pair<uint64_t, uint64_t>> units;  // vNIC: spent, out of units
    for (const qp_report& r : eng.report()) {
        units[r.vnic].first += r.work_units;
        units[r.vnic].second += r.out_of_units;
    }
    EXPECT_GE(units[0].first, retired);
    EXPECT_GT(units[0].second, 0u);
    EXPECT_GT(units[2].first, 0u);
    // Every WQE still retires, over later polls.
    const uint32_t posted = hogs * hog.front().qp->ring->sq_capacity;
    for (unsigned poll = 0; poll < 1000 && hogs_retired() < posted; ++poll) {
        eng.poll(wire, now += 10'000);
        wire.frames.clear();
    }
    EXPECT_EQ(hogs_retired(), posted);
    EXPECT_EQ(events, std::vector<uint32_t>{}) << "no QP failed";
}

// Work without packets is bounded in rate too, not only per poll: beyond its allowance a
// vNIC sits polls out (counted), its QPs need no doorbell, and the worker may sleep although
// their rings are full.
TEST_F(NoisyNeighbourTest, LocalWorkBeyondTheAllowanceWaitsAndLetsTheWorkerSleep) {
    constexpr uint64_t per_s = 20'000;
    eng.set_vnic_local_work_rate(0, per_s);
    for (unsigned poll = 0; poll < 4000; ++poll) {  // 40 ms, the rings kept full
        fill_with_silent_work();
        eng.poll(wire, now += 10'000);
        wire.frames.clear();
    }
    const uint32_t done = hogs_retired();
    // 40 ms at 20 000 WRs/s, after a full bucket; a visit may overdraw by a poll's units.
    EXPECT_LE(done, engine::local_work_burst + per_s * 40 / 1000 + engine::vnic_units_per_poll);
    EXPECT_GE(done, engine::local_work_burst);
    EXPECT_GT(eng.vnic_over_allowance(0), 0u);
    EXPECT_EQ(eng.vnic_over_allowance(2), 0u);
    EXPECT_EQ(victim_packets_in_one_poll(), 64u) << "the victim's QP is served as ever";
    // Only the hogs have work left, and they wait for their allowance: the worker may sleep,
    // and their clients are not asked to ring.
    run(100);
    ASSERT_TRUE(eng.prepare_sleep());
    EXPECT_FALSE(proto::doorbell_wanted_after_publish(*hog.front().qp->ring));
    EXPECT_EQ(hog.front().qp->doorbell->worker_sleeping, 0u) << "their posts wake nobody";
    eng.after_sleep();
}

// Going to sleep costs nothing per QP of a vNIC that waits for its allowance: its shim need
// not ring (the worker comes back anyway), so its queued QPs are not asked to, however many
// they are. The control: the same vNIC with tokens left is asked, QP by QP.
TEST_F(NoisyNeighbourTest, AVnicWaitingForItsAllowanceCostsASleepNothingPerQp) {
    auto asks_of_one_sleep = [&] {
        const uint64_t before = eng.counters().sleep_asks.read();
        if (eng.prepare_sleep()) {
            eng.after_sleep();
        }
        return eng.counters().sleep_asks.read() - before;
    };
    eng.set_vnic_local_work_rate(0, 1);  // one per second: the burst is all the hogs have
    for (unsigned poll = 0; poll < 200 && eng.vnic_over_allowance(0) == 0; ++poll) {
        fill_with_silent_work();
        eng.poll(wire, now += 10'000);
        wire.frames.clear();
    }
    ASSERT_GT(eng.vnic_over_allowance(0), 0u);
    fill_with_silent_work();
    EXPECT_LE(asks_of_one_sleep(), 2u) << "at most the victim's own QPs are asked";
    EXPECT_FALSE(proto::doorbell_wanted_after_publish(*hog.front().qp->ring));

    // The control: with its allowance back, every queued QP of the vNIC is asked before the
    // worker would sleep (and the worker does not, since they have work).
    eng.set_vnic_local_work_rate(0, 1'000'000'000);
    now += 1'000'000'000;
    eng.poll(wire, now);
    wire.frames.clear();
    fill_with_silent_work();
    EXPECT_GE(asks_of_one_sleep(), hogs / 2) << "a vNIC with tokens has its queued QPs asked";
}

// A tenant's QPs in ERR with full rings: their flush writes at most the vNIC's units of
// completions per poll, however many QPs flush at once.
TEST_F(NoisyNeighbourTest, QpsFlushingFullRingsWriteTheirVnicsUnitsOfCompletions) {
    for (auto& h : hog) {
        for (uint32_t i = 0; i < h.qp->ring->sq_capacity; ++i) {
            h.qp->post_send(wqe(i, IBV_WR_SEND, h.qp->iova(0), 8, h.qp->mr));
        }
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        ASSERT_EQ(modify(*h.qp, attr, IBV_QP_STATE), 0);
    }
    const uint32_t before = hogs_retired();
    const std::size_t loaded = victim_packets_in_one_poll();
    const uint32_t flushed = hogs_retired() - before;
    EXPECT_GT(flushed, 0u);
    EXPECT_LE(flushed, engine::vnic_units_per_poll);
    EXPECT_GT(loaded, 0u);
}

// What a vNIC's QPs cost the worker shows per vNIC, and only grows: the WRs they did without a
// packet (the QPs' own counts, live and destroyed), their visits, and the QPs the worker asked
// to ring before it slept. Destroying a QP takes nothing back from any of them.
TEST_F(NoisyNeighbourTest, AVnicsLocalWorkAndSleepAsksStayCountedWhenItsQpsAreDestroyed) {
    auto silent_wrs_of = [this](uint16_t vnic) {
        std::vector<qp_report> retired;
        std::vector<qp_report> live = eng.report(&retired);
        uint64_t sum = 0;
        for (const auto* rows : {&live, &retired}) {
            for (const qp_report& r : *rows) {
                sum += r.vnic == vnic ? r.silent_wrs : 0;
            }
        }
        return sum;
    };
    eng.set_vnic_local_work_rate(0, 1'000'000'000);  // never waits: its QPs are asked to ring
    fill_with_silent_work();
    run(4);
    if (eng.prepare_sleep()) {
        eng.after_sleep();
    }
    fill_with_silent_work();
    if (eng.prepare_sleep()) {
        eng.after_sleep();
    }
    const uint64_t silent = silent_wrs_of(0);
    const uint64_t visits = eng.vnic_visits(0);
    const uint64_t asks = eng.vnic_sleep_asks(0);
    EXPECT_GE(silent, hogs_retired()) << "every bind and invalidation the hogs retired";
    EXPECT_GT(visits, 0u);
    EXPECT_GE(asks, hogs / 2) << "the hogs' queued QPs were asked to ring";
    uint64_t asks_of_all = 0;
    for (uint16_t vnic = 0; vnic < 8; ++vnic) {
        asks_of_all += eng.vnic_sleep_asks(vnic);
    }
    EXPECT_EQ(asks_of_all, eng.counters().sleep_asks.read()) << "each ask is some vNIC's";
    EXPECT_EQ(silent_wrs_of(2), 0u) << "the victim did no work without packets";

    for (auto& h : hog) {
        ASSERT_EQ(h.qp->res->destroy_qp(h.qp->client, h.qp->qp), 0);
    }
    EXPECT_GE(silent_wrs_of(0), silent);
    EXPECT_GE(eng.vnic_visits(0), visits);
    EXPECT_GE(eng.vnic_sleep_asks(0), asks);
    // The vNIC itself going away is what starts its slot at zero.
    eng.forget_vnic(0);
    EXPECT_EQ(eng.vnic_sleep_asks(0), 0u);
    EXPECT_EQ(silent_wrs_of(0), 0u);
}

// A vNIC attached after the engine was made (by apply, from etcd, by the CNI plugin) gets a
// slot beyond those it was made with: its work is counted as any other vNIC's, and its QPs
// asked to ring before a sleep like the others'.
TEST_F(NoisyNeighbourTest, AVnicAddedAfterTheEngineWasMadeIsCountedLikeTheOthers) {
    constexpr uint16_t late_slot = 5;  // the engine was made with slots 0-2
    constexpr uint32_t ip_late = 0xC6130105;
    side late, late_peer;
    make_side(late, late_slot, ip_late, 950);
    make_side(late_peer, 1, ip_b, 951);
    connect(late, late_peer, ip_b);
    connect(late_peer, late, ip_late);
    late.post_send(wqe(1, IBV_WR_RDMA_WRITE, late.iova(0), 64 * 1024, late.mr, late_peer.iova(0),
                       late_peer.mr));
    eng.poll(wire, now += 10'000);
    EXPECT_GT(eng.vnic_visits(late_slot), 0u);
    late.post_send(wqe(2, IBV_WR_RDMA_WRITE, late.iova(0), 64 * 1024, late.mr, late_peer.iova(0),
                       late_peer.mr));
    if (eng.prepare_sleep()) {
        eng.after_sleep();
    }
    uint64_t asks_of_all = 0;
    for (uint16_t vnic = 0; vnic <= late_slot; ++vnic) {
        asks_of_all += eng.vnic_sleep_asks(vnic);
    }
    EXPECT_EQ(asks_of_all, eng.counters().sleep_asks.read()) << "each ask is some vNIC's";
}

}  // namespace
}  // namespace jakiro::rnic::test
