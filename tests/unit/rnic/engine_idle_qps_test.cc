// The engine's visits (rnic/engine.cc poll): the worker looks only at QPs with work or something
// pending; idle QPs are parked and cost a poll nothing however many a tenant holds, a parked QP
// is served again as soon as its shim rings, a packet arrives or a control call changes it, and
// the futex wakes the engine makes for programs napping on an empty CQ are charged to their vNIC.

#include <set>

#include "rnic/timers.hh"
#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

class IdleQpsTest : public QueuePairTest {
  protected:
    static constexpr uint32_t ip_c = 0xC6130103;
    static constexpr uint32_t quota = 1024;  // rdma.max_qps at its limit

    // A tenant on vNIC 2 holding its whole quota of RC QPs, connected (RTS) and idle: what the
    // QPs of a program that opened them and never posts look like.
    void hoard_idle_qps() {
        make_side(hoarder, 2, ip_c, 900, quota);
        connect(hoarder, b, ip_b);
        auto req = qp_request(hoarder);
        req.max_send_wr = 16;
        req.max_recv_wr = 16;
        const uint32_t first = hoarder.qp;
        for (uint32_t i = 1; i < quota; ++i) {
            verbs::qp_created q;
            ASSERT_EQ(hoarder.res->create_qp(hoarder.client, req, q), 0) << i;
            close(q.ring_fd);
            close(q.doorbell_fd);
            hoarder.qp = q.handle;
            connect(hoarder, b, ip_b);
        }
        hoarder.qp = first;
    }

    // Polls until every QP that has nothing to do is parked (the engine waits
    // park_after_idle_ns of idleness first, and checks new QPs' peers 128 per poll).
    void let_idle_qps_park() {
        for (int i = 0; i < 100; ++i) {
            const uint64_t before = eng.counters().visits.read();
            run(1, engine::park_after_idle_ns);
            if (i > 2 && eng.counters().visits.read() == before) {
                return;
            }
        }
        FAIL() << "idle QPs are still visited";
    }
    // Visits of every QP of `vnic` but `except`.
    uint64_t visits_but(uint16_t vnic, uint32_t except) const {
        uint64_t visits = 0;
        for (const qp_report& r : eng.report()) {
            visits += r.vnic == vnic && r.qpn != except ? r.visits : 0;
        }
        return visits;
    }

    uint64_t visits_of(uint16_t vnic) const { return eng.vnic_visits(vnic); }

    side hoarder;
};

// A tenant holding 1024 idle QPs costs the worker nothing per poll: no visit (and so no look at
// their rings), while the QPs of a tenant with work are visited as before.
TEST_F(IdleQpsTest, APollVisitsNoneOfATenantsIdleQpsHoweverManyItHolds) {
    connect_both();
    hoard_idle_qps();
    let_idle_qps_park();
    const uint64_t hoarder_before = visits_of(2);
    const uint64_t all_before = eng.counters().visits.read();
    run(100);
    EXPECT_EQ(visits_of(2), hoarder_before) << "idle QPs cost a poll nothing";
    EXPECT_EQ(eng.counters().visits.read(), all_before) << "nobody has work: no visit at all";

    // The control: a QP with work is visited (and its vNIC charged for it), the idle ones
    // still not.
    b.post_recv(1, 0, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    run(5);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_GT(visits_of(0), 0u);
    EXPECT_EQ(visits_of(2), hoarder_before);
    // Going to sleep does not look at them either, and they ask their shims to ring.
    ASSERT_TRUE(eng.prepare_sleep());
    EXPECT_NE(hoarder.ring->doorbell_wanted, 0u);
    eng.after_sleep();
    EXPECT_NE(hoarder.ring->doorbell_wanted, 0u) << "parked: it asks until it is queued again";
}

// `jakiroctl qps` lists exactly the QPs that exist while a tenant creates and destroys them in
// any order (the report's copy follows each add and remove instead of being copied whole).
TEST_F(IdleQpsTest, TheQpReportFollowsEveryCreateAndDestroy) {
    connect_both();
    hoard_idle_qps();
    auto listed = [&] {
        std::multiset<uint32_t> qpns;
        for (const qp_report& r : eng.report()) {
            if (r.vnic == 2) {
                qpns.insert(r.qpn);
            }
        }
        return qpns;
    };
    std::multiset<uint32_t> all = listed();
    ASSERT_EQ(all.size(), quota);
    std::multiset<uint32_t> kept;
    unsigned i = 0;
    for (uint32_t qpn : all) {
        if (i++ % 3 == 0 && qpn != hoarder.qp) {
            ASSERT_EQ(hoarder.res->destroy_qp(hoarder.client, qpn), 0) << qpn;
        } else {
            kept.insert(qpn);
        }
    }
    EXPECT_EQ(listed(), kept);
    const std::size_t others = eng.report().size() - kept.size();
    EXPECT_EQ(others, 2u) << "a's and b's QPs are listed as before";
}

// A WR posted to a QP that was parked is picked up by the very next poll: the shim rang its bit.
TEST_F(IdleQpsTest, AQpPostedAfterBeingParkedIsServedOnTheNextPoll) {
    connect_both();
    hoard_idle_qps();
    let_idle_qps_park();
    const uint64_t before = visits_of(2);
    const uint64_t others_before = visits_but(2, hoarder.qp);
    wire.frames.clear();
    hoarder.post_send(wqe(7, IBV_WR_RDMA_WRITE, hoarder.iova(0), 64, hoarder.mr, b.iova(0), b.mr));
    eng.poll(wire, now += 1'000);
    ASSERT_EQ(wire.frames.size(), 1u) << "the WRITE left in the first poll after the post";
    EXPECT_EQ(wire.frames.front().from, 2);
    EXPECT_GT(visits_of(2), before);
    EXPECT_EQ(visits_but(2, hoarder.qp), others_before) << "only the QP rung was visited";
    wire.frames.clear();
}

// A parked QP whose shim rings while the worker sleeps wakes it (no lost wake-up), and the worker
// then serves it; a parked QP that gets a packet is queued by the packet (an ACK is owed).
TEST_F(IdleQpsTest, ASleepingWorkerWakesForAParkedQpAndAPacketQueuesOne) {
    connect_both();
    b.post_recv(1, 0, 4096);
    let_idle_qps_park();
    const uint64_t visits = eng.counters().visits.read();
    run(10);
    ASSERT_EQ(eng.counters().visits.read(), visits) << "both QPs are parked";

    ASSERT_TRUE(eng.prepare_sleep());
    const uint32_t rung = eng.doorbell_count();
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    EXPECT_NE(eng.doorbell_count(), rung) << "the post woke the sleeping worker";
    eng.after_sleep();
    EXPECT_FALSE(eng.prepare_sleep()) << "a rung QP is work: the worker must not sleep again";
    run(5);  // a sends; b, parked, receives the SEND, owes an ACK and sends it
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "b's ACK came back";
}

// A program napping on its empty CQ is woken by a system call per completion: each is a unit of
// its vNIC's work and counted for the vNIC. The control runs the same WRs without the nap. (The
// WRITEs go memory to memory, so that they complete within the worker's visits.)
TEST_F(IdleQpsTest, FutexWakesForNappingPollersAreChargedAndCountedPerVnic) {
    wire.same_host = true;
    connect_both();
    auto units_of = [this](uint16_t vnic) {
        uint64_t units = 0;
        for (const qp_report& r : eng.report()) {
            units += r.vnic == vnic ? r.work_units : 0;
        }
        return units;
    };
    // Ten signaled WRITEs, one at a time; `nap`: the program keeps the napping word set.
    auto writes = [&](bool nap) {
        for (int i = 0; i < 10; ++i) {
            if (nap) {
                proto::shared_index(a.send_cq->poller_napping).store(1);
            }
            a.post_send(wqe(i, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), b.mr));
            run(3);
            proto::cqe c{};
            ASSERT_TRUE(a.poll_send(c));
        }
    };
    const uint64_t units_before = units_of(0);
    writes(false);
    const uint64_t units_plain = units_of(0) - units_before;
    EXPECT_EQ(eng.vnic_poller_wakes(0), 0u);
    writes(true);
    const uint64_t units_napping = units_of(0) - units_before - units_plain;
    EXPECT_EQ(eng.vnic_poller_wakes(0), 10u) << "one wake per completion";
    EXPECT_EQ(eng.vnic_poller_wakes(1), 0u) << "charged to the program's vNIC only";
    EXPECT_EQ(units_napping, units_plain + 10) << "each wake is a unit of work";
    uint64_t per_qp = 0;
    for (const qp_report& r : eng.report()) {
        per_qp += r.qpn == a.qp && r.vnic == 0 ? r.poller_wakes : 0;
    }
    EXPECT_EQ(per_qp, 10u);
}

// The wakes of receive completions (written as packets arrive, outside any visit) count against
// the vNIC's local-work allowance: a program that naps on every receive runs out of it and its
// QPs sit polls out, as they would for WRs that send nothing.
TEST_F(IdleQpsTest, ReceiveCompletionWakesCountAgainstTheLocalWorkAllowance) {
    connect_both();
    eng.set_vnic_local_work_rate(1, 1);  // one per second: the burst is all b has
    const uint64_t burst = engine::local_work_burst;
    for (uint64_t i = 0; i <= burst; ++i) {
        b.post_recv(i, 0, 64);
        proto::shared_index(b.recv_cq->poller_napping).store(1);
        a.post_send(wqe(i, IBV_WR_SEND, a.iova(0), 8, a.mr));
        run(1, 1'000);
        run(1, 1'000);
        proto::cqe c{};
        while (a.poll_send(c) || b.poll_recv(c)) {
        }
    }
    EXPECT_GE(eng.vnic_poller_wakes(1), burst);
    EXPECT_GT(eng.vnic_over_allowance(1), 0u) << "b's wakes spent its allowance";
    EXPECT_EQ(eng.vnic_over_allowance(0), 0u);
}

// A QP whose WR is in flight and whose ACK is lost has nothing to do until its retransmit timer
// (local ACK timeout 14: 67 ms): it waits in the engine's timer queue, out of its vNIC's, and costs
// no visit meanwhile; the timer still fires on time (the first poll at or after it is due), the
// WR goes again and completes. The control: the visits that sent it and that retransmit it.
TEST_F(IdleQpsTest, AQpWaitingForItsAckCostsNoVisitsUntilItsRetransmitTimerIsDue) {
    connect_both();  // timeout 14, retry_cnt 7
    auto qp_visits = [this](uint16_t vnic, uint32_t qpn) {
        for (const qp_report& r : eng.report()) {
            if (r.vnic == vnic && r.qpn == qpn) {
                return r.visits;
            }
        }
        return uint64_t{0};
    };
    bool acks_lost = true;
    uint64_t first_resend_ns = 0;
    unsigned sent_by_a = 0;
    auto wire_keeps = [&](const test_wire::frame& f) {
        if (f.from == 0 && ++sent_by_a == 2 && first_resend_ns == 0) {
            first_resend_ns = now;
        }
        return !(acks_lost && f.from == 1);
    };
    b.post_recv(1, 0, 4096);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 100, a.mr));
    const uint64_t sent_ns = now + 100'000;  // the first poll below sends it
    run(3, 100'000, wire_keeps);
    ASSERT_EQ(sent_by_a, 1u);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c)) << "the SEND arrived; its ACK did not";
    ASSERT_FALSE(a.poll_send(c));
    const uint64_t visits = qp_visits(0, a.qp);
    const uint64_t vnic_visits = eng.vnic_visits(0);
    ASSERT_GT(visits, 0u);

    const uint64_t due_ns = sent_ns + *local_ack_timeout_ns(14);
    run(600, 100'000, wire_keeps);  // 60 ms of polls, every 100 µs
    ASSERT_LT(now, due_ns);
    EXPECT_EQ(qp_visits(0, a.qp), visits) << "waiting for its ACK cost visits";
    EXPECT_EQ(eng.vnic_visits(0), vnic_visits) << "and its vNIC units";
    EXPECT_EQ(sent_by_a, 1u);

    acks_lost = false;
    run(100, 100'000, wire_keeps);  // past the timeout: the WR goes again, its ACK comes back
    EXPECT_EQ(sent_by_a, 2u) << "retransmitted once";
    EXPECT_GE(first_resend_ns, due_ns) << "not before the timer";
    EXPECT_LT(first_resend_ns, due_ns + 100'000) << "in the first poll after it was due";
    EXPECT_GT(qp_visits(0, a.qp), visits);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    uint64_t timeouts = 0;
    for (const qp_report& r : eng.report()) {
        timeouts += r.vnic == 0 && r.qpn == a.qp ? r.timeouts : 0;
    }
    EXPECT_EQ(timeouts, 1u);
}

// Several QPs waiting at once: four of vNIC 2 whose peer never answers (b's QP takes packets from
// a only), local ACK timeouts 10-13 (4-34 ms), each retransmit at its own timeout, however the
// others come and go; a's QP, waiting among them, is taken out early by a post (the shim rings,
// as it would for a parked QP), and completes both WRs at once. vNIC 2 pays a visit per
// retransmission, not one per poll.
TEST_F(IdleQpsTest, WaitingQpsEachRetransmitAtTheirOwnTimeoutAndAPostTakesOneOut) {
    connect_both();
    std::array<side, 4> waiting;
    for (std::size_t i = 0; i < waiting.size(); ++i) {
        make_side(waiting[i], 2, ip_c, 900 + i, 4, i == 0 ? nullptr : &waiting[0]);
        connect(waiting[i], b, ip_b, 7, 7, static_cast<uint8_t>(10 + i));
    }
    bool acks_lost = true;
    auto wire_keeps = [&](const test_wire::frame& f) { return !(acks_lost && f.from == 1); };
    b.post_recv(1, 0, 64);
    b.post_recv(2, 0, 64);
    a.post_send(wqe(1, IBV_WR_SEND, a.iova(0), 8, a.mr));
    for (side& w : waiting) {
        w.post_send(wqe(1, IBV_WR_SEND, w.iova(0), 8, w.mr));
    }
    run(2, 100'000, wire_keeps);
    const uint64_t visits = eng.vnic_visits(2);
    auto timeouts_of = [this](const side& s) {
        for (const qp_report& r : eng.report()) {
            if (r.vnic == s.vnic && r.qpn == s.qp) {
                return r.timeouts;
            }
        }
        return uint64_t{0};
    };

    run(100, 100'000, wire_keeps);  // 10 ms, a's ACK still lost
    proto::cqe c{};
    ASSERT_FALSE(a.poll_send(c));
    acks_lost = false;
    a.post_send(wqe(2, IBV_WR_SEND, a.iova(0), 8, a.mr));
    run(2, 100'000, wire_keeps);
    ASSERT_TRUE(a.poll_send(c)) << "the post took a out of the timer queue: its SEND went";
    EXPECT_EQ(c.wr_id, 1u);
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.wr_id, 2u);
    EXPECT_EQ(timeouts_of(a), 0u) << "a never timed out";

    const uint64_t ms = 40;
    run(ms * 10 - 102, 100'000, wire_keeps);  // to 40 ms after the sends
    uint64_t retransmissions = 0;
    for (std::size_t i = 0; i < waiting.size(); ++i) {
        const double period_ms = static_cast<double>(*local_ack_timeout_ns(10 + i)) / 1e6;
        // Each expiry comes in the first poll after it is due (every 0.1 ms) and the next
        // timer runs from there; the eighth (retry_cnt 7 spent) fails the WR, and the QP goes
        // to ERR.
        const auto most = std::min<uint64_t>(static_cast<uint64_t>(ms / period_ms), 8);
        const auto least = std::min<uint64_t>(static_cast<uint64_t>(ms / (period_ms + 0.1)), 8);
        const uint64_t t = timeouts_of(waiting[i]);
        EXPECT_GE(t, least) << "timeout " << 10 + i;
        EXPECT_LE(t, most) << "timeout " << 10 + i;
        retransmissions += t;
    }
    // A visit per expiry (and one for the WR it sends again), none in between.
    EXPECT_LE(eng.vnic_visits(2) - visits, 2 * retransmissions + waiting.size());
    EXPECT_TRUE(waiting[0].poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_RETRY_EXC_ERR) << "the one whose retries ran out";
}

// A vNIC removed and another given its slot: the new vNIC's counters start at zero and it owes
// nothing of the old one's local-work allowance (which the old one had spent on napping wakes),
// while the vNIC that stays keeps what it counted.
TEST_F(IdleQpsTest, AVnicGivenARemovedOnesSlotStartsAtZeroAndOwesNoneOfItsDebt) {
    connect_both();
    eng.set_vnic_local_work_rate(1, 1);  // one per second: the burst is all b has
    for (uint64_t i = 0; i <= engine::local_work_burst; ++i) {
        b.post_recv(i, 0, 64);
        proto::shared_index(b.recv_cq->poller_napping).store(1);
        a.post_send(wqe(i, IBV_WR_SEND, a.iova(0), 8, a.mr));
        run(2, 1'000);
        proto::cqe c{};
        while (a.poll_send(c) || b.poll_recv(c)) {
        }
    }
    ASSERT_GT(eng.vnic_visits(1), 0u);
    ASSERT_GT(eng.vnic_poller_wakes(1), 0u);
    ASSERT_GT(eng.vnic_over_allowance(1), 0u) << "b's wakes spent its allowance";
    const uint64_t stays = eng.vnic_visits(0);
    ASSERT_GT(stays, 0u);

    // vNIC 1 goes (its resources' destructor takes its QPs and its doorbell out of the engine).
    b.~side();
    new (&b) side();
    EXPECT_EQ(eng.vnic_visits(1), 0u);
    EXPECT_EQ(eng.vnic_poller_wakes(1), 0u);
    EXPECT_EQ(eng.vnic_over_allowance(1), 0u);
    EXPECT_EQ(eng.vnic_visits(0), stays) << "the vNIC that stays keeps its counts";

    // A new vNIC in slot 1, and a new program of vNIC 0 to talk to it: its QP answers at once
    // (its ACK goes on its first visits), where the old vNIC's debt would keep it sitting out.
    make_side(b, 1, ip_b, 77);
    side a2;
    make_side(a2, 0, ip_a, 78, 4, &a);
    connect(a2, b, ip_b);
    connect(b, a2, ip_a);
    b.post_recv(1, 0, 64);
    a2.post_send(wqe(1, IBV_WR_SEND, a2.iova(0), 8, a2.mr));
    run(5, 1'000);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    ASSERT_TRUE(a2.poll_send(c)) << "the new vNIC's ACK never left";
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(eng.vnic_over_allowance(1), 0u);
    EXPECT_EQ(eng.vnic_poller_wakes(1), 0u);
}

// A receive posted to a QP in RTS needs no visit (the responder takes it when a message comes):
// posted while the QP is parked, or while the worker sleeps, it sets no bit in the doorbell page
// and wakes nobody, and the next SEND lands in it, with no RNR NAK. The control: a SEND posted
// the same way wakes the sleeping worker.
TEST_F(IdleQpsTest, AReceivePostedToAConnectedQpRingsNothingAndTheNextSendLandsInIt) {
    connect_both();
    let_idle_qps_park();
    EXPECT_EQ(b.ring->doorbell_wanted, proto::doorbell_for_sends);
    const uint64_t visits = eng.counters().visits.read();

    b.post_recv(1, 0, 4096);  // parked, the worker awake
    EXPECT_FALSE(proto::anything_posted(*b.doorbell)) << "no bit for a receive";
    run(3);
    EXPECT_EQ(eng.counters().visits.read(), visits) << "nobody was visited for it";

    ASSERT_TRUE(eng.prepare_sleep());
    const uint32_t rung = eng.doorbell_count();
    b.post_recv(2, 4096, 4096);  // and while the worker sleeps
    EXPECT_EQ(eng.doorbell_count(), rung) << "no wake-up for a receive";
    EXPECT_FALSE(proto::anything_posted(*b.doorbell));
    EXPECT_FALSE(eng.after_sleep());
    ASSERT_TRUE(eng.prepare_sleep()) << "a posted receive is no work: the worker sleeps on";

    fill(a, 0, 200, 7);
    a.post_send(wqe(10, IBV_WR_SEND, a.iova(0), 100, a.mr));
    EXPECT_NE(eng.doorbell_count(), rung) << "a send wakes the sleeping worker";
    EXPECT_TRUE(eng.after_sleep());
    a.post_send(wqe(11, IBV_WR_SEND, a.iova(100), 100, a.mr));
    run(5);
    proto::cqe c{};
    for (uint64_t id : {1u, 2u}) {
        ASSERT_TRUE(b.poll_recv(c)) << id;
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
        EXPECT_EQ(c.wr_id, id);
        EXPECT_EQ(c.byte_len, 100u);
    }
    EXPECT_TRUE(same(a, 0, b, 0, 100));
    EXPECT_TRUE(same(a, 100, b, 4096, 100));
    for (uint64_t id : {10u, 11u}) {
        ASSERT_TRUE(a.poll_send(c)) << id;
        EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    }
    for (const qp_report& r : eng.report()) {
        EXPECT_EQ(r.rnr_naks_sent, 0u) << "the receives were there when the SENDs came";
    }
}

// Receives posted to a QP in ERR must be flushed, and only a visit does that: the QP asks for
// them to be rung, and a receive posted while the worker sleeps wakes it and completes with
// IBV_WC_WR_FLUSH_ERR. Whoever moved the QP to ERR: the program (ibv_modify_qp) or the engine
// (a SEND longer than the receive it landed in). Back in RTS, receives ring nothing again.
TEST_F(IdleQpsTest, AReceivePostedToAQpInErrWakesTheWorkerAndIsFlushed) {
    auto flushed_after_sleep = [&](uint64_t wr_id) {
        let_idle_qps_park();
        EXPECT_EQ(b.ring->doorbell_wanted, proto::doorbell_for_every_post);
        EXPECT_TRUE(eng.prepare_sleep());
        EXPECT_EQ(b.ring->doorbell_wanted, proto::doorbell_for_every_post);
        const uint32_t rung = eng.doorbell_count();
        b.post_recv(wr_id, 0, 64);
        EXPECT_NE(eng.doorbell_count(), rung) << "the receive woke the worker";
        EXPECT_TRUE(eng.after_sleep());
        run(2);
        proto::cqe c{};
        ASSERT_TRUE(b.poll_recv(c));
        EXPECT_EQ(c.wr_id, wr_id);
        EXPECT_EQ(c.status, IBV_WC_WR_FLUSH_ERR);
        EXPECT_FALSE(b.poll_recv(c));
    };

    connect_both();
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    flushed_after_sleep(1);

    attr.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(modify(b, attr, IBV_QP_STATE), 0);
    connect(b, a, ip_a);
    let_idle_qps_park();
    EXPECT_EQ(b.ring->doorbell_wanted, proto::doorbell_for_sends) << "RTS again";

    // The engine's own move: a 100-byte SEND into a 16-byte receive fails b (LOC_LEN_ERR).
    ASSERT_TRUE(eng.prepare_sleep());
    const uint32_t rung = eng.doorbell_count();
    b.post_recv(2, 0, 16);
    EXPECT_EQ(eng.doorbell_count(), rung);
    eng.after_sleep();
    a.post_send(wqe(20, IBV_WR_SEND, a.iova(0), 100, a.mr));
    run(5);
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.wr_id, 2u);
    EXPECT_EQ(c.status, IBV_WC_LOC_LEN_ERR);
    flushed_after_sleep(3);
}

}  // namespace
}  // namespace jakiro::rnic::test
