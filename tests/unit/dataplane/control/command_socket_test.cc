// The control socket's transport with hostile clients: one that never reads a large reply,
// one that never finishes its command line, and a crowd, while an honest client asks
// `status` and must be answered at once.

#include "dataplane/control/command_socket.hh"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace jakiro {
namespace {

using std::chrono::milliseconds;
using clock = std::chrono::steady_clock;

constexpr std::size_t big_reply = 4 << 20;  // far more than a socket's buffers hold
// Deadlines well above what an answer takes even on a loaded machine, so that "answered
// before the hostile client was dropped" is a real difference.
constexpr int deadline_ms = 2000;
constexpr auto prompt = std::chrono::milliseconds(deadline_ms / 2);

class CommandSocket : public testing::Test {
  protected:
    void SetUp() override {
        path = "/tmp/jakiro-cmd-" + std::to_string(getpid()) + "-" +
               testing::UnitTest::GetInstance()->current_test_info()->name() + ".sock";
        path = path.substr(0, sizeof(sockaddr_un::sun_path) - 1);
        command_socket::limits lim;
        lim.read_deadline_ms = deadline_ms;
        lim.write_deadline_ms = deadline_ms;
        lim.max_clients = 8;
        server = std::make_unique<command_socket>(
            path,
            [big = "OK\n" + std::string(big_reply, 'x')](const std::string& line) {
                if (line == "stats --json") {
                    return big;
                }
                return line == "status" ? std::string("OK\nup\n") : "ERR unknown '" + line + "'\n";
            },
            lim);
        std::string error;
        ASSERT_TRUE(server->start(error)) << error;
    }
    void TearDown() override { server->stop(); }

    int connect_client() const {
        const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
        EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
        return fd;
    }
    // What jakiroctl does: send the line, read until EOF (bounded by `limit`).
    std::string ask(const std::string& line, milliseconds limit = milliseconds(2000)) const {
        const int fd = connect_client();
        const std::string text = line + "\n";
        // May fail when the server already answered and closed ("ERR busy"): the reply
        // says what happened.
        (void)!send(fd, text.data(), text.size(), MSG_NOSIGNAL);
        std::string reply = read_all(fd, limit);
        close(fd);
        return reply;
    }
    static std::string read_all(int fd, milliseconds limit) {
        std::string reply;
        const auto end = clock::now() + limit;
        char buffer[65536];
        for (;;) {
            const auto left = std::chrono::duration_cast<milliseconds>(end - clock::now());
            pollfd in{fd, POLLIN, 0};
            if (left.count() <= 0 || poll(&in, 1, static_cast<int>(left.count())) <= 0) {
                return reply + "<timeout>";
            }
            const ssize_t n = read(fd, buffer, sizeof(buffer));
            if (n <= 0) {
                return reply;
            }
            reply.append(buffer, static_cast<std::size_t>(n));
        }
    }
    void wait_dropped(uint64_t n) const {
        const auto end = clock::now() + milliseconds(3 * deadline_ms);
        while (server->dropped() < n && clock::now() < end) {
            std::this_thread::sleep_for(milliseconds(10));
        }
    }

    std::string path;
    std::unique_ptr<command_socket> server;
};

TEST_F(CommandSocket, AnswersOneLineAndCloses) {
    EXPECT_EQ(ask("status"), "OK\nup\n");
    EXPECT_EQ(ask("stats --json").size(), 3 + big_reply) << "a large reply arrives whole";
}

TEST_F(CommandSocket, AClientThatNeverReadsALargeReplyCannotDelayAnotherClient) {
    const int greedy = connect_client();
    const std::string line = "stats --json\n";
    ASSERT_EQ(send(greedy, line.data(), line.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(line.size()));
    std::this_thread::sleep_for(milliseconds(50));  // its reply is stuck in a full socket now
    const auto start = clock::now();
    EXPECT_EQ(ask("status", prompt), "OK\nup\n");
    EXPECT_LT(clock::now() - start, prompt) << "answered while the other one hangs";
    EXPECT_EQ(server->dropped(), 0u) << "not by dropping it first";
    wait_dropped(1);
    EXPECT_EQ(server->dropped(), 1u) << "dropped at its write deadline";
    std::string rest = read_all(greedy, milliseconds(deadline_ms));
    EXPECT_LT(rest.size(), 3 + big_reply) << "cut off, and the connection closed";
    EXPECT_EQ(rest.find("<timeout>"), std::string::npos) << "closed, not left hanging";
    close(greedy);
    EXPECT_EQ(ask("status"), "OK\nup\n");
}

TEST_F(CommandSocket, AClientThatNeverFinishesItsLineIsDroppedAtItsDeadline) {
    const int slow = connect_client();
    ASSERT_EQ(send(slow, "sta", 3, MSG_NOSIGNAL), 3);  // and nothing more, ever
    const auto start = clock::now();
    EXPECT_EQ(ask("status", prompt), "OK\nup\n");
    EXPECT_LT(clock::now() - start, prompt);
    EXPECT_EQ(server->dropped(), 0u) << "not by dropping it first";
    wait_dropped(1);
    EXPECT_EQ(server->dropped(), 1u);
    close(slow);
}

TEST_F(CommandSocket, ACrowdBeyondMaxClientsIsToldBusyAndTheServerRecovers) {
    std::vector<int> crowd;
    for (int i = 0; i < 8; ++i) {
        crowd.push_back(connect_client());  // each holds a slot until its deadline
    }
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_EQ(ask("status", prompt).rfind("ERR busy", 0), 0u);
    wait_dropped(8);
    EXPECT_EQ(ask("status"), "OK\nup\n") << "slots free again after the deadline";
    for (int fd : crowd) {
        close(fd);
    }
}

}  // namespace
}  // namespace jakiro
