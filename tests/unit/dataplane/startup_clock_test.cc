#include "dataplane/startup_clock.hh"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace jakiro {
namespace {

TEST(StartupClock, EachPhaseIsTheTimeSinceThePreviousMarkInOrder) {
    startup_clock clock;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    clock.mark("eal");
    clock.mark("pool");
    const std::string phases = clock.phases();
    // "eal=NN.N pool=N.N": eal took the sleep, pool next to nothing.
    ASSERT_EQ(phases.rfind("eal=", 0), 0u) << phases;
    const auto pool = phases.find(" pool=");
    ASSERT_NE(pool, std::string::npos) << phases;
    const double eal_ms = std::strtod(phases.c_str() + 4, nullptr);
    const double pool_ms = std::strtod(phases.c_str() + pool + 6, nullptr);
    EXPECT_GE(eal_ms, 20.0) << phases;
    EXPECT_LT(pool_ms, 20.0) << phases;
    // Each phase prints rounded to 0.1 ms: two of them may read up to 0.1 ms above the total.
    EXPECT_GE(clock.total_ms() + 0.1, eal_ms + pool_ms);
}

}  // namespace
}  // namespace jakiro
