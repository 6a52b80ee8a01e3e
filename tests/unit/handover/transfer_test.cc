#include "handover/transfer.hh"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

namespace jakiro::handover {
namespace {

using namespace std::chrono_literals;

struct pair_of_sockets {
    int old_end = -1, new_end = -1;
    pair_of_sockets() {
        int sv[2];
        EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        old_end = sv[0];
        new_end = sv[1];
    }
    ~pair_of_sockets() {
        close(old_end);
        close(new_end);
    }
};

TEST(TakeOver, TheWholeConversationCarriesTheImageAndItsDescriptors) {
    pair_of_sockets s;
    std::string error;
    ASSERT_TRUE(send_offer(s.new_end, {readable_sections(), "new"}, error)) << error;
    auto o = receive_offer(s.old_end, 1s, error);
    ASSERT_TRUE(o) << error;
    EXPECT_EQ(o->version, "new");
    EXPECT_EQ(o->reads, readable_sections());

    ASSERT_TRUE(send_verdict(s.old_end, "", error));
    auto verdict = receive_verdict(s.new_end, 1s, error);
    ASSERT_TRUE(verdict) << error;
    EXPECT_EQ(*verdict, "");

    // More bytes and descriptors than one message holds.
    image_writer w("old");
    w.begin(section_kind::flows);
    std::vector<int> fds;
    for (int i = 0; i < 300; ++i) {
        fds.push_back(eventfd(static_cast<unsigned>(i), EFD_CLOEXEC));
        w.fd(fds.back());
    }
    std::vector<std::byte> big(200 * 1024, std::byte{7});
    w.bytes(big);
    w.end();
    std::thread sender([&] {
        std::string e;
        EXPECT_TRUE(send_image(s.old_end, w, e)) << e;
    });
    auto image = receive_image(s.new_end, 1s, 1 << 20, error);
    sender.join();
    ASSERT_TRUE(image) << error;
    image_reader r(std::move(image->data), std::move(image->fds));
    ASSERT_TRUE(r.open()) << r.error();
    auto f = r.section(section_kind::flows);
    for (int i = 0; i < 300; ++i) {
        const int fd = f.fd();
        ASSERT_GE(fd, 0);
        uint64_t v = 0;
        if (i != 0) {  // eventfd counters start at i; read returns it
            ASSERT_EQ(read(fd, &v, sizeof v), 8);
            EXPECT_EQ(v, static_cast<uint64_t>(i));
        }
        close(fd);
    }
    EXPECT_EQ(f.bytes(), big);
    EXPECT_TRUE(f.done());

    ASSERT_TRUE(send_outcome(s.new_end, "", error));
    auto outcome = receive_outcome(s.old_end, 1s, error);
    ASSERT_TRUE(outcome) << error;
    EXPECT_EQ(*outcome, "");
    for (const int fd : fds) {
        close(fd);
    }
}

TEST(TakeOver, ARefusalCarriesItsReason) {
    pair_of_sockets s;
    std::string error;
    ASSERT_TRUE(send_verdict(s.old_end, "state section 'qps' is version 3", error));
    auto verdict = receive_verdict(s.new_end, 1s, error);
    ASSERT_TRUE(verdict);
    EXPECT_EQ(*verdict, "state section 'qps' is version 3");
}

TEST(TakeOver, ASilentPeerIsATimeoutNotAHang) {
    pair_of_sockets s;
    std::string error;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(receive_verdict(s.new_end, 100ms, error));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    EXPECT_NE(error.find("no answer"), std::string::npos) << error;
}

TEST(TakeOver, APeerThatLeavesMidImageIsAnError) {
    pair_of_sockets s;
    std::string error;
    ASSERT_TRUE(send_verdict(s.old_end, "", error));  // an out-of-order message
    close(s.old_end);
    s.old_end = -1;
    EXPECT_FALSE(receive_image(s.new_end, 1s, 1 << 20, error));
    EXPECT_FALSE(error.empty());
}

TEST(TakeOver, AnImageLargerThanTheReaderAllowsIsRefused) {
    pair_of_sockets s;
    std::string error;
    image_writer w("old");
    w.begin(section_kind::flows);
    w.bytes(std::vector<std::byte>(100 * 1024));
    w.end();
    std::thread sender([&] {
        std::string e;
        send_image(s.old_end, w, e);
    });
    EXPECT_FALSE(receive_image(s.new_end, 1s, 64 * 1024, error));
    EXPECT_NE(error.find("exceeds"), std::string::npos) << error;
    shutdown(s.new_end, SHUT_RDWR);
    sender.join();
}

TEST(PeerCredentials, OurOwnProcessIsTrusted) {
    pair_of_sockets s;
    std::string why;
    EXPECT_TRUE(peer_is_trusted(s.old_end, why)) << why;
}

TEST(PeerCredentials, AnotherUserIsNot) {
    if (geteuid() != 0) {
        GTEST_SKIP() << "needs root to become another user";
    }
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    const pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        // SO_PEERCRED records the credentials at socketpair() time: connect afresh as nobody.
        if (setgid(65534) != 0 || setuid(65534) != 0) {
            _exit(1);
        }
        int inner[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, inner) != 0) {
            _exit(1);
        }
        // Hand the parent our end of a fresh pair, created as nobody.
        char byte = 0;
        iovec iov{&byte, 1};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))]{};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(c), &inner[0], sizeof(int));
        _exit(sendmsg(sv[1], &msg, 0) == 1 ? 0 : 1);
    }
    close(sv[1]);
    char byte = 0;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))]{};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ASSERT_EQ(recvmsg(sv[0], &msg, 0), 1);
    int theirs = -1;
    std::memcpy(&theirs, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(int));
    int status = 0;
    waitpid(child, &status, 0);
    // `theirs` is the end whose peer (the other end) was created by nobody.
    std::string why;
    EXPECT_FALSE(peer_is_trusted(theirs, why));
    EXPECT_NE(why.find("uid 65534"), std::string::npos) << why;
    close(theirs);
    close(sv[0]);
}

}  // namespace
}  // namespace jakiro::handover
