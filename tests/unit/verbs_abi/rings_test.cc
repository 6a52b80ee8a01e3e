// The CQ ring's consumer-side clean-up when a QP goes to RESET: that QP's unread completions
// go, the others stay in order, and only slots the consumer owns are touched. And what a QP
// ring's `doorbell_wanted` asks of the shim after it publishes sends or receives.

#include "verbs_abi/rings.hh"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace jakiro::verbs_proto {
namespace {

constexpr uint32_t capacity = 8;

struct ring_memory {
    ring_memory() {
        bytes = cq_ring_bytes(capacity);
        base = static_cast<cq_ring_header*>(std::aligned_alloc(ring_page, bytes));
        std::memset(static_cast<void*>(base), 0, bytes);
        base->capacity = capacity;
    }
    ~ring_memory() { std::free(base); }
    ring_memory(const ring_memory&) = delete;
    ring_memory& operator=(const ring_memory&) = delete;

    // Publishes completions (qp_num, wr_id) from the current producer on, as jakirod does.
    void publish(const std::vector<std::pair<uint32_t, uint64_t>>& entries) {
        uint32_t p = load_producer_acquire(*base);
        for (const auto& [qpn, wr_id] : entries) {
            cqe& e = cq_slots(base)[p & (capacity - 1)];
            e = cqe{};
            e.qp_num = qpn;
            e.wr_id = wr_id;
            ++p;
        }
        publish_producer(*base, p);
    }
    // What a poll would read now, oldest first, as (qp_num, wr_id).
    std::vector<std::pair<uint32_t, uint64_t>> unread() const {
        std::vector<std::pair<uint32_t, uint64_t>> out;
        for (uint32_t i = load_own_consumer(*base); i != load_producer_acquire(*base); ++i) {
            const cqe& e = cq_slots(base)[i & (capacity - 1)];
            out.emplace_back(e.qp_num, e.wr_id);
        }
        return out;
    }

    cq_ring_header* base = nullptr;
    std::size_t bytes = 0;
};

using entries = std::vector<std::pair<uint32_t, uint64_t>>;

TEST(CqRingDrop, AResetQpsCompletionsGoAndTheOthersStayInOrder) {
    ring_memory r;
    r.publish({{7, 1}, {9, 2}, {7, 3}, {9, 4}, {9, 5}, {7, 6}});
    EXPECT_EQ(drop_completions_of(*r.base, capacity, 7), 3u);
    EXPECT_EQ(r.unread(), (entries{{9, 2}, {9, 4}, {9, 5}}));
    EXPECT_EQ(load_producer_acquire(*r.base), 6u) << "the producer's index is jakirod's";
    EXPECT_EQ(load_own_consumer(*r.base), 3u) << "the freed slots are handed back";
}

TEST(CqRingDrop, WorksAcrossTheRingsWrapAndLeavesSlotsPastTheProducerAlone) {
    ring_memory r;
    r.publish({{1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}});
    release_slots(*r.base, 6);  // read by a poll: the next completions wrap around
    r.publish({{9, 10}, {7, 11}, {7, 12}, {9, 13}, {7, 14}});
    cq_slots(r.base)[3].wr_id = 0xdead;  // a slot past the producer (free: jakirod's next)
    EXPECT_EQ(drop_completions_of(*r.base, capacity, 7), 3u);
    EXPECT_EQ(r.unread(), (entries{{9, 10}, {9, 13}}));
    EXPECT_EQ(cq_slots(r.base)[3].wr_id, 0xdeadu) << "only the consumer's slots are touched";
    // jakirod goes on publishing into the freed slots; a poll reads everything in order.
    r.publish({{9, 15}, {9, 16}, {9, 17}});
    EXPECT_EQ(r.unread(), (entries{{9, 10}, {9, 13}, {9, 15}, {9, 16}, {9, 17}}));
}

TEST(CqRingDrop, NothingOfTheQpLeavesTheRingUntouched) {
    ring_memory r;
    r.publish({{9, 1}, {8, 2}});
    EXPECT_EQ(drop_completions_of(*r.base, capacity, 7), 0u);
    EXPECT_EQ(r.unread(), (entries{{9, 1}, {8, 2}}));
    EXPECT_EQ(load_own_consumer(*r.base), 0u);
    EXPECT_EQ(drop_completions_of(*r.base, capacity, 9), 1u);
    EXPECT_EQ(drop_completions_of(*r.base, capacity, 8), 1u);
    EXPECT_TRUE(r.unread().empty());
}

TEST(CqRingDrop, AProducerThatClaimsMoreThanTheRingHoldsIsReadAsOneRingsWorth) {
    ring_memory r;
    r.publish({{7, 1}, {9, 2}});
    publish_producer(*r.base, 1000);  // nonsense from a broken peer: never read past the ring
    const uint32_t dropped = drop_completions_of(*r.base, capacity, 7);
    EXPECT_LE(dropped, capacity);
    EXPECT_EQ(load_own_consumer(*r.base), dropped);
}

// Sends ring whenever jakirod asks; receives only when it asks for every post (a QP in ERR).
// A jakirod that writes only 0 and 1 gets every post rung; whatever else a tenant writes into
// its own ring reads as "ring".
TEST(QpDoorbell, ReceivesRingOnlyWhenJakirodAsksForEveryPost) {
    qp_ring_header h{};
    struct asked {
        uint32_t value;
        bool sends;
        bool receives;
    };
    for (const asked& a :
         {asked{doorbell_not_wanted, false, false}, asked{doorbell_for_sends, true, false},
          asked{doorbell_for_every_post, true, true}, asked{7, true, true},
          asked{UINT32_MAX, true, true}}) {
        shared_index(h.doorbell_wanted).store(a.value);
        EXPECT_EQ(doorbell_wanted_after_publish(h), a.sends) << a.value;
        EXPECT_EQ(doorbell_wanted_after_publishing_receives(h), a.receives) << a.value;
    }
    set_doorbell_wanted(h, doorbell_for_sends);
    EXPECT_FALSE(doorbell_wanted_after_publishing_receives(h));
    set_doorbell_wanted(h, doorbell_for_every_post);
    EXPECT_EQ(h.doorbell_wanted, 1u) << "the value a shim of ring version 2 knows";
}

}  // namespace
}  // namespace jakiro::verbs_proto
