// An empty CQ poll spins a few times, then naps; a completion starts the spins over. The spins
// and the CQs a nap waits on are the polling thread's.

#include "verbs_shim/idle_backoff.hh"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace jakiro::verbs_shim {
namespace {

// Ring headers only: the backoff reads nothing but their addresses until a nap.
std::unique_ptr<verbs_proto::cq_ring_header[]> rings(unsigned n) {
    return std::make_unique<verbs_proto::cq_ring_header[]>(n);
}

TEST(IdleBackoff, TheFirstEmptyPollsReturnAtOnceAndLaterOnesNap) {
    idle_backoff::on_progress();
    auto cq = rings(1);
    for (uint32_t i = 0; i < idle_backoff::spins; ++i) {
        EXPECT_FALSE(idle_backoff::after_empty_poll(cq[0], 0)) << "poll " << i;
    }
    EXPECT_TRUE(idle_backoff::after_empty_poll(cq[0], 0));
    EXPECT_TRUE(idle_backoff::after_empty_poll(cq[0], 0));
}

TEST(IdleBackoff, ACompletionStartsTheSpinsOver) {
    idle_backoff::on_progress();
    auto cq = rings(1);
    for (uint32_t i = 0; i <= idle_backoff::spins; ++i) {
        idle_backoff::after_empty_poll(cq[0], 0);
    }
    ASSERT_TRUE(idle_backoff::after_empty_poll(cq[0], 0));
    idle_backoff::on_progress();
    EXPECT_EQ(idle_backoff::remembered_cqs(), 0u);
    for (uint32_t i = 0; i < idle_backoff::spins; ++i) {
        EXPECT_FALSE(idle_backoff::after_empty_poll(cq[0], 0)) << "poll " << i << " after it";
    }
    EXPECT_TRUE(idle_backoff::after_empty_poll(cq[0], 0));
}

// A program polling its receive and its send CQ in turn spins on the two together: a
// completion in either starts the spins over, and the empty polls of both count.
TEST(IdleBackoff, EmptyPollsOfSeveralCqsCountTogetherAndEachIsRemembered) {
    idle_backoff::on_progress();
    auto cq = rings(2);
    for (uint32_t i = 0; i < idle_backoff::spins; ++i) {
        EXPECT_FALSE(idle_backoff::after_empty_poll(cq[i % 2], 0)) << "poll " << i;
    }
    EXPECT_TRUE(idle_backoff::after_empty_poll(cq[0], 0));
    EXPECT_EQ(idle_backoff::remembered_cqs(), 2u);
    EXPECT_TRUE(idle_backoff::remembers(cq[0]));
    EXPECT_TRUE(idle_backoff::remembers(cq[1]));
}

TEST(IdleBackoff, ThreadsSpinAndRememberApart) {
    idle_backoff::on_progress();
    auto cq = rings(2);
    for (uint32_t i = 0; i <= idle_backoff::spins; ++i) {
        idle_backoff::after_empty_poll(cq[0], 0);
    }
    bool other_naps_at_once = true;
    bool other_remembers_ours = true;
    std::thread([&] {
        other_naps_at_once = idle_backoff::after_empty_poll(cq[1], 0);
        other_remembers_ours = idle_backoff::remembers(cq[0]);
    }).join();
    EXPECT_FALSE(other_naps_at_once);
    EXPECT_FALSE(other_remembers_ours);
    EXPECT_FALSE(idle_backoff::remembers(cq[1]));
}

TEST(IdleBackoff, ThereAreAtMostMaxCqsAndTheOneFoundEmptyLongestAgoIsForgotten) {
    idle_backoff::on_progress();
    auto cq = rings(idle_backoff::max_cqs + 1);
    for (unsigned i = 0; i <= idle_backoff::max_cqs; ++i) {
        idle_backoff::after_empty_poll(cq[i], 0);
    }
    EXPECT_EQ(idle_backoff::remembered_cqs(), idle_backoff::max_cqs);
    EXPECT_FALSE(idle_backoff::remembers(cq[0]));
    EXPECT_TRUE(idle_backoff::remembers(cq[idle_backoff::max_cqs]));
}

// destroy_cq and resize_cq retire rings before they unmap them: no thread remembers any.
TEST(IdleBackoff, RetiredRingsAreForgottenByEveryThread) {
    idle_backoff::on_progress();
    auto cq = rings(1);
    idle_backoff::after_empty_poll(cq[0], 0);
    ASSERT_TRUE(idle_backoff::remembers(cq[0]));
    std::thread([] { idle_backoff::retire_cq_rings(); }).join();
    EXPECT_FALSE(idle_backoff::remembers(cq[0]));
    EXPECT_EQ(idle_backoff::remembered_cqs(), 0u);
}

// Naps of several polling threads overlap without a gap; a destroy_cq must still get its turn
// (it waits for the naps in progress, not for the polling to stop).
TEST(IdleBackoff, ThreadsNappingWithoutPauseDoNotKeepARetirementWaiting) {
    constexpr unsigned pollers = 4;
    auto cq = rings(pollers);
    std::atomic<bool> stop{false};
    std::atomic<unsigned> napping{0};
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < pollers; ++t) {
        threads.emplace_back([&, t] {
            idle_backoff::on_progress();
            bool counted = false;
            while (!stop.load()) {
                if (idle_backoff::after_empty_poll(cq[t], 0)) {
                    if (!counted) {
                        counted = true;
                        ++napping;
                    }
                    idle_backoff::nap();
                }
            }
        });
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (napping.load() < pollers && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
    }
    std::atomic<bool> retired{false};
    std::thread retire([&] {
        idle_backoff::retire_cq_rings();
        retired = true;
    });
    while (!retired.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const bool in_time = retired.load();
    stop = true;
    retire.join();
    for (auto& t : threads) {
        t.join();
    }
    EXPECT_EQ(napping.load(), pollers) << "not every poller napped";
    EXPECT_TRUE(in_time) << "the retirement waited for the polling to stop";
}

// A program that forks while one of its threads naps (an MPI launcher, a shell-out): the child
// has only the forking thread, and its destroy_cq must not wait for the parent's napper.
TEST(IdleBackoff, AChildForkedDuringAnotherThreadsNapCanRetireRings) {
    auto cq = rings(1);
    std::atomic<bool> stop{false};
    std::atomic<bool> napping{false};
    std::thread napper([&] {
        idle_backoff::on_progress();
        while (!stop.load()) {
            if (idle_backoff::after_empty_poll(cq[0], 0)) {
                napping = true;
                idle_backoff::nap();
            }
        }
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!napping.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
    }
    ASSERT_TRUE(napping.load());
    // The napper holds the lock nearly all the time: most forks catch it held.
    constexpr int forks = 40;
    int stuck = 0;
    int failed = 0;
    for (int i = 0; i < forks; ++i) {
        const pid_t child = fork();
        if (child == 0) {
            idle_backoff::retire_cq_rings();
            _exit(0);
        }
        ASSERT_GT(child, 0);
        int status = 0;
        pid_t done = 0;
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while ((done = waitpid(child, &status, WNOHANG)) == 0 &&
               std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (done == 0) {
            ++stuck;
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            ++failed;
        }
    }
    stop = true;
    napper.join();
    EXPECT_EQ(stuck, 0) << "children whose retirement waited for a napper they do not have";
    EXPECT_EQ(failed, 0);
}

}  // namespace
}  // namespace jakiro::verbs_shim
