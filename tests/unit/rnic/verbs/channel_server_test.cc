// The channel server over real sockets: a socketpair adopted as a client, and the per-vNIC
// abstract endpoints, bound in the test's own network namespace. No EAL; the namespace
// tests need root (CLONE_NEWNET), as the integration tests do.

#include "rnic/verbs/channel_server.hh"

#include "verbs_abi/cm_protocol.hh"
#include "verbs_abi/endpoint_address.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "rnic/engine.hh"
#include "tests/unit/rnic/verbs/maps_helper.hh"
#include "tests/unit/rnic/verbs/test_endpoints.hh"

namespace jakiro::verbs {
namespace {

namespace proto = verbs_proto;

// Waits for `predicate`, for up to two seconds (the server thread runs asynchronously).
template <typename P>
bool eventually(P predicate) {
    for (int i = 0; i < 200; ++i) {
        if (predicate()) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return predicate();
}

struct reply {
    ssize_t size = -1;
    std::array<std::byte, proto::max_message_size> bytes{};
    int fd = -1;  // a descriptor that came with it
    int status() const {
        proto::reply_header r{};
        std::memcpy(&r, bytes.data(), sizeof(r));
        return r.status;
    }
};

// Receives one message (and at most one fd), waiting up to two seconds.
reply receive(int fd) {
    reply r;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 2000) != 1) {
        return r;
    }
    iovec iov{r.bytes.data(), r.bytes.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    r.size = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_type == SCM_RIGHTS) {
            std::memcpy(&r.fd, CMSG_DATA(c), sizeof(int));
        }
    }
    return r;
}

template <typename Msg>
void send_message(int fd, const Msg& m, std::size_t size = sizeof(Msg)) {
    ASSERT_EQ(send(fd, &m, size, MSG_NOSIGNAL), static_cast<ssize_t>(size));
}

// Sends one message with one descriptor, as the shim does for reg_mr and create_cq.
template <typename Msg>
void send_with_fd(int fd, const Msg& m, int passed) {
    iovec iov{const_cast<Msg*>(&m), sizeof(Msg)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &passed, sizeof(int));
    ASSERT_EQ(sendmsg(fd, &msg, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(Msg)));
}

template <typename Reply>
Reply decode_reply(const struct reply& r) {
    Reply out{};
    EXPECT_EQ(r.size, static_cast<ssize_t>(sizeof(Reply)));
    std::memcpy(&out, r.bytes.data(), sizeof(out));
    return out;
}

proto::hello_request hello(uint32_t id = 1) {
    return proto::make_message<proto::hello_request>(static_cast<uint16_t>(proto::opcode::hello),
                                                     id);
}

proto::query_request query(uint32_t id = 2) {
    auto q =
        proto::make_message<proto::query_request>(static_cast<uint16_t>(proto::opcode::query), id);
    q.port_num = 1;
    return q;
}

using test::own_vnic;

// Connects to `address` ("@abstract" or a path); -1 with errno set.
int connect_to(const std::string& address) {
    sockaddr_un addr{};
    socklen_t len = 0;
    if (!verbs_endpoint::to_sockaddr(address, addr, len)) {
        return -1;
    }
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

class ChannelServer : public testing::Test {
  protected:
    void SetUp() override {
        config = test::test_host({own_vnic("t1", 0x01, 0), own_vnic("t5", 0x03, 1)});
    }

    // A client of the vNIC in `slot` over a socketpair; returns our end.
    int adopted_client(channel_server& server, uint16_t slot = 0) {
        int pair[2];
        EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
        EXPECT_TRUE(server.adopt(pair[1], slot));
        return pair[0];
    }

    // A client of each vNIC that said HELLO, t1's owning a PD: for tests that change one vNIC's
    // face and check the other's client never notices. A failed step leaves its fd at -1.
    struct two_clients {
        int t1 = -1, t1_events = -1;  // t1's control connection and its async channel
        int t5 = -1, t5_events = -1;
    };
    two_clients hello_from_both(channel_server& server) {
        two_clients c;
        c.t1 = adopted_client(server, 0);
        send_message(c.t1, hello());
        c.t1_events = receive(c.t1).fd;
        send_message(c.t1, proto::make_message<proto::alloc_pd_request>(
                               static_cast<uint16_t>(proto::opcode::alloc_pd), 2));
        EXPECT_EQ(decode_reply<proto::alloc_pd_reply>(receive(c.t1)).rh.status, 0);
        c.t5 = adopted_client(server, 1);
        send_message(c.t5, hello());
        c.t5_events = receive(c.t5).fd;
        return c;
    }

    channel_config config;
};

TEST_F(ChannelServer, AnswersHelloWithTheVnicAndAnAsyncChannel) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int fd = adopted_client(server, 1);
    send_message(fd, hello(11));
    const auto r = receive(fd);
    ASSERT_EQ(r.size, static_cast<ssize_t>(sizeof(proto::hello_reply)));
    proto::hello_reply h{};
    std::memcpy(&h, r.bytes.data(), sizeof(h));
    EXPECT_EQ(h.rh.status, 0);
    EXPECT_EQ(h.rh.hdr.request_id, 11u);
    EXPECT_STREQ(h.vnic_name, "t5");
    EXPECT_EQ(h.ipv4[3], 3);
    EXPECT_EQ(h.path_mtu, 1024u);
    ASSERT_GE(r.fd, 0) << "the async event channel comes with the reply";
    close(r.fd);
    close(fd);
}

TEST_F(ChannelServer, AnswersQueryAndSurvivesBadMessages) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int fd = adopted_client(server);
    send_message(fd, hello());
    const auto h = receive(fd);
    ASSERT_GE(h.fd, 0);
    close(h.fd);

    // Wrong length, reserved opcode, oversized: each an error reply, the connection lives.
    const auto q = query(3);
    send_message(fd, q, sizeof(q) - 2);
    EXPECT_EQ(receive(fd).status(), EBADMSG);
    auto qp = proto::make_message<proto::query_request>(
        static_cast<uint16_t>(proto::opcode::create_ah), 4);
    send_message(fd, qp);
    EXPECT_EQ(receive(fd).status(), EOPNOTSUPP);
    std::vector<std::byte> big(proto::max_message_size + 100);
    std::memcpy(big.data(), &q, sizeof(q));
    ASSERT_EQ(send(fd, big.data(), big.size(), MSG_NOSIGNAL), static_cast<ssize_t>(big.size()));
    EXPECT_EQ(receive(fd).status(), EMSGSIZE);

    send_message(fd, query(5));
    const auto r = receive(fd);
    ASSERT_EQ(r.size, static_cast<ssize_t>(sizeof(proto::query_reply)));
    proto::query_reply a{};
    std::memcpy(&a, r.bytes.data(), sizeof(a));
    EXPECT_EQ(a.rh.status, 0);
    EXPECT_EQ(a.port.state, static_cast<uint8_t>(proto::port_state::active));
    EXPECT_EQ(a.port.gid0[15], 1);
    EXPECT_GE(server.stats().faces.bad_requests, 3u);
    close(fd);
}

TEST_F(ChannelServer, DropsAClientThatIsNotSpeakingTheProtocol) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int fd = adopted_client(server);
    ASSERT_TRUE(eventually([&] { return server.client_count() == 1; }));
    const char junk[] = "hello";  // shorter than a header
    send_message(fd, junk);
    EXPECT_EQ(receive(fd).size, 0) << "connection closed";
    EXPECT_TRUE(eventually([&] { return server.client_count() == 0; }));
    close(fd);
}

TEST_F(ChannelServer, DescriptorsSentByAClientAreClosedNotKept) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int fd = adopted_client(server);
    int probe[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, probe), 0);
    auto h = hello();
    iovec iov{&h, sizeof(h)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &probe[1], sizeof(int));
    ASSERT_EQ(sendmsg(fd, &msg, 0), static_cast<ssize_t>(sizeof(h)));
    close(probe[1]);
    const auto r = receive(fd);
    EXPECT_EQ(r.status(), 0);
    close(r.fd);
    // The server closed its copy: the probe's peer is gone, so reading sees EOF.
    pollfd p{probe[0], POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 2000), 1);
    char byte;
    EXPECT_EQ(read(probe[0], &byte, 1), 0);
    close(probe[0]);
    close(fd);
}

TEST_F(ChannelServer, ForgetsAClientThatDisconnects) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int fd = adopted_client(server);
    send_message(fd, hello());
    const auto h = receive(fd);
    ASSERT_EQ(server.client_count(), 1u);
    close(fd);
    EXPECT_TRUE(eventually([&] { return server.client_count() == 0; }));
    // Its async channel closes with it.
    char buf[64];
    EXPECT_EQ(recv(h.fd, buf, sizeof(buf), 0), 0);
    close(h.fd);
    EXPECT_EQ(server.stats().faces.disconnected, 1u);
}

TEST_F(ChannelServer, StopTellsClientsTheDeviceIsGoneAndClosesTheEndpoints) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const std::string address = server.socket_path(0);
    const int probe = connect_to(address);
    ASSERT_GE(probe, 0) << address;
    close(probe);

    const int fd = adopted_client(server);
    send_message(fd, hello());
    const auto h = receive(fd);
    ASSERT_GE(h.fd, 0);
    server.stop();

    proto::async_event_message e{};
    ASSERT_EQ(recv(h.fd, &e, sizeof(e), 0), static_cast<ssize_t>(sizeof(e)));
    EXPECT_EQ(e.hdr.opcode, static_cast<uint16_t>(proto::opcode::async_event));
    EXPECT_EQ(e.type, static_cast<uint32_t>(proto::event_type::device_fatal));
    EXPECT_EQ(recv(h.fd, &e, sizeof(e), 0), 0) << "then EOF";
    char buf[8];
    EXPECT_EQ(recv(fd, buf, sizeof(buf), 0), 0) << "the control connection is closed too";
    EXPECT_EQ(connect_to(address), -1);
    EXPECT_EQ(errno, ECONNREFUSED) << "nothing listens there any more";
    close(h.fd);
    close(fd);
}

TEST_F(ChannelServer, ServesEveryVnicOnItsMacAndNameEndpoints) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    EXPECT_EQ(server.socket_path(1), config.endpoint_prefix + "mac/02:00:c6:13:01:03");
    for (const std::string suffix : {"mac/02:00:c6:13:01:01", "name/t5"}) {
        const int fd = connect_to(config.endpoint_prefix + suffix);
        ASSERT_GE(fd, 0) << suffix;
        send_message(fd, hello());
        const auto r = receive(fd);
        proto::hello_reply h{};
        std::memcpy(&h, r.bytes.data(), sizeof(h));
        EXPECT_STREQ(h.vnic_name, suffix == "name/t5" ? "t5" : "t1");
        close(r.fd);
        close(fd);
    }
}

TEST_F(ChannelServer, ASecondServerCannotTakeAServedVnicAndNothingStaleIsLeft) {
    {
        channel_server first(config);
        std::string error, warnings;
        ASSERT_TRUE(first.start(error)) << error;
        channel_server second(config);
        EXPECT_TRUE(second.start(error, warnings)) << error;
        EXPECT_NE(warnings.find("another process serves it"), std::string::npos) << warnings;
        EXPECT_FALSE(second.serves(0));
    }
    // Abstract names go with their socket: a crashed daemon leaves nothing to clean up.
    channel_server third(config);
    std::string error;
    EXPECT_TRUE(third.start(error)) << error;
    EXPECT_TRUE(third.serves(0));
}

TEST_F(ChannelServer, TwoVnicsWithOneMacInOneNamespaceServeOnlyTheFirst) {
    config.vnics[1].identity.mac = config.vnics[0].identity.mac;
    channel_server server(config);
    std::string error, warnings;
    EXPECT_TRUE(server.start(error, warnings));
    EXPECT_NE(warnings.find("vNIC t5"), std::string::npos) << warnings;
    EXPECT_TRUE(server.serves(0));
    EXPECT_FALSE(server.serves(1));
}

TEST_F(ChannelServer, AVnicServesAtMostItsClientLimitAndOtherVnicsAreUnaffected) {
    config.vnics[0].identity.quota.max_contexts = 3;
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    std::vector<int> fds;
    for (int i = 0; i < 6; ++i) {
        fds.push_back(connect_to(server.socket_path(0)));
        ASSERT_GE(fds.back(), 0);
    }
    ASSERT_TRUE(eventually([&] { return server.stats().faces.refused == 3; }));
    EXPECT_EQ(server.client_count(), 3u);
    int answered = 0;
    for (const int fd : fds) {
        const auto h = hello();
        send(fd, &h, sizeof(h), MSG_NOSIGNAL);  // EPIPE on the refused ones
        const auto r = receive(fd);
        answered += r.size > 0 ? 1 : 0;
        if (r.fd >= 0) {
            close(r.fd);
        }
    }
    EXPECT_EQ(answered, 3) << "the refused connections were closed";
    // Control: the other vNIC serves as usual.
    const int other = connect_to(server.socket_path(1));
    send_message(other, hello());
    const auto r = receive(other);
    EXPECT_EQ(r.status(), 0);
    close(r.fd);
    close(other);
    for (const int fd : fds) {
        close(fd);
    }
}

TEST_F(ChannelServer, AClientThatNeverSaysHelloIsDroppedAfterTheTimeout) {
    config.hello_timeout = std::chrono::milliseconds(200);
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int silent = connect_to(server.socket_path(0));
    const int talker = connect_to(server.socket_path(0));
    send_message(talker, hello());
    const auto h = receive(talker);
    ASSERT_EQ(h.status(), 0);
    ASSERT_TRUE(eventually([&] { return server.stats().faces.hello_timeouts == 1; }));
    char byte;
    EXPECT_EQ(recv(silent, &byte, 1, 0), 0) << "the silent one was closed";
    // The timeout is counted before the drop is: the count settles a moment later.
    EXPECT_TRUE(eventually([&] { return server.client_count() == 1u; }))
        << "the one that said HELLO stays: " << server.client_count() << " clients";
    close(h.fd);
    close(silent);
    close(talker);
}

TEST_F(ChannelServer, APeerOutsideTheVnicsNamespaceAtHelloIsRefused) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    // A child connects from here, then leaves for a namespace of its own and says HELLO;
    // another child (the control) stays and gets its answer.
    const std::string address = server.socket_path(0);  // the child takes no locks
    auto child_says_hello = [&](bool leave) {
        int result[2];
        EXPECT_EQ(pipe(result), 0);
        const pid_t pid = fork();
        if (pid == 0) {
            const int fd = connect_to(address);
            if (leave && unshare(CLONE_NEWNET) != 0) {
                _exit(3);
            }
            const auto h = hello();
            send(fd, &h, sizeof(h), MSG_NOSIGNAL);
            char buf[512];
            pollfd p{fd, POLLIN, 0};
            const ssize_t n = poll(&p, 1, 2000) == 1 ? recv(fd, buf, sizeof(buf), 0) : -1;
            const char verdict = n > 0 ? 'y' : 'n';
            [[maybe_unused]] const ssize_t w = write(result[1], &verdict, 1);
            _exit(0);
        }
        close(result[1]);
        char verdict = '?';
        [[maybe_unused]] const ssize_t r = read(result[0], &verdict, 1);
        close(result[0]);
        waitpid(pid, nullptr, 0);
        return verdict;
    };
    EXPECT_EQ(child_says_hello(false), 'y');
    EXPECT_EQ(child_says_hello(true), 'n');
    EXPECT_EQ(server.stats().faces.refused_foreign, 1u);
}

// `apply` changes a vNIC's quota in place (sync with the same endpoint): lowered, new objects
// are refused with EDQUOT and existing ones stay; raised, they are allowed again; the next
// QUERY advertises the new limit.
TEST_F(ChannelServer, SyncChangesAVnicsQuotaLiveWithoutTouchingItsClients) {
    config.vnics[0].identity.quota.max_pds = 1;
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int fd = adopted_client(server, 0);
    send_message(fd, hello());
    const auto h = receive(fd);
    ASSERT_GE(h.fd, 0);
    auto alloc_pd = [&](uint32_t id) {
        send_message(fd, proto::make_message<proto::alloc_pd_request>(
                             static_cast<uint16_t>(proto::opcode::alloc_pd), id));
        return receive(fd).status();  // an error reply is the header alone
    };
    EXPECT_EQ(alloc_pd(2), 0);
    EXPECT_EQ(alloc_pd(3), EDQUOT);
    auto raised = config.vnics;
    raised[0].identity.quota.max_pds = 2;
    raised[0].identity.quota.max_qps = 7;
    ASSERT_TRUE(server.sync(raised, error)) << error;
    EXPECT_EQ(alloc_pd(4), 0) << "raised live";
    EXPECT_EQ(alloc_pd(5), EDQUOT);
    send_message(fd, query(6));
    const auto q = decode_reply<proto::query_reply>(receive(fd));
    EXPECT_EQ(q.device.lim.max_qp, 7u) << "QUERY says what the quota is now";
    auto lowered = config.vnics;
    lowered[0].identity.quota.max_pds = 0;
    ASSERT_TRUE(server.sync(lowered, error)) << error;
    EXPECT_EQ(alloc_pd(7), EDQUOT);
    EXPECT_EQ(server.resources(0).count().pds, 2u) << "nothing destroyed";
    EXPECT_EQ(server.stats().vnics_removed, 0u) << "the endpoint stayed";
    close(h.fd);
    close(fd);
}

TEST_F(ChannelServer, AVnicWhoseEndpointChangesIsServedAgainInTheSameSlot) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int old_client = adopted_client(server, 0);
    send_message(old_client, hello());
    const auto h = receive(old_client);
    ASSERT_GE(h.fd, 0);
    // Same vNIC and slot, another description of where it lives: torn down and bound again,
    // under the same names (the old listeners must be gone by then).
    auto moved = config.vnics;
    moved[0].port = "net_af_packet1,iface=t1-moved";
    ASSERT_TRUE(server.sync(moved, error)) << error;
    EXPECT_TRUE(server.serves(0));
    EXPECT_EQ(server.stats().vnics_removed, 1u);
    char buf[8];
    EXPECT_EQ(recv(old_client, buf, sizeof(buf), 0), 0) << "the old endpoint's client is closed";
    const int fd = connect_to(server.socket_path(0));
    ASSERT_GE(fd, 0);
    send_message(fd, hello());
    const auto r = receive(fd);
    EXPECT_EQ(r.status(), 0);
    EXPECT_EQ(server.resources(0).count().pds, 0u) << "nothing of the old endpoint's clients";
    for (const int f : {h.fd, old_client, r.fd, fd}) {
        close(f);
    }
}

TEST_F(ChannelServer, SyncTearsDownARemovedVnicAndServesAnAddedOne) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const std::string t1_address = server.socket_path(0);
    const two_clients c = hello_from_both(server);
    ASSERT_GE(c.t1_events, 0);
    ASSERT_GE(c.t5_events, 0);

    // t1 leaves the configuration; t7 arrives.
    ASSERT_TRUE(server.sync({config.vnics[1], own_vnic("t7", 0x07, 2)}, error)) << error;
    proto::async_event_message e{};
    ASSERT_EQ(recv(c.t1_events, &e, sizeof(e), 0), static_cast<ssize_t>(sizeof(e)));
    EXPECT_EQ(e.type, static_cast<uint32_t>(proto::event_type::device_fatal));
    char buf[8];
    EXPECT_EQ(recv(c.t1, buf, sizeof(buf), 0), 0) << "t1's client is closed";
    EXPECT_FALSE(server.serves(0));
    EXPECT_EQ(connect_to(t1_address), -1);
    EXPECT_EQ(server.stats().vnics_removed, 1u);
    const int t7 = connect_to(config.endpoint_prefix + "name/t7");
    ASSERT_GE(t7, 0);
    send_message(t7, hello());
    const auto h7 = receive(t7);
    proto::hello_reply reply{};
    std::memcpy(&reply, h7.bytes.data(), sizeof(reply));
    EXPECT_STREQ(reply.vnic_name, "t7");
    // Control: t5's client never noticed.
    send_message(c.t5, query(9));
    EXPECT_EQ(receive(c.t5).status(), 0);
    for (const int f : {c.t1_events, c.t1, c.t5_events, c.t5, h7.fd, t7}) {
        close(f);
    }
}

// The vnic control object (control/vnic.hh) opens and closes one face at a time: withdraw()
// has torn the face down when it returns (clients told, objects gone, names free), and serve()
// binds it again; the other vNIC's client never notices either.
TEST_F(ChannelServer, OneVnicsFaceIsWithdrawnAndServedAgainWithoutTouchingAnother) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const two_clients c = hello_from_both(server);
    ASSERT_GE(c.t1_events, 0);
    ASSERT_GE(c.t5_events, 0);

    server.withdraw(0);
    proto::async_event_message e{};
    ASSERT_EQ(recv(c.t1_events, &e, sizeof(e), MSG_DONTWAIT), static_cast<ssize_t>(sizeof(e)))
        << "the client was told before withdraw() returned";
    EXPECT_EQ(e.type, static_cast<uint32_t>(proto::event_type::device_fatal));
    EXPECT_FALSE(server.serves(0));
    EXPECT_EQ(server.stats().vnics_removed, 1u);
    server.withdraw(0);  // idempotent
    EXPECT_EQ(server.stats().vnics_removed, 1u);

    ASSERT_TRUE(server.serve(config.vnics[0], error)) << error;
    EXPECT_TRUE(server.serves(0));
    EXPECT_EQ(server.resources(0).count().pds, 0u) << "nothing of the withdrawn face's clients";
    const int again = connect_to(server.socket_path(0));
    ASSERT_GE(again, 0);
    send_message(again, hello());
    const auto r = receive(again);
    EXPECT_EQ(r.status(), 0);
    // Control: t5's client never noticed.
    send_message(c.t5, query(9));
    EXPECT_EQ(receive(c.t5).status(), 0);
    for (const int f : {c.t1_events, c.t1, c.t5_events, c.t5, r.fd, again}) {
        close(f);
    }
}

TEST_F(ChannelServer, EverythingADisconnectedClientCreatedIsReleased) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int fd = adopted_client(server);
    send_message(fd, hello());
    const auto h = receive(fd);
    ASSERT_GE(h.fd, 0);

    send_message(fd, proto::make_message<proto::alloc_pd_request>(
                         static_cast<uint16_t>(proto::opcode::alloc_pd), 2));
    const auto pd = decode_reply<proto::alloc_pd_reply>(receive(fd));
    ASSERT_EQ(pd.rh.status, 0);

    const int memory = memfd_create("client-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(ftruncate(memory, 8192), 0);
    ASSERT_EQ(fcntl(memory, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    auto reg =
        proto::make_message<proto::reg_mr_request>(static_cast<uint16_t>(proto::opcode::reg_mr), 3);
    reg.pd_handle = pd.pd_handle;
    reg.access = proto::access_local_write | proto::access_remote_write;
    reg.length = 8192;
    send_with_fd(fd, reg, memory);
    const auto mr = decode_reply<proto::reg_mr_reply>(receive(fd));
    ASSERT_EQ(mr.rh.status, 0);
    EXPECT_EQ(test::mappings_of(memory), 1) << "jakirod mapped the client's memory";

    int channel[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel), 0);
    auto cq = proto::make_message<proto::create_cq_request>(
        static_cast<uint16_t>(proto::opcode::create_cq), 4);
    cq.cqe = 32;
    cq.flags = proto::cq_with_channel;
    send_with_fd(fd, cq, channel[1]);
    close(channel[1]);
    const auto cq_reply = receive(fd);
    ASSERT_EQ(decode_reply<proto::create_cq_reply>(cq_reply).rh.status, 0);
    ASSERT_GE(cq_reply.fd, 0) << "the ring comes with the reply";
    EXPECT_EQ(test::mappings_of(cq_reply.fd), 1);
    const auto before = server.resources(0).count();
    EXPECT_EQ(before.pds + before.mrs + before.cqs, 3u);

    close(fd);  // the process died
    EXPECT_TRUE(eventually([&] {
        const auto c = server.resources(0).count();
        return c.pds + c.mrs + c.cqs == 0;
    }));
    EXPECT_EQ(test::mappings_of(memory), 0) << "MR unmapped";
    EXPECT_EQ(test::mappings_of(cq_reply.fd), 0) << "CQ ring unmapped";
    char byte;
    EXPECT_EQ(recv(channel[0], &byte, 1, 0), 0) << "jakirod's end of the channel closed";
    for (int f : {memory, cq_reply.fd, channel[0], h.fd}) {
        close(f);
    }
}

TEST_F(ChannelServer, ACqOverflowReachesItsOwnerAsAnAsyncEvent) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    const int fd = adopted_client(server);
    send_message(fd, hello());
    const auto h = receive(fd);
    ASSERT_GE(h.fd, 0);
    auto cq = proto::make_message<proto::create_cq_request>(
        static_cast<uint16_t>(proto::opcode::create_cq), 4);
    cq.cqe = 1;
    send_message(fd, cq);
    const auto r = receive(fd);
    const auto created = decode_reply<proto::create_cq_reply>(r);
    ASSERT_EQ(created.rh.status, 0);
    close(r.fd);

    // The engine completes into it and nobody polls.
    auto queue = server.resources(0).find_cq(created.cq_handle);
    ASSERT_NE(queue, nullptr);
    proto::cqe e{};
    EXPECT_TRUE(queue->complete(e));
    EXPECT_FALSE(queue->complete(e)) << "full: refused, not overwritten";

    pollfd p{h.fd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 2000), 1);
    proto::async_event_message event{};
    ASSERT_EQ(recv(h.fd, &event, sizeof(event), 0), static_cast<ssize_t>(sizeof(event)));
    EXPECT_EQ(event.type, static_cast<uint32_t>(proto::event_type::cq_err));
    EXPECT_EQ(event.handle, created.cq_handle);
    close(h.fd);
    close(fd);
}

TEST_F(ChannelServer, ManyClientsAreServedIndependently) {
    channel_server server(config);
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    std::vector<int> fds;
    for (int i = 0; i < 50; ++i) {
        fds.push_back(adopted_client(server, static_cast<uint16_t>(i % 2)));
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
        send_message(fds[i], hello(static_cast<uint32_t>(100 + i)));
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
        const auto r = receive(fds[i]);
        proto::hello_reply h{};
        std::memcpy(&h, r.bytes.data(), sizeof(h));
        EXPECT_EQ(h.rh.hdr.request_id, 100 + i);
        EXPECT_STREQ(h.vnic_name, i % 2 == 0 ? "t1" : "t5");
        close(r.fd);
    }
    EXPECT_EQ(server.client_count(), 50u);
    for (int fd : fds) {
        close(fd);
    }
    EXPECT_TRUE(eventually([&] { return server.client_count() == 0; }));
}

// Control-plane time is charged per vNIC: a verbs call of one vNIC that waits (here t1's
// create_qp on a worker that does not come, as a stalled or flooded worker would not) holds up
// that vNIC's clients alone. t5, whose QPs another worker runs, gets its answers at once,
// verbs and rdma_cm alike, while t1's call is still waiting.
TEST_F(ChannelServer, OneVnicsStuckCallDelaysNoOtherVnicsVerbsOrRdmaCmCalls) {
    config.vnics[1].identity.engine = 1;
    rnic::engine stalled(2, 16), running(2, 16);
    const auto stall = std::chrono::milliseconds(1500);
    stalled.set_call_timeout(stall);
    channel_server server(config);
    server.enable_qps({&stalled, &running}, {});
    std::string error;
    ASSERT_TRUE(server.start(error)) << error;
    stalled.attach();  // from now on its calls go to a worker's mailbox, and no worker polls it
    const int t1 = adopted_client(server, 0);
    const int t5 = adopted_client(server, 1);
    for (const int fd : {t1, t5}) {
        send_message(fd, hello());
        close(receive(fd).fd);
    }
    send_message(t1, proto::make_message<proto::alloc_pd_request>(
                         static_cast<uint16_t>(proto::opcode::alloc_pd), 2));
    const auto pd = decode_reply<proto::alloc_pd_reply>(receive(t1));
    auto cq = proto::make_message<proto::create_cq_request>(
        static_cast<uint16_t>(proto::opcode::create_cq), 3);
    cq.cqe = 16;
    send_message(t1, cq);
    const auto cq_reply = receive(t1);
    close(cq_reply.fd);
    const auto created_cq = decode_reply<proto::create_cq_reply>(cq_reply);
    auto qp = proto::make_message<proto::create_qp_request>(
        static_cast<uint16_t>(proto::opcode::create_qp), 4);
    qp.pd_handle = pd.pd_handle;
    qp.send_cq = qp.recv_cq = created_cq.cq_handle;
    qp.max_send_wr = qp.max_recv_wr = 4;
    qp.max_send_sge = qp.max_recv_sge = 1;
    qp.qp_type = proto::qpt_rc;
    const auto asked = std::chrono::steady_clock::now();
    send_message(t1, qp);
    auto t1_answer = std::async(std::launch::async, [&] {
        // receive() gives up after 2 s: wait as long as the stall and a margin.
        pollfd p{t1, POLLIN, 0};
        poll(&p, 1, static_cast<int>(stall.count()) + 3000);
        return receive(t1);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // t1's call is waiting now

    auto timed = [](auto&& call) {
        const auto start = std::chrono::steady_clock::now();
        call();
        return std::chrono::steady_clock::now() - start;
    };
    const auto query_time = timed([&] {
        send_message(t5, query(5));
        EXPECT_EQ(decode_reply<proto::query_reply>(receive(t5)).rh.status, 0);
    });
    cm_proto::header open{};
    open.magic = cm_proto::magic;
    open.version = cm_proto::version;
    open.opcode = static_cast<uint16_t>(cm_proto::opcode::open_channel);
    open.length = sizeof(open);
    open.request_id = 6;
    const auto cm_time = timed([&] {
        send_message(t5, open);
        const auto r = receive(t5);
        cm_proto::reply_header rh{};
        std::memcpy(&rh, r.bytes.data(), sizeof(rh));
        EXPECT_EQ(rh.status, 0);
        EXPECT_GE(r.fd, 0) << "the rdma_cm channel";
        close(r.fd);
    });
    // Nor does anyone wait who reads the counters (jakiroctl, /metrics) or raises an event
    // for another vNIC's client, as the worker does.
    const auto report_time = timed([&] {
        EXPECT_EQ(server.reports().size(), 2u);
        EXPECT_GE(server.stats().faces.requests, 5u);
        server.raise_event(0, proto::event_type::cq_err, 1);  // a client nobody has
    });
    EXPECT_LT(query_time, std::chrono::milliseconds(500));
    EXPECT_LT(cm_time, std::chrono::milliseconds(500));
    EXPECT_LT(report_time, std::chrono::milliseconds(500));
    EXPECT_EQ(t1_answer.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
        << "t5 was answered while t1's call still waited";

    // t1's own call ends as the engine says: the worker never came, nothing was created.
    const auto stuck = t1_answer.get();
    EXPECT_GE(std::chrono::steady_clock::now() - asked, stall);
    EXPECT_EQ(stuck.status(), ETIMEDOUT);
    close(stuck.fd);
    close(t1);
    close(t5);
    stalled.detach();  // the worker is back: what t1's teardown asks of it runs
    server.stop();
}

}  // namespace
}  // namespace jakiro::verbs
