#include "handover/listen_fds.hh"

#include <gtest/gtest.h>

namespace jakiro::handover {
namespace {

TEST(ListenFds, NothingSetPassesNothingAndSaysNothing) {
    const auto l = parse_listen_fds(nullptr, nullptr, nullptr, 42);
    EXPECT_TRUE(l.fds.empty());
    EXPECT_EQ(l.ignored, "");
}

TEST(ListenFds, TheManagersDescriptorsComeAtThreeOnwardWithTheirNames) {
    const auto l = parse_listen_fds("42", "3", "jakiro-fd-0:jakiro-fd-1:jakiro-state", 42);
    ASSERT_EQ(l.fds.size(), 3u) << l.ignored;
    EXPECT_EQ(l.fds[0].fd, 3);
    EXPECT_EQ(l.fds[0].name, "jakiro-fd-0");
    EXPECT_EQ(l.fds[2].fd, 5);
    EXPECT_EQ(l.fds[2].name, "jakiro-state");
}

TEST(ListenFds, WithoutNamesEachIsUnknown) {
    const auto l = parse_listen_fds("42", "2", nullptr, 42);
    ASSERT_EQ(l.fds.size(), 2u);
    EXPECT_EQ(l.fds[1].name, "unknown");
}

TEST(ListenFds, ZeroDescriptorsWithAnEmptyNameListIsFine) {
    const auto l = parse_listen_fds("42", "0", "", 42);
    EXPECT_TRUE(l.fds.empty());
    EXPECT_EQ(l.ignored, "");
}

TEST(ListenFds, DescriptorsMeantForAnotherProcessAreNotBelieved) {
    const auto l = parse_listen_fds("41", "1", "jakiro-state", 42);
    EXPECT_TRUE(l.fds.empty());
    EXPECT_NE(l.ignored.find("LISTEN_PID 41 is another process"), std::string::npos) << l.ignored;
}

TEST(ListenFds, ALISTENPIDThatIsNoPidIsNotBelieved) {
    for (const char* pid : {"", "abc", "-42", "42x", " 42", "99999999999999999999"}) {
        const auto l = parse_listen_fds(pid, "1", "jakiro-state", 42);
        EXPECT_TRUE(l.fds.empty()) << pid;
        EXPECT_NE(l.ignored.find("LISTEN_PID"), std::string::npos) << pid << ": " << l.ignored;
    }
    const auto missing = parse_listen_fds(nullptr, "1", "jakiro-state", 42);
    EXPECT_TRUE(missing.fds.empty());
    EXPECT_EQ(missing.ignored, "LISTEN_FDS without LISTEN_PID");
}

TEST(ListenFds, ALISTENFDSThatIsNotACountPassesNothing) {
    for (const char* count : {"", "three", "-1", "1.5", "2 ", "99999999999"}) {
        const auto l = parse_listen_fds("42", count, nullptr, 42);
        EXPECT_TRUE(l.fds.empty()) << count;
        EXPECT_NE(l.ignored.find("LISTEN_FDS '"), std::string::npos) << count << ": " << l.ignored;
    }
    const auto missing = parse_listen_fds("42", nullptr, nullptr, 42);
    EXPECT_TRUE(missing.fds.empty());
    EXPECT_EQ(missing.ignored, "LISTEN_PID without LISTEN_FDS");
}

TEST(ListenFds, NamesThatDoNotMatchTheCountPassNothing) {
    const auto fewer = parse_listen_fds("42", "3", "jakiro-fd-0:jakiro-state", 42);
    EXPECT_TRUE(fewer.fds.empty());
    EXPECT_EQ(fewer.ignored, "LISTEN_FDNAMES names 2 descriptors, LISTEN_FDS says 3");
    const auto more = parse_listen_fds("42", "1", "a:b", 42);
    EXPECT_TRUE(more.fds.empty());
    EXPECT_FALSE(more.ignored.empty());
}

TEST(ListenFds, TakingThemUnsetsTheVariablesAndDropsOnesNotOpen) {
    setenv("LISTEN_PID", std::to_string(getpid()).c_str(), 1);
    // 3 is open in a test binary (or not): the count is high enough that some are not.
    setenv("LISTEN_FDS", "1000", 1);
    unsetenv("LISTEN_FDNAMES");
    const auto l = take_listen_fds();
    EXPECT_EQ(std::getenv("LISTEN_PID"), nullptr);
    EXPECT_EQ(std::getenv("LISTEN_FDS"), nullptr);
    EXPECT_LT(l.fds.size(), 1000u);
    EXPECT_NE(l.ignored.find("is not open"), std::string::npos);
}

}  // namespace
}  // namespace jakiro::handover
