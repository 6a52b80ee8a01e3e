// What jakirod answers, message by message, including to hostile and broken input.

#include "rnic/verbs/requests.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace jakiro::verbs {
namespace {

namespace proto = verbs_proto;

class Requests : public testing::Test {
  protected:
    template <typename Msg>
    outcome send(const Msg& m, std::size_t size = sizeof(Msg), bool truncated = false) {
        return handle_request(
            std::span<const std::byte>(reinterpret_cast<const std::byte*>(&m), size), truncated, s,
            device);
    }
    template <typename Msg>
    outcome send_fds(const Msg& m, std::vector<int>& fds) {
        return handle_request(
            std::span<const std::byte>(reinterpret_cast<const std::byte*>(&m), sizeof(Msg)), false,
            std::span<int>(fds), s, device);
    }
    template <typename Reply>
    static Reply reply_of(const outcome& o) {
        Reply r{};
        EXPECT_EQ(o.reply_size, sizeof(Reply));
        std::memcpy(&r, o.reply.data(), sizeof(r));
        return r;
    }
    static proto::alloc_pd_request alloc_pd(uint32_t id = 3) {
        return proto::make_message<proto::alloc_pd_request>(
            static_cast<uint16_t>(proto::opcode::alloc_pd), id);
    }
    static int status(const outcome& o) {
        proto::reply_header r{};
        std::memcpy(&r, o.reply.data(), sizeof(r));
        return r.status;
    }
    proto::hello_request hello(uint32_t id = 1) {
        return proto::make_message<proto::hello_request>(
            static_cast<uint16_t>(proto::opcode::hello), id);
    }
    proto::query_request query(uint32_t id = 2) {
        auto q = proto::make_message<proto::query_request>(
            static_cast<uint16_t>(proto::opcode::query), id);
        q.port_num = 1;
        return q;
    }

    vnic_identity vnic{"t1", {0x02, 0x00, 0xc6, 0x13, 0x01, 0x01}, 0xc6130101};
    vnic_resources resources{engine_limits()};
    device_context device{&vnic, "h1", 1450, &resources};
    session s{.client_id = 17};
};

TEST_F(Requests, HelloAnswersTheVnicAndAsksForTheAsyncChannel) {
    const auto o = send(hello(9));
    ASSERT_EQ(o.what, outcome::action::reply);
    EXPECT_TRUE(o.with_async_channel);
    ASSERT_EQ(o.reply_size, sizeof(proto::hello_reply));
    proto::hello_reply r{};
    std::memcpy(&r, o.reply.data(), sizeof(r));
    EXPECT_EQ(r.rh.hdr.opcode, proto::reply_opcode(proto::opcode::hello));
    EXPECT_EQ(r.rh.hdr.request_id, 9u);
    EXPECT_EQ(r.rh.status, 0);
    EXPECT_STREQ(r.vnic_name, "t1");
    EXPECT_EQ(r.path_mtu, 1024u);
    EXPECT_EQ(r.client_id, 17u);
    EXPECT_TRUE(s.hello_done);
}

TEST_F(Requests, QueryAfterHelloAnswersAttributes) {
    send(hello());
    const auto o = send(query(5));
    ASSERT_EQ(o.what, outcome::action::reply);
    EXPECT_FALSE(o.with_async_channel);
    ASSERT_EQ(o.reply_size, sizeof(proto::query_reply));
    proto::query_reply r{};
    std::memcpy(&r, o.reply.data(), sizeof(r));
    EXPECT_EQ(r.rh.status, 0);
    EXPECT_EQ(r.rh.hdr.request_id, 5u);
    EXPECT_EQ(r.port.active_mtu, 1024u);
}

// HELLO and QUERY advertise the vNIC's quota as it is now (set_quota from `apply`), not as
// it was at startup.
TEST_F(Requests, HelloAndQueryAdvertiseTheLiveQuota) {
    vnic_quota q;
    q.max_qps = 3;
    q.max_mr_bytes = 1 << 20;
    resources.set_quota(q);
    auto o = send(hello());
    proto::hello_reply h{};
    std::memcpy(&h, o.reply.data(), sizeof(h));
    EXPECT_EQ(h.lim.max_qp, 3u);
    EXPECT_EQ(h.lim.max_mr_size, 1u << 20);
    q.max_qps = 5;
    resources.set_quota(q);
    o = send(query());
    proto::query_reply r{};
    std::memcpy(&r, o.reply.data(), sizeof(r));
    EXPECT_EQ(r.device.lim.max_qp, 5u);
}

TEST_F(Requests, QueryBeforeHelloIsAProtocolError) {
    const auto o = send(query());
    EXPECT_EQ(o.what, outcome::action::reply);
    EXPECT_EQ(status(o), EPROTO);
}

TEST_F(Requests, QueryOfAnotherPortIsInvalid) {
    send(hello());
    auto q = query();
    q.port_num = 2;
    EXPECT_EQ(status(send(q)), EINVAL);
}

TEST_F(Requests, SecondHelloOnAConnectionIsRefused) {
    send(hello());
    const auto o = send(hello());
    EXPECT_EQ(status(o), EALREADY);
    EXPECT_FALSE(o.with_async_channel);
}

TEST_F(Requests, HelloWithUnknownFlagsIsInvalid) {
    auto h = hello();
    h.flags = 1;
    EXPECT_EQ(status(send(h)), EINVAL);
    EXPECT_FALSE(s.hello_done);
}

TEST_F(Requests, ForeignBytesDropTheClientSilently) {
    const char junk[] = "GET / HTTP/1.1\r\n\r\n";
    EXPECT_EQ(send(junk).what, outcome::action::drop);
    const auto h = hello();
    EXPECT_EQ(send(h, 10).what, outcome::action::drop) << "shorter than a header";
}

TEST_F(Requests, OtherVersionGetsEprotonosupportThenTheConnectionCloses) {
    auto h = hello(3);
    h.hdr.version = proto::version + 1;
    const auto o = send(h);
    EXPECT_EQ(o.what, outcome::action::reply_close);
    EXPECT_EQ(status(o), EPROTONOSUPPORT);
    proto::reply_header r{};
    std::memcpy(&r, o.reply.data(), sizeof(r));
    EXPECT_EQ(r.hdr.version, proto::version) << "tells the shim what it talks to";
    EXPECT_EQ(r.hdr.request_id, 3u);
}

TEST_F(Requests, TruncatedAndOversizedGetAnErrorReplyAndTheSessionGoesOn) {
    const auto h = hello();
    EXPECT_EQ(status(send(h, sizeof(h) - 1)), EBADMSG);
    EXPECT_EQ(status(send(h, sizeof(h), true)), EMSGSIZE);
    EXPECT_EQ(status(send(h)), 0) << "a good request still works afterwards";
}

TEST_F(Requests, ResourceVerbsNeedHelloFirst) {
    EXPECT_EQ(status(send(alloc_pd())), EPROTO);
    EXPECT_EQ(resources.count().pds, 0u);
}

TEST_F(Requests, ResourceVerbsWithoutResourcesAreNotSupported) {
    device.resources = nullptr;
    send(hello());
    EXPECT_EQ(status(send(alloc_pd())), EOPNOTSUPP);
}

TEST_F(Requests, AllocPdAnswersAHandleOwnedByThisSession) {
    send(hello());
    const auto o = send(alloc_pd(21));
    ASSERT_EQ(o.what, outcome::action::reply);
    const auto r = reply_of<proto::alloc_pd_reply>(o);
    EXPECT_EQ(r.rh.status, 0);
    EXPECT_EQ(r.rh.hdr.request_id, 21u);
    EXPECT_EQ(r.rh.hdr.opcode, proto::reply_opcode(proto::opcode::alloc_pd));
    EXPECT_NE(r.pd_handle, 0u);
    EXPECT_EQ(resources.count(17).pds, 1u);
    auto bad = alloc_pd();
    bad.flags = 4;
    EXPECT_EQ(status(send(bad)), EINVAL);

    auto dealloc = proto::make_message<proto::destroy_request>(
        static_cast<uint16_t>(proto::opcode::dealloc_pd), 22);
    dealloc.handle = r.pd_handle;
    session other{.client_id = 18, .hello_done = true};
    std::swap(s, other);
    EXPECT_EQ(status(send(dealloc)), EINVAL) << "another session cannot free it";
    std::swap(s, other);
    dealloc.flags = 1;
    EXPECT_EQ(status(send(dealloc)), EINVAL) << "unknown flags";
    dealloc.flags = 0;
    EXPECT_EQ(status(send(dealloc)), 0);
}

TEST_F(Requests, RegMrNeedsExactlyItsMemfd) {
    send(hello());
    const uint32_t pd = reply_of<proto::alloc_pd_reply>(send(alloc_pd())).pd_handle;
    auto req =
        proto::make_message<proto::reg_mr_request>(static_cast<uint16_t>(proto::opcode::reg_mr), 5);
    req.pd_handle = pd;
    req.length = 100;
    req.access = proto::access_local_write;
    std::vector<int> none;
    EXPECT_EQ(status(send_fds(req, none)), EBADF);
    const int memfd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(ftruncate(memfd, 4096), 0);
    ASSERT_EQ(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    std::vector<int> two{memfd, memfd};
    EXPECT_EQ(status(send_fds(req, two)), EBADF);
    std::vector<int> one{memfd};
    const auto o = send_fds(req, one);
    const auto r = reply_of<proto::reg_mr_reply>(o);
    ASSERT_EQ(r.rh.status, 0);
    EXPECT_EQ(r.lkey, r.rkey);
    EXPECT_EQ(r.mr_handle, r.lkey);
    EXPECT_EQ(one[0], memfd) << "borrowed, not taken: the server closes it after mapping";
    EXPECT_TRUE(resources.mrs().find(pd, r.lkey, 0, 100, proto::access_local_write));
    close(memfd);
}

TEST_F(Requests, CreateCqTakesTheChannelAndRepliesWithTheRing) {
    send(hello());
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    auto req = proto::make_message<proto::create_cq_request>(
        static_cast<uint16_t>(proto::opcode::create_cq), 6);
    req.cqe = 10;
    std::vector<int> fds{pair[1]};
    EXPECT_EQ(status(send_fds(req, fds)), EBADF) << "a descriptor without the channel flag";
    req.flags = proto::cq_with_channel;
    const auto o = send_fds(req, fds);
    const auto r = reply_of<proto::create_cq_reply>(o);
    ASSERT_EQ(r.rh.status, 0);
    EXPECT_EQ(r.capacity, 16u);
    EXPECT_EQ(r.ring_bytes, proto::cq_ring_bytes(16));
    EXPECT_EQ(fds[0], -1) << "the CQ keeps the channel";
    ASSERT_GE(o.reply_fd, 0) << "the ring memfd goes with the reply";
    close(o.reply_fd);
    auto destroy = proto::make_message<proto::destroy_request>(
        static_cast<uint16_t>(proto::opcode::destroy_cq), 7);
    destroy.handle = r.cq_handle;
    EXPECT_EQ(status(send(destroy)), 0);
    EXPECT_EQ(status(send(destroy)), EINVAL);
    close(pair[0]);
}

TEST_F(Requests, ResizeCqRepliesWithTheNewRingAndRefusesAnotherSessionsCq) {
    send(hello());
    auto create = proto::make_message<proto::create_cq_request>(
        static_cast<uint16_t>(proto::opcode::create_cq), 6);
    create.cqe = 4;
    const auto made = send(create);
    const auto cq = reply_of<proto::create_cq_reply>(made);
    ASSERT_EQ(cq.rh.status, 0);
    close(made.reply_fd);

    auto req = proto::make_message<proto::resize_cq_request>(
        static_cast<uint16_t>(proto::opcode::resize_cq), 7);
    req.cq_handle = cq.cq_handle;
    req.cqe = 100;
    req.flags = 1;
    EXPECT_EQ(status(send(req)), EINVAL) << "no flags are defined";
    req.flags = 0;
    const auto o = send(req);
    const auto r = reply_of<proto::resize_cq_reply>(o);
    ASSERT_EQ(r.rh.status, 0);
    EXPECT_EQ(r.capacity, 128u);
    EXPECT_EQ(r.outstanding, 0u);
    EXPECT_EQ(r.ring_bytes, proto::cq_ring_bytes(128));
    ASSERT_GE(o.reply_fd, 0) << "the new ring memfd goes with the reply";
    close(o.reply_fd);
    EXPECT_EQ(resources.count().cqes, 128u) << "the quota counts the new ring";

    req.cqe = 0;
    EXPECT_EQ(status(send(req)), EINVAL);
    req.cqe = engine_limits().max_cqe + 1;
    EXPECT_EQ(status(send(req)), EINVAL);
    req.cqe = 8;
    session other{.client_id = 18, .hello_done = true};
    std::swap(s, other);
    const auto foreign = send(req);
    EXPECT_EQ(status(foreign), EINVAL) << "another session's CQ is not there for it";
    EXPECT_EQ(foreign.reply_fd, -1);
    std::swap(s, other);
    EXPECT_EQ(status(send(req)), 0);
}

TEST_F(Requests, AllocMwAnswersAWindowOfThisSessionsPdAndRefusesWhatIsNot) {
    send(hello());
    const auto pd = reply_of<proto::alloc_pd_reply>(send(alloc_pd(21))).pd_handle;
    auto req = proto::make_message<proto::alloc_mw_request>(
        static_cast<uint16_t>(proto::opcode::alloc_mw), 30);
    req.pd_handle = pd;
    req.type = 2;
    const auto o = send(req);
    ASSERT_EQ(o.what, outcome::action::reply);
    const auto r = reply_of<proto::alloc_mw_reply>(o);
    EXPECT_EQ(r.rh.status, 0);
    EXPECT_EQ(r.rh.hdr.opcode, proto::reply_opcode(proto::opcode::alloc_mw));
    EXPECT_NE(r.mw_handle, 0u);
    EXPECT_EQ(resources.count(17).mws, 1u);
    auto bad = req;
    bad.type = 0;
    EXPECT_EQ(status(send(bad)), EINVAL) << "no such window type";
    bad = req;
    bad.pd_handle = pd ^ 0xff;
    EXPECT_EQ(status(send(bad)), EINVAL) << "no such PD";
    EXPECT_EQ(status(send(req, sizeof(req) - 4)), EBADMSG) << "short message";

    auto dealloc = proto::make_message<proto::destroy_request>(
        static_cast<uint16_t>(proto::opcode::dealloc_mw), 31);
    dealloc.handle = r.mw_handle;
    session other{.client_id = 18, .hello_done = true};
    std::swap(s, other);
    EXPECT_EQ(status(send(dealloc)), EINVAL) << "another session cannot free it";
    auto foreign = req;
    EXPECT_EQ(status(send(foreign)), EINVAL) << "nor allocate in its PD";
    std::swap(s, other);
    // PDs and windows draw their tags apart: 1 in 256 the PD's handle equals the window's.
    dealloc.handle = pd != r.mw_handle ? pd : pd ^ 0xff;
    EXPECT_EQ(status(send(dealloc)), EINVAL) << "a PD's handle is not a window";
    dealloc.handle = r.mw_handle;
    EXPECT_EQ(status(send(dealloc)), 0);
    EXPECT_EQ(status(send(dealloc)), EINVAL) << "freed once";
    EXPECT_EQ(resources.count(17).mws, 0u);
}

TEST_F(Requests, ReservedOpcodesAreNotSupportedYet) {
    send(hello());
    auto m = proto::make_message<proto::query_request>(
        static_cast<uint16_t>(proto::opcode::create_ah), 4);
    const auto o = send(m);
    EXPECT_EQ(o.what, outcome::action::reply);
    EXPECT_EQ(status(o), EOPNOTSUPP);
}

}  // namespace
}  // namespace jakiro::verbs
