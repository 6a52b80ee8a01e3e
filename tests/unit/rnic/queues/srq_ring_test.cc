// jakirod's end of an SRQ ring against a producer that writes it as the shim does: identity
// and seals, WQEs taken once by copy with their slot freed at once, a hostile producer, and
// the limit event (armed, fired once, disarmed).

#include "rnic/queues/srq_ring.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace jakiro::verbs {
namespace {

namespace proto = verbs_proto;

struct raised {
    uint64_t client;
    uint32_t type;
    uint32_t handle;
};

class SrqRing : public testing::Test {
  protected:
    void make(uint32_t capacity) {
        srq_event_sink sink{
            [](void* self, uint64_t client, uint32_t type, uint32_t handle) {
                static_cast<SrqRing*>(self)->events.push_back({client, type, handle});
            },
            this};
        ASSERT_EQ(shared_receive_queue::create(capacity, 0x1234, 77, 0x500, proto::wqe_max_sge,
                                               sink, srq, fd),
                  0);
        bytes = srq->bytes();
        shim = static_cast<proto::srq_ring_header*>(
            mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        ASSERT_NE(shim, MAP_FAILED);
    }
    void TearDown() override {
        if (shim != nullptr) {
            munmap(shim, bytes);
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    // What ibv_post_srq_recv does.
    void post(uint64_t wr_id) {
        proto::recv_wqe& w = proto::srq_slots(shim)[head & (shim->capacity - 1)];
        std::memset(&w, 0, sizeof(w));
        w.wr_id = wr_id;
        w.num_sge = 1;
        w.sg[0] = {0x1000 + wr_id, 64, 0x99};
        proto::publish_wqes(shim->producer, ++head);
    }
    std::size_t limit_events() const {
        std::size_t n = 0;
        for (const auto& e : events) {
            n += e.type == static_cast<uint32_t>(proto::event_type::srq_limit_reached) ? 1 : 0;
        }
        return n;
    }

    std::shared_ptr<shared_receive_queue> srq;
    int fd = -1;
    std::size_t bytes = 0;
    proto::srq_ring_header* shim = nullptr;
    uint32_t head = 0;
    std::vector<raised> events;
};

TEST_F(SrqRing, IsASealedMemfdWithItsIdentityWrittenBeforeItLeaves) {
    make(8);
    EXPECT_EQ(bytes, proto::srq_ring_bytes(8));
    EXPECT_EQ(shim->magic, proto::srq_ring_magic);
    EXPECT_EQ(shim->version, proto::srq_ring_version);
    EXPECT_EQ(shim->capacity, 8u);
    EXPECT_EQ(shim->slot_size, proto::wqe_size);
    EXPECT_EQ(shim->srq_handle, 0x1234u);
    const int seals = fcntl(fd, F_GET_SEALS);
    EXPECT_NE(seals & F_SEAL_SHRINK, 0);
    EXPECT_NE(seals & F_SEAL_GROW, 0);
    EXPECT_NE(ftruncate(fd, 0), 0) << "a client must not shrink the ring under jakirod";
    EXPECT_EQ(srq->owner(), 77u);
    EXPECT_EQ(srq->pd(), 0x500u);
}

TEST_F(SrqRing, CapacityMustBeAPowerOfTwo) {
    std::shared_ptr<shared_receive_queue> out;
    int f = -1;
    EXPECT_EQ(shared_receive_queue::create(6, 1, 1, 1, 16, {}, out, f), EINVAL);
    EXPECT_EQ(shared_receive_queue::create(0, 1, 1, 1, 16, {}, out, f), EINVAL);
    EXPECT_EQ(out, nullptr);
}

TEST_F(SrqRing, TakesEachWqeOnceByCopyAndFreesItsSlotAtOnce) {
    make(4);
    proto::recv_wqe w;
    EXPECT_FALSE(srq->take(w)) << "nothing posted";
    for (uint64_t id = 1; id <= 4; ++id) {
        post(id);
    }
    EXPECT_EQ(srq->posted(), 4u);
    ASSERT_TRUE(srq->take(w));
    EXPECT_EQ(w.wr_id, 1u);
    EXPECT_EQ(w.sg[0].addr, 0x1001u);
    EXPECT_EQ(proto::load_retired_acquire(shim->consumer), 1u) << "the slot is free once taken";
    // A program rewriting a taken slot changes nothing jakirod already has.
    proto::srq_slots(shim)[0].wr_id = 666;
    EXPECT_EQ(w.wr_id, 1u);
    // Wrapping: the freed slot takes a fifth WQE.
    post(5);
    for (uint64_t id = 2; id <= 5; ++id) {
        ASSERT_TRUE(srq->take(w));
        EXPECT_EQ(w.wr_id, id);
    }
    EXPECT_FALSE(srq->take(w));
    EXPECT_EQ(proto::load_retired_acquire(shim->consumer), 5u);
    EXPECT_TRUE(events.empty());
}

TEST_F(SrqRing, AProducerMoreThanARingAheadBreaksTheSrqOnceAndReadsAsEmpty) {
    make(4);
    proto::publish_wqes(shim->producer, 5);
    proto::recv_wqe w;
    EXPECT_FALSE(srq->take(w));
    EXPECT_FALSE(srq->take(w));
    EXPECT_EQ(srq->posted(), 0u);
    ASSERT_EQ(events.size(), 1u) << "reported once";
    EXPECT_EQ(events[0].type, static_cast<uint32_t>(proto::event_type::srq_err));
    EXPECT_EQ(events[0].handle, 0x1234u);
    EXPECT_EQ(events[0].client, 77u);
    proto::publish_wqes(shim->producer, 1);
    EXPECT_FALSE(srq->take(w)) << "a broken SRQ stays broken";
}

TEST_F(SrqRing, AnArmedLimitFiresOnceWhenATakeLeavesFewerThanItThenDisarms) {
    make(8);
    for (uint64_t id = 1; id <= 5; ++id) {
        post(id);
    }
    proto::recv_wqe w;
    ASSERT_TRUE(srq->take(w));  // 4 left, not armed
    EXPECT_EQ(limit_events(), 0u);
    srq->arm_limit(3);
    EXPECT_EQ(srq->armed_limit(), 3u);
    ASSERT_TRUE(srq->take(w));  // 3 left: not below 3
    EXPECT_EQ(limit_events(), 0u);
    ASSERT_TRUE(srq->take(w));  // 2 left: below
    ASSERT_EQ(limit_events(), 1u);
    EXPECT_EQ(events.back().handle, 0x1234u);
    EXPECT_EQ(events.back().client, 77u);
    EXPECT_EQ(srq->armed_limit(), 0u) << "fired: disarmed";
    ASSERT_TRUE(srq->take(w));  // 1 left
    EXPECT_EQ(limit_events(), 1u) << "once per arming";
    // Armed below the limit: the next take fires (as rxe and mlx5).
    srq->arm_limit(4);
    ASSERT_TRUE(srq->take(w));
    EXPECT_EQ(limit_events(), 2u);
    // Disarming with 0.
    post(6);
    post(7);
    srq->arm_limit(8);
    srq->arm_limit(0);
    ASSERT_TRUE(srq->take(w));
    EXPECT_EQ(limit_events(), 2u);
}

}  // namespace
}  // namespace jakiro::verbs
