// The worker's one wait on its doorbells and its frame sources: a ring or a frame ends it
// directly, including one that lands right as the worker decides to sleep.

#include "dataplane/poll_loop/uring_sleeper.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "rnic/doorbell_set.hh"

namespace jakiro {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
namespace proto = verbs_proto;

constexpr uint64_t long_sleep_us = 2'000'000;
// A wake that is heard comes within this; a lost one waits out long_sleep_us.
constexpr auto prompt = 500ms;

class UringSleeperTest : public ::testing::Test {
  protected:
    void SetUp() override {
        sleeper = uring_sleeper::open();
        if (!sleeper) {
            GTEST_SKIP() << "this kernel has no io_uring FUTEX_WAITV (Linux 6.7+), or io_uring "
                            "is disabled: jakirod sleeps the older way there";
        }
        page = rnic::doorbell_memory::create();
        ASSERT_NE(page, nullptr);
        bells.set(0, &page->page());
        ASSERT_EQ(pipe2(frames, O_NONBLOCK), 0);
    }
    void TearDown() override {
        for (const int fd : frames) {
            if (fd >= 0) {
                close(fd);
            }
        }
    }
    // What engine::prepare_sleep() does first: note the counts before the last look.
    void arm() { bells.arm(nullptr); }
    uring_sleeper::woken sleep(uint64_t us) {
        return sleeper->sleep(frames[0], bells.armed(), bells.generation(), us);
    }
    // A sleep of at most `us`, and how long it took.
    struct timed_wake {
        uring_sleeper::woken woke;
        clock_type::duration took;
    };
    timed_wake timed_sleep(uint64_t us = long_sleep_us) {
        const auto t0 = clock_type::now();
        const auto woke = sleep(us);
        return {woke, clock_type::now() - t0};
    }
    // A sleep during which another thread (the shim, the fabric) does `act` 20 ms in.
    timed_wake sleep_while(const std::function<void()>& act) {
        std::thread other([&act] {
            std::this_thread::sleep_for(20ms);
            act();
        });
        const timed_wake w = timed_sleep();
        other.join();
        return w;
    }
    void send_frame() { ASSERT_EQ(write(frames[1], "f", 1), 1); }
    void drain_frames() {
        char buf[64];
        (void)!read(frames[0], buf, sizeof(buf));
    }
    void ring() { proto::wake_doorbell(page->page()); }

    std::unique_ptr<uring_sleeper> sleeper;
    std::unique_ptr<rnic::doorbell_memory> page;
    rnic::doorbell_set bells;
    int frames[2] = {-1, -1};  // a pipe stands for the frame sources' epoll set
};

TEST_F(UringSleeperTest, NothingHappeningSleepsTheWholeTimeout) {
    arm();
    const auto [woke, took] = timed_sleep(30'000);
    EXPECT_GE(took, 29ms);
    EXPECT_FALSE(woke.frames);
    EXPECT_FALSE(woke.doorbell);
}

TEST_F(UringSleeperTest, ARingAfterTheLastLookEndsTheSleepAtOnce) {
    arm();
    ring();  // the shim saw `sleeping` between the worker's last look and its wait
    const auto [woke, took] = timed_sleep();
    EXPECT_LT(took, prompt);
    EXPECT_TRUE(woke.doorbell);
    EXPECT_FALSE(woke.frames);
}

TEST_F(UringSleeperTest, AFrameWaitingWhenTheSleepBeginsEndsItAtOnce) {
    send_frame();
    arm();
    const auto [woke, took] = timed_sleep();
    EXPECT_LT(took, prompt);
    EXPECT_TRUE(woke.frames);
}

TEST_F(UringSleeperTest, ARingDuringTheSleepWakesIt) {
    arm();
    const auto [woke, took] = sleep_while([this] { ring(); });
    EXPECT_LT(took, prompt);
    EXPECT_TRUE(woke.doorbell);
}

TEST_F(UringSleeperTest, AFrameDuringTheSleepWakesIt) {
    arm();
    const auto [woke, took] = sleep_while([this] { send_frame(); });
    EXPECT_LT(took, prompt);
    EXPECT_TRUE(woke.frames);
    EXPECT_FALSE(woke.doorbell);
}

// A frame ends a sleep and leaves its futex wait queued for the next one: a ring right after
// the next sleep's last look is still heard, and so is one during it.
TEST_F(UringSleeperTest, AWaitAFrameLeftQueuedStillHearsTheNextRings) {
    arm();
    send_frame();
    ASSERT_TRUE(sleep(long_sleep_us).frames);
    drain_frames();

    arm();
    ring();
    const timed_wake after_last_look = timed_sleep();
    EXPECT_LT(after_last_look.took, prompt);
    EXPECT_TRUE(after_last_look.woke.doorbell);

    arm();
    const timed_wake during = sleep_while([this] { ring(); });
    EXPECT_LT(during.took, prompt);
    EXPECT_TRUE(during.woke.doorbell);
}

// A vNIC's page installed while a wait on the old set is queued: the new page is watched.
TEST_F(UringSleeperTest, APageAddedBetweenSleepsIsHeard) {
    arm();
    send_frame();
    ASSERT_TRUE(sleep(long_sleep_us).frames);  // the wait on page 0 stays queued
    drain_frames();
    auto second = rnic::doorbell_memory::create();
    ASSERT_NE(second, nullptr);
    bells.set(1, &second->page());
    arm();
    const auto [woke, took] = sleep_while([&second] { proto::wake_doorbell(second->page()); });
    EXPECT_LT(took, prompt);
    EXPECT_TRUE(woke.doorbell);
    bells.set(1, nullptr);
}

// The race itself, many times: the worker announces its sleep (as QP rings' `sleeping`) after
// arming, a tenant or the fabric acts the moment it sees that, at any point before or during
// the wait. No wake may be lost: each sleep ends promptly, never at its 2 s timeout.
TEST_F(UringSleeperTest, APostOrFrameAsTheWorkerDecidesToSleepIsNeverLost) {
    std::atomic<bool> sleeping{false};
    std::atomic<int> round{0};
    std::atomic<bool> done{false};
    std::thread other([&] {
        int seen = 0;
        while (!done.load()) {
            if (!sleeping.load(std::memory_order_seq_cst) || round.load() == seen) {
                continue;
            }
            seen = round.load();
            if (seen % 2 == 0) {
                ring();
            } else {
                send_frame();
            }
        }
    });
    for (int i = 1; i <= 400; ++i) {
        arm();
        round.store(i);
        sleeping.store(true, std::memory_order_seq_cst);
        const auto [woke, took] = timed_sleep();
        sleeping.store(false, std::memory_order_seq_cst);
        ASSERT_LT(took, prompt) << "round " << i << ": a wake was lost";
        ASSERT_TRUE(woke.frames || woke.doorbell) << "round " << i;
        drain_frames();
    }
    done.store(true);
    other.join();
}

}  // namespace
}  // namespace jakiro
