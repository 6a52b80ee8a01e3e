#include "dataplane/restart/run_marker.hh"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

namespace jakiro {
namespace {

std::string marker_in_tmp() {
    return "/tmp/jakiro-run-marker-test-" + std::to_string(getpid());
}

void write_marker_for(const std::string& path, pid_t pid) {
    std::ofstream(path) << pid << " 1 2 3\n";
}

// Waits until the child has ended (without reaping it: it stays a zombie).
void wait_ended(pid_t child) {
    siginfo_t info{};
    ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
}

TEST(RunMarker, ALiveProcessIsNoCrash) {
    const std::string path = marker_in_tmp();
    write_marker_for(path, getpid());
    restart_record record;
    EXPECT_FALSE(predecessor_crashed(path, record));
    std::remove(path.c_str());
}

TEST(RunMarker, AKilledProcessItsParentHasNotReapedYetIsACrash) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        pause();
        _exit(0);
    }
    const std::string path = marker_in_tmp();
    write_marker_for(path, child);
    restart_record record;
    ASSERT_FALSE(predecessor_crashed(path, record));  // control: it runs
    kill(child, SIGKILL);
    wait_ended(child);  // a zombie now: kill(pid, 0) still succeeds
    EXPECT_TRUE(predecessor_crashed(path, record));
    waitpid(child, nullptr, 0);
    EXPECT_TRUE(predecessor_crashed(path, record));  // and reaped
    std::remove(path.c_str());
}

}  // namespace
}  // namespace jakiro
