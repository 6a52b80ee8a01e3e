#include "dataplane/eal_options.hh"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace jakiro {
namespace {

TEST(EalOptions, DefaultLcoresFloatEachWorkerOverTheCpusJakirodWasGiven) {
    // Started with CPUAffinity=1,3 on a four-CPU host: both workers stay on CPUs 1 and 3.
    EXPECT_EQ(default_lcores(2, {1, 3}), "0@(1,3),1@(1,3)");
    EXPECT_EQ(default_lcores(1, {1}), "0@(1)");
}

TEST(EalOptions, AllowedCpusAreTheAffinityJakirodStartsWith) {
    cpu_set_t saved;
    ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
    unsigned last = 0;
    for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &saved)) {
            last = cpu;
        }
    }
    // Run from a thread pinned to one CPU, as `taskset -c N jakirod` would start it.
    std::vector<unsigned> seen;
    std::thread([&] {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(last, &one);
        ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
        seen = allowed_cpus();
    }).join();
    EXPECT_EQ(seen, std::vector<unsigned>{last});
    // And every CPU of the affinity, in order, when nothing narrows it.
    std::vector<unsigned> all;
    for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &saved)) {
            all.push_back(cpu);
        }
    }
    EXPECT_EQ(allowed_cpus(), all);
}

}  // namespace
}  // namespace jakiro
