// The shim's channel receiving descriptors with a reply: as many as the verb asks for, in the
// order they were sent, and never a leak: extra ones, and all of them when the verb fails,
// are closed.

#include "verbs_shim/channel.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/verbs_shim/fake_jakirod.hh"
#include "verbs_abi/fd_passing.hh"

namespace jakiro::verbs_shim {
namespace {

namespace proto = verbs_proto;

// Answers one create_qp request with `status` and these kinds of descriptors, made on the
// spot: 'f' a memfd (a regular file), 'p' a pipe's read end (a FIFO).
class one_reply_server {
  public:
    explicit one_reply_server(int status, std::string kinds) {
        char dir[] = "/tmp/jakiro-chan-XXXXXX";
        EXPECT_NE(mkdtemp(dir), nullptr);
        _dir = dir;
        path = _dir + "/s.sock";
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strcpy(addr.sun_path, path.c_str());
        _listen = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        EXPECT_EQ(bind(_listen, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
        EXPECT_EQ(listen(_listen, 1), 0);
        _thread = std::thread([this, status, kinds] { serve(status, kinds); });
    }
    ~one_reply_server() {
        join();
        close(_listen);
        std::filesystem::remove_all(_dir);
    }
    void join() {
        if (_thread.joinable()) {
            _thread.join();
        }
    }
    std::string path;

  private:
    void serve(int status, const std::string& kinds) {
        const int conn = accept4(_listen, nullptr, nullptr, SOCK_CLOEXEC);
        proto::create_qp_request req;
        if (recv(conn, &req, sizeof(req), 0) != sizeof(req)) {
            close(conn);
            return;
        }
        std::vector<int> fds;
        for (char k : kinds) {
            if (k == 'f') {
                fds.push_back(memfd_create("chan-test", MFD_CLOEXEC));
            } else {
                int p[2];
                EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
                close(p[1]);
                fds.push_back(p[0]);
            }
        }
        if (status == 0) {
            auto r = proto::make_message<proto::create_qp_reply>(
                proto::reply_opcode(proto::opcode::create_qp), req.hdr.request_id);
            proto::send_with_fds(conn, &r, sizeof(r), fds, MSG_NOSIGNAL);
        } else {
            auto r = proto::make_message<proto::reply_header>(
                proto::reply_opcode(proto::opcode::create_qp), req.hdr.request_id);
            r.status = status;
            proto::send_with_fds(conn, &r, sizeof(r), fds, MSG_NOSIGNAL);
        }
        for (int fd : fds) {
            close(fd);
        }
        // Wait for the client to hang up, so nothing of ours is open when the test counts.
        char byte;
        (void)!recv(conn, &byte, 1, 0);
        close(conn);
    }

    std::string _dir;
    int _listen = -1;
    std::thread _thread;
};

int ask(one_reply_server& server, std::span<int> fds_out) {
    channel c;
    EXPECT_EQ(c.open(server.path.c_str()), 0);
    auto req = proto::make_message<proto::create_qp_request>(
        static_cast<uint16_t>(proto::opcode::create_qp), 0);
    proto::create_qp_reply reply;
    const int error = c.call_with_fds(&req, sizeof(req), &reply, sizeof(reply), fds_out);
    c.close();
    server.join();
    return error;
}

bool is_kind(int fd, char kind) {
    struct stat st {};
    return fstat(fd, &st) == 0 && (kind == 'f' ? S_ISREG(st.st_mode) : S_ISFIFO(st.st_mode));
}

TEST(ShimChannel, HandsOutSeveralDescriptorsInTheOrderSent) {
    for (const char* kinds : {"fp", "pf"}) {
        one_reply_server server(0, kinds);
        const int before = testing::open_fd_count();
        int fds[2] = {-1, -1};
        ASSERT_EQ(ask(server, fds), 0);
        EXPECT_TRUE(is_kind(fds[0], kinds[0]));
        EXPECT_TRUE(is_kind(fds[1], kinds[1]));
        EXPECT_EQ(testing::open_fd_count(), before + 2);
        close(fds[0]);
        close(fds[1]);
    }
}

TEST(ShimChannel, ClosesDescriptorsNobodyAskedFor) {
    {
        one_reply_server server(0, "fpff");
        const int before = testing::open_fd_count();
        int fds[2] = {-1, -1};
        ASSERT_EQ(ask(server, fds), 0);
        EXPECT_EQ(testing::open_fd_count(), before + 2);
        close(fds[0]);
        close(fds[1]);
    }
    {
        one_reply_server server(0, "pp");
        const int before = testing::open_fd_count();
        ASSERT_EQ(ask(server, {}), 0);
        EXPECT_EQ(testing::open_fd_count(), before);
    }
}

TEST(ShimChannel, TooFewDescriptorsIsAProtocolErrorThatLeaksNothing) {
    one_reply_server server(0, "f");
    const int before = testing::open_fd_count();
    int fds[2] = {-1, -1};
    EXPECT_EQ(ask(server, fds), EPROTO);
    EXPECT_EQ(fds[0], -1);
    EXPECT_EQ(testing::open_fd_count(), before);
}

TEST(ShimChannel, AFailedVerbClosesWhateverCameWithIt) {
    one_reply_server server(ENOMEM, "fp");
    const int before = testing::open_fd_count();
    int fds[2] = {-1, -1};
    EXPECT_EQ(ask(server, fds), ENOMEM);
    EXPECT_EQ(testing::open_fd_count(), before);
}

}  // namespace
}  // namespace jakiro::verbs_shim
