// jakirod's CQ producer against a consumer that reads the ring as the shim does (rings.hh
// helpers, through a mapping of its own of the memfd): order, overflow, arming, channels.

#include "rnic/queues/cq_ring.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/unit/rnic/verbs/maps_helper.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::verbs {
namespace {

namespace proto = verbs_proto;

// The shim's side: its own mapping of the ring memfd and ibv_poll_cq's loop.
class consumer {
  public:
    explicit consumer(int fd, std::size_t bytes) : _bytes(bytes) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        EXPECT_NE(p, MAP_FAILED);
        _h = static_cast<proto::cq_ring_header*>(p);
    }
    ~consumer() { munmap(_h, _bytes); }

    std::vector<proto::cqe> poll(uint32_t max = ~0u) {
        const uint32_t cons = proto::load_own_consumer(*_h);
        const uint32_t prod = proto::load_producer_acquire(*_h);
        std::vector<proto::cqe> out;
        for (uint32_t i = 0; i < prod - cons && i < max; ++i) {
            out.push_back(proto::cq_slots(_h)[(cons + i) & (_h->capacity - 1)]);
        }
        proto::release_slots(*_h, cons + static_cast<uint32_t>(out.size()));
        return out;
    }
    proto::cq_ring_header& header() { return *_h; }

  private:
    proto::cq_ring_header* _h;
    std::size_t _bytes;
};

proto::cqe completion(uint64_t wr_id, bool solicited = false) {
    proto::cqe e{};
    e.wr_id = wr_id;
    e.status = IBV_WC_SUCCESS;
    e.opcode = IBV_WC_RECV;
    e.byte_len = 100;
    e.qp_num = 0x11;
    e.solicited = solicited ? 1 : 0;
    return e;
}

struct ring_and_fd {
    std::unique_ptr<cq_ring> ring;
    int fd = -1;
    ~ring_and_fd() {
        if (fd >= 0) {
            close(fd);
        }
    }
};

void make(ring_and_fd& r, uint32_t capacity) {
    ASSERT_EQ(cq_ring::create(capacity, r.ring, r.fd), 0);
}

TEST(CqRing, IsASealedMemfdOfTheAdvertisedSize) {
    ring_and_fd r;
    make(r, 64);
    struct stat st {};
    ASSERT_EQ(fstat(r.fd, &st), 0);
    EXPECT_EQ(static_cast<std::size_t>(st.st_size), proto::cq_ring_bytes(64));
    EXPECT_EQ(r.ring->bytes(), proto::cq_ring_bytes(64));
    const int seals = fcntl(r.fd, F_GET_SEALS);
    EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
              F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    EXPECT_NE(ftruncate(r.fd, 4096), 0) << "a client cannot shrink it under jakirod";
    consumer c(r.fd, r.ring->bytes());
    EXPECT_EQ(c.header().magic, proto::cq_ring_magic);
    EXPECT_EQ(c.header().capacity, 64u);
    EXPECT_EQ(c.header().slot_size, sizeof(proto::cqe));
    EXPECT_EQ(c.header().producer, 0u);
}

TEST(CqRing, CapacityMustBeAPowerOfTwo) {
    std::unique_ptr<cq_ring> ring;
    int fd = -1;
    EXPECT_EQ(cq_ring::create(100, ring, fd), EINVAL);
    EXPECT_EQ(cq_ring::create(0, ring, fd), EINVAL);
    static_assert(ring_capacity_for(1) == 1 && ring_capacity_for(100) == 128 &&
                  ring_capacity_for(65536) == 65536);
}

TEST(CqRing, EmptyRingPollsNothingAndCompletionsArriveInOrder) {
    ring_and_fd r;
    make(r, 8);
    consumer c(r.fd, r.ring->bytes());
    EXPECT_TRUE(c.poll().empty());
    for (uint64_t i = 1; i <= 5; ++i) {
        ASSERT_TRUE(r.ring->push(completion(i)));
    }
    const auto got = c.poll(3);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].wr_id, 1u);
    EXPECT_EQ(got[2].wr_id, 3u);
    EXPECT_EQ(got[0].byte_len, 100u);
    EXPECT_EQ(c.poll().size(), 2u);
    EXPECT_TRUE(c.poll().empty());
    EXPECT_EQ(r.ring->produced(), 5u);
}

TEST(CqRing, RefusesToOverwriteUnreadCompletionsWhenFull) {
    ring_and_fd r;
    make(r, 4);
    consumer c(r.fd, r.ring->bytes());
    for (uint64_t i = 0; i < 4; ++i) {
        ASSERT_TRUE(r.ring->push(completion(100 + i)));
    }
    EXPECT_FALSE(r.ring->overflowed());
    EXPECT_FALSE(r.ring->push(completion(999)));
    EXPECT_TRUE(r.ring->overflowed());
    EXPECT_TRUE(proto::overflowed(c.header())) << "the shim can see it too";
    const auto got = c.poll();
    ASSERT_EQ(got.size(), 4u);
    for (uint64_t i = 0; i < 4; ++i) {
        EXPECT_EQ(got[i].wr_id, 100 + i) << "nothing overwritten";
    }
    EXPECT_TRUE(r.ring->push(completion(5))) << "room again once the consumer freed slots";
    EXPECT_EQ(c.poll().at(0).wr_id, 5u);
}

TEST(CqRing, AConsumerIndexThatMakesNoSenseReadsAsFull) {
    ring_and_fd r;
    make(r, 16);
    consumer c(r.fd, r.ring->bytes());
    ASSERT_TRUE(r.ring->push(completion(1)));
    proto::release_slots(c.header(), 9);  // "ahead" of the producer (1): hostile or confused
    EXPECT_FALSE(r.ring->push(completion(2)));
    proto::release_slots(c.header(), 1);
    EXPECT_TRUE(r.ring->push(completion(3)));
}

TEST(CqRing, ArmIsConsumedOnceAndSolicitedOnlyBySolicitedCompletions) {
    ring_and_fd r;
    make(r, 16);
    consumer c(r.fd, r.ring->bytes());
    ASSERT_TRUE(r.ring->push(completion(1)));
    EXPECT_FALSE(r.ring->take_arm_after_push(false)) << "not armed";
    proto::arm_and_fence(c.header(), proto::arm_next);
    EXPECT_TRUE(r.ring->take_arm_after_push(false));
    EXPECT_FALSE(r.ring->take_arm_after_push(false)) << "one notification per arm";
    proto::arm_and_fence(c.header(), proto::arm_solicited);
    EXPECT_FALSE(r.ring->take_arm_after_push(false));
    EXPECT_TRUE(r.ring->take_arm_after_push(true));
    EXPECT_EQ(c.header().arm, 0u);
}

// ---- ibv_resize_cq: a new ring takes over the old one's unconsumed completions

TEST(CqRing, TakeOverMovesTheUnconsumedCompletionsInOrderAcrossTheWrap) {
    ring_and_fd old_ring, bigger;
    make(old_ring, 4);
    make(bigger, 16);
    consumer c(old_ring.fd, old_ring.ring->bytes());
    // Wrap the old ring: 6 pushed, 3 polled, 3 unconsumed at slots 3, 0, 1.
    for (uint64_t i = 1; i <= 3; ++i) {
        ASSERT_TRUE(old_ring.ring->push(completion(i)));
    }
    ASSERT_EQ(c.poll(3).size(), 3u);
    for (uint64_t i = 4; i <= 6; ++i) {
        ASSERT_TRUE(old_ring.ring->push(completion(i)));
    }
    ASSERT_EQ(c.poll(1).at(0).wr_id, 4u);
    uint32_t moved = 0;
    ASSERT_EQ(bigger.ring->take_over(*old_ring.ring, moved), 0);
    EXPECT_EQ(moved, 2u);
    consumer n(bigger.fd, bigger.ring->bytes());
    ASSERT_TRUE(bigger.ring->push(completion(7)));
    const auto got = n.poll();
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].wr_id, 5u);
    EXPECT_EQ(got[1].wr_id, 6u);
    EXPECT_EQ(got[2].wr_id, 7u) << "new completions follow the moved ones";
    EXPECT_EQ(got[0].byte_len, 100u) << "whole completions, not just ids";
    EXPECT_EQ(bigger.ring->produced(), 7u) << "the count goes on";
}

TEST(CqRing, TakeOverRefusesWhenTheUnconsumedDoNotFitAndChangesNothing) {
    ring_and_fd old_ring, smaller;
    make(old_ring, 16);
    make(smaller, 4);
    consumer c(old_ring.fd, old_ring.ring->bytes());
    for (uint64_t i = 1; i <= 5; ++i) {
        ASSERT_TRUE(old_ring.ring->push(completion(i)));
    }
    uint32_t moved = 99;
    EXPECT_EQ(smaller.ring->take_over(*old_ring.ring, moved), EINVAL);
    EXPECT_EQ(moved, 99u);
    EXPECT_EQ(c.poll().size(), 5u) << "the old ring keeps all of them";
    ASSERT_TRUE(old_ring.ring->push(completion(6))) << "and stays in use";
    ring_and_fd fits;
    make(fits, 4);
    ASSERT_EQ(c.poll().size(), 1u);
    EXPECT_EQ(fits.ring->take_over(*old_ring.ring, moved), 0) << "nothing unconsumed: any size";
    EXPECT_EQ(moved, 0u);
}

TEST(CqRing, TakeOverRefusesAConsumerIndexThatMakesNoSense) {
    ring_and_fd old_ring, other;
    make(old_ring, 8);
    make(other, 64);
    consumer c(old_ring.fd, old_ring.ring->bytes());
    ASSERT_TRUE(old_ring.ring->push(completion(1)));
    proto::release_slots(c.header(), 5);  // ahead of the producer: "4 billion unconsumed"
    uint32_t moved = 0;
    EXPECT_EQ(other.ring->take_over(*old_ring.ring, moved), EINVAL)
        << "jakirod never copies slots the client only claims exist";
}

TEST(CqRing, TakeOverKeepsTheArmAndTheErrorState) {
    ring_and_fd old_ring, armed, failed;
    make(old_ring, 2);
    make(armed, 8);
    consumer c(old_ring.fd, old_ring.ring->bytes());
    proto::arm_and_fence(c.header(), proto::arm_solicited);
    uint32_t moved = 0;
    ASSERT_EQ(armed.ring->take_over(*old_ring.ring, moved), 0);
    ASSERT_TRUE(armed.ring->push(completion(1)));
    EXPECT_FALSE(armed.ring->take_arm_after_push(false));
    EXPECT_TRUE(armed.ring->take_arm_after_push(true)) << "still armed for a solicited one";
    EXPECT_FALSE(armed.ring->overflowed());

    ASSERT_TRUE(old_ring.ring->push(completion(1)));
    ASSERT_TRUE(old_ring.ring->push(completion(2)));
    EXPECT_FALSE(old_ring.ring->push(completion(3)));
    make(failed, 8);
    ASSERT_EQ(failed.ring->take_over(*old_ring.ring, moved), 0);
    EXPECT_EQ(moved, 2u);
    EXPECT_TRUE(failed.ring->overflowed()) << "a CQ in error stays in error";
}

TEST(CompletionQueue, ReplaceRingCompletesIntoTheNewRingOnly) {
    ring_and_fd first, second;
    make(first, 4);
    make(second, 8);
    const int first_fd = first.fd;
    consumer old_view(first.fd, first.ring->bytes());
    consumer new_view(second.fd, second.ring->bytes());
    completion_queue cq(std::move(first.ring), 1, 1, -1, {});
    ASSERT_TRUE(cq.complete(completion(1)));
    cq_take_over plan;
    std::unique_ptr<cq_ring> ring = std::move(second.ring);
    ASSERT_EQ(cq.replace_ring(ring, plan), 0);
    EXPECT_EQ(plan.count, 1u);
    EXPECT_EQ(cq.ring().capacity(), 8u);
    cq.ring().finish_take_over(*ring, plan);
    ring.reset();  // the old ring goes: jakirod's mapping of it too
    EXPECT_EQ(test::mappings_of(first_fd), 1) << "only the consumer's own mapping is left";
    for (uint64_t i = 2; i <= 8; ++i) {
        ASSERT_TRUE(cq.complete(completion(i))) << "room for 8 now";
    }
    EXPECT_FALSE(cq.complete(completion(9)));
    const auto got = new_view.poll();
    ASSERT_EQ(got.size(), 8u);
    EXPECT_EQ(got.front().wr_id, 1u);
    EXPECT_EQ(got.back().wr_id, 8u);
    EXPECT_EQ(proto::load_producer_acquire(old_view.header()), 0u)
        << "jakirod let go of the old ring: its pages were given back, the client reads zeros";
}

// The engine's part of a resize is O(1): it switches rings and completes behind the slots the
// unread completions will take; the copy of those happens after, on another thread.
TEST(CompletionQueue, TheWorkersPartOfAResizeCopiesNothing) {
    ring_and_fd first, second;
    make(first, 1024);
    make(second, 2048);
    consumer new_view(second.fd, second.ring->bytes());
    completion_queue cq(std::move(first.ring), 1, 1, -1, {});
    for (uint64_t i = 1; i <= 1000; ++i) {
        ASSERT_TRUE(cq.complete(completion(i)));
    }
    cq_take_over plan;
    std::unique_ptr<cq_ring> old = std::move(second.ring);
    ASSERT_EQ(cq.replace_ring(old, plan), 0);  // what the worker runs
    EXPECT_EQ(plan.count, 1000u);
    EXPECT_EQ(proto::cq_slots(&new_view.header())[0].wr_id, 0u) << "nothing copied yet";
    ASSERT_TRUE(cq.complete(completion(1001))) << "the engine goes on completing meanwhile";
    cq.ring().finish_take_over(*old, plan);  // what the control thread runs
    const auto got = new_view.poll();
    ASSERT_EQ(got.size(), 1001u);
    for (uint64_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].wr_id, i + 1) << "in order, the moved ones first";
    }
}

// A consumer index never goes back: set behind where jakirod last read it (a whole ring
// behind, after the client had read everything), it would make a resize copy a ring of
// completions the client had already read, or that were never written. Refused.
TEST(CqRing, TakeOverRefusesAConsumerIndexSetBackBehindWhatJakirodSaw) {
    ring_and_fd fresh, other;
    make(fresh, 64);
    make(other, 64);
    consumer c(fresh.fd, fresh.ring->bytes());
    proto::release_slots(c.header(), 0u - 64u);  // a ring behind a producer at 0
    uint32_t moved = 0;
    EXPECT_EQ(other.ring->take_over(*fresh.ring, moved), EINVAL)
        << "nothing was ever written: nothing to move";

    ring_and_fd used, target;
    make(used, 64);
    make(target, 64);
    consumer u(used.fd, used.ring->bytes());
    for (uint64_t i = 1; i <= 64; ++i) {
        ASSERT_TRUE(used.ring->push(completion(i)));
    }
    ASSERT_EQ(u.poll().size(), 64u);
    ASSERT_TRUE(used.ring->push(completion(65)));  // jakirod saw the consumer at 64
    proto::release_slots(u.header(), 1);           // set back: "64 unread"
    EXPECT_EQ(target.ring->take_over(*used.ring, moved), EINVAL);
    proto::release_slots(u.header(), 64);  // where it really is: one unread
    ASSERT_EQ(target.ring->take_over(*used.ring, moved), 0);
    EXPECT_EQ(moved, 1u);
}

// A tenant keeps a mapping of every ring jakirod gave it (a page of each old CQ ring, say):
// the memfd's pages must not stay with it, charged to jakirod. A ring replaced by a resize
// keeps its header page only (the shim reads its arm once more), and every ring jakirod
// lets go of gives all its pages back.
TEST(CqRing, RingsJakirodLetsGoOfKeepNoPagesInTheTenantsMapping) {
    constexpr uint32_t capacity = 65536;  // 4 MiB of slots
    ring_and_fd r;
    make(r, capacity);
    consumer c(r.fd, r.ring->bytes());
    for (uint64_t i = 1; i <= capacity; ++i) {
        ASSERT_TRUE(r.ring->push(completion(i)));  // every page written
    }
    struct stat st {};
    ASSERT_EQ(fstat(r.fd, &st), 0);
    EXPECT_GE(uint64_t(st.st_blocks) * 512, capacity * sizeof(proto::cqe));
    r.ring->retire();
    ASSERT_EQ(fstat(r.fd, &st), 0);
    EXPECT_LE(uint64_t(st.st_blocks) * 512, proto::ring_page) << "the header page only";
    r.ring.reset();
    ASSERT_EQ(fstat(r.fd, &st), 0);
    EXPECT_EQ(st.st_blocks, 0) << "the tenant's mapping holds no memory of the host's";
    EXPECT_EQ(test::mappings_of(r.fd), 1) << "and is still there";
}

TEST(CqRing, ProducerAndConsumerThreadsLoseNothing) {
    ring_and_fd r;
    make(r, 64);
    consumer c(r.fd, r.ring->bytes());
    constexpr uint64_t total = 200000;
    std::thread producer([&] {
        for (uint64_t i = 0; i < total;) {
            if (r.ring->push(completion(i))) {
                ++i;
            } else {
                std::this_thread::yield();
            }
        }
    });
    uint64_t expected = 0;
    bool in_order = true;
    while (expected < total) {
        for (const auto& e : c.poll(32)) {
            in_order &= e.wr_id == expected++;
        }
    }
    producer.join();
    EXPECT_TRUE(in_order);
    EXPECT_TRUE(c.poll().empty());
}

struct sink_log {
    int calls = 0;
    uint64_t client = 0;
    uint32_t cq = 0;
    static void raise(void* self, uint64_t client, uint32_t cq) {
        auto* log = static_cast<sink_log*>(self);
        ++log->calls;
        log->client = client;
        log->cq = cq;
    }
};

TEST(CompletionQueue, NotifiesItsChannelOnlyWhenArmed) {
    ring_and_fd r;
    make(r, 8);
    consumer c(r.fd, r.ring->bytes());
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    completion_queue cq(std::move(r.ring), 0x1234, 7, pair[1], {});
    EXPECT_TRUE(cq.has_channel());
    ASSERT_TRUE(cq.complete(completion(1)));
    proto::comp_event_message m{};
    EXPECT_EQ(recv(pair[0], &m, sizeof(m), MSG_DONTWAIT), -1) << "not armed: no event";
    proto::arm_and_fence(c.header(), proto::arm_next);
    ASSERT_TRUE(cq.complete(completion(2)));
    ASSERT_EQ(recv(pair[0], &m, sizeof(m), MSG_DONTWAIT), static_cast<ssize_t>(sizeof(m)));
    EXPECT_EQ(m.hdr.opcode, static_cast<uint16_t>(proto::opcode::comp_event));
    EXPECT_EQ(m.cq_handle, 0x1234u);
    ASSERT_TRUE(cq.complete(completion(3)));
    EXPECT_EQ(recv(pair[0], &m, sizeof(m), MSG_DONTWAIT), -1) << "disarmed by the first";
    EXPECT_EQ(cq.notifications(), 1u);
    close(pair[0]);
}

TEST(CompletionQueue, AChannelNobodyReadsNeverBlocksAndKeepsTheCqArmed) {
    ring_and_fd r;
    make(r, 8);
    consumer c(r.fd, r.ring->bytes());
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    close(pair[0]);  // the program closed its channel
    completion_queue cq(std::move(r.ring), 9, 7, pair[1], {});
    proto::arm_and_fence(c.header(), proto::arm_next);
    EXPECT_TRUE(cq.complete(completion(1))) << "the completion itself is there";
    EXPECT_EQ(cq.lost_notifications(), 1u);
    EXPECT_NE(c.header().arm, 0u) << "still armed: the next completion tries again";
}

// A program polling an empty CQ naps (verbs_shim/idle_backoff.hh); the completion it waits
// for must end the nap at once, not when the nap's timer runs out.
TEST(CompletionQueue, ACompletionEndsTheNapOfAPollerOnTheEmptyRing) {
    using clock = std::chrono::steady_clock;
    ring_and_fd r;
    make(r, 8);
    consumer c(r.fd, r.ring->bytes());
    completion_queue cq(std::move(r.ring), 1, 7, -1, {});
    const uint32_t seen = proto::load_producer_acquire(c.header());
    std::atomic<bool> napping{false};
    clock::duration napped{};
    std::thread poller([&] {
        napping = true;
        const auto began = clock::now();
        proto::nap_until_completion(c.header(), seen, timespec{10, 0});  // a nap of 10 s at most
        napped = clock::now() - began;
    });
    while (!napping || proto::shared_index(c.header().poller_napping).load() == 0) {
        std::this_thread::yield();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // asleep in the futex by now
    ASSERT_TRUE(cq.complete(completion(1)));
    poller.join();
    EXPECT_LT(napped, std::chrono::seconds(2)) << "woken by the completion, not the timer";
    EXPECT_EQ(c.poll().size(), 1u);
    EXPECT_EQ(c.header().poller_napping, 0u) << "the nap is over: no wake owed";
}

TEST(CompletionQueue, APollerDoesNotNapOnACompletionThatIsAlreadyThere) {
    using clock = std::chrono::steady_clock;
    ring_and_fd r;
    make(r, 8);
    consumer c(r.fd, r.ring->bytes());
    completion_queue cq(std::move(r.ring), 1, 7, -1, {});
    const uint32_t seen = proto::load_producer_acquire(c.header());
    ASSERT_TRUE(cq.complete(completion(1)));  // lands between the empty poll and the nap
    const auto began = clock::now();
    proto::nap_until_completion(c.header(), seen, timespec{10, 0});
    EXPECT_LT(clock::now() - began, std::chrono::seconds(2));
    EXPECT_EQ(c.header().poller_napping, 0u);
}

TEST(CompletionQueue, OverflowDropsTheCompletionAndRaisesOneError) {
    ring_and_fd r;
    make(r, 2);
    sink_log log;
    completion_queue cq(std::move(r.ring), 0x4321, 42, -1, {&sink_log::raise, &log});
    EXPECT_TRUE(cq.complete(completion(1)));
    EXPECT_TRUE(cq.complete(completion(2)));
    EXPECT_FALSE(cq.complete(completion(3)));
    EXPECT_FALSE(cq.complete(completion(4)));
    EXPECT_EQ(log.calls, 1) << "IBV_EVENT_CQ_ERR once per CQ";
    EXPECT_EQ(log.client, 42u);
    EXPECT_EQ(log.cq, 0x4321u);
    EXPECT_TRUE(cq.ring().overflowed());
}

}  // namespace
}  // namespace jakiro::verbs
