// The QP ring across a restart: a successor attaches the memfd its predecessor made and
// handed over, sees what the tenant posted, and resumes the engine's own indices.

#include "rnic/queues/qp_ring.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>

namespace jakiro::verbs {
namespace {

namespace proto = verbs_proto;

constexpr uint32_t sq = 16, rq = 8;

// The tenant's mapping of a ring: posts `n` sends.
void post_sends(int fd, uint32_t n) {
    const std::size_t bytes = proto::qp_ring_bytes(sq, rq);
    auto* h = static_cast<proto::qp_ring_header*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ASSERT_NE(h, MAP_FAILED);
    for (uint32_t i = 0; i < n; ++i) {
        proto::sq_slots(h)[i & (sq - 1)].wr_id = 1000 + i;
    }
    proto::publish_wqes(h->sq_producer, n);
    munmap(h, bytes);
}

TEST(QpRingAttach, ASuccessorSeesWhatWasPostedAndGoesOnFromTheSavedIndices) {
    std::unique_ptr<qp_ring> old;
    int fd = -1;
    ASSERT_EQ(qp_ring::create(sq, rq, 42, old, fd), 0);
    post_sends(fd, 5);
    proto::send_wqe w{};
    old->take_send(w);
    old->take_send(w);
    old->retire_send(1);
    const uint32_t taken = old->send_taken(), retired = old->send_retired();
    old->leave_pages_to_successor();
    old.reset();  // the old process goes; the pages stay

    std::unique_ptr<qp_ring> ring;
    ASSERT_EQ(qp_ring::attach(fd, sq, rq, ring), 0);
    ASSERT_TRUE(ring->resume(taken, retired, 0, 0));
    EXPECT_EQ(ring->send_pending().count, 3u);
    EXPECT_FALSE(ring->send_pending().corrupt);
    ring->take_send(w);
    EXPECT_EQ(w.wr_id, 1002u) << "the next WQE the old process had not taken";
    ring->leave_pages_to_successor();
    close(fd);
}

TEST(QpRingAttach, ARingReleasedNormallyHandsItsPagesBack) {
    std::unique_ptr<qp_ring> old;
    int fd = -1;
    ASSERT_EQ(qp_ring::create(sq, rq, 42, old, fd), 0);
    post_sends(fd, 5);
    old.reset();  // not handed over: its pages are punched out
    std::unique_ptr<qp_ring> ring;
    ASSERT_EQ(qp_ring::attach(fd, sq, rq, ring), 0);
    EXPECT_EQ(ring->send_pending().count, 0u);
    close(fd);
}

TEST(QpRingAttach, RefusesAMemfdThatIsNotSuchARing) {
    std::unique_ptr<qp_ring> ring;
    int fd = -1;
    ASSERT_EQ(qp_ring::create(sq, rq, 42, ring, fd), 0);
    std::unique_ptr<qp_ring> other;
    EXPECT_EQ(qp_ring::attach(fd, sq * 2, rq, other), EINVAL) << "other capacities";
    EXPECT_EQ(qp_ring::attach(fd, 3, rq, other), EINVAL);
    EXPECT_EQ(other, nullptr);
    // Unsealed: it could shrink under jakirod's mapping.
    const int loose = memfd_create("loose", MFD_CLOEXEC);
    ASSERT_EQ(ftruncate(loose, static_cast<off_t>(proto::qp_ring_bytes(sq, rq))), 0);
    EXPECT_EQ(qp_ring::attach(loose, sq, rq, other), EINVAL);
    close(loose);
    EXPECT_EQ(qp_ring::attach(-1, sq, rq, other), EBADF);
    ring->leave_pages_to_successor();
    close(fd);
}

TEST(QpRingAttach, ResumeRefusesIndicesNoRingCouldHave) {
    std::unique_ptr<qp_ring> ring;
    int fd = -1;
    ASSERT_EQ(qp_ring::create(sq, rq, 42, ring, fd), 0);
    EXPECT_FALSE(ring->resume(sq + 1, 0, 0, 0)) << "more taken than a ring holds";
    EXPECT_FALSE(ring->resume(0, 1, 0, 0)) << "retired past taken";
    EXPECT_FALSE(ring->resume(0, 0, rq + 5, 4));
    EXPECT_EQ(ring->send_taken(), 0u) << "nothing changed";
    EXPECT_TRUE(ring->resume(0xFFFFFFFE, 0xFFFFFFF0, 3, 1)) << "wrapped indices are fine";
    EXPECT_EQ(ring->send_taken(), 0xFFFFFFFEu);
    close(fd);
}

}  // namespace
}  // namespace jakiro::verbs
