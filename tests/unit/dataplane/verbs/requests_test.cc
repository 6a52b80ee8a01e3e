// What jakirod answers, message by message, including to hostile and broken input.

#include "verbs/requests.hh"

#include <gtest/gtest.h>

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
    device_context device{&vnic, "h1", 1450};
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

TEST_F(Requests, ReservedOpcodesAreNotSupportedYet) {
    send(hello());
    auto m = proto::make_message<proto::query_request>(
        static_cast<uint16_t>(proto::opcode::create_qp), 4);
    const auto o = send(m);
    EXPECT_EQ(o.what, outcome::action::reply);
    EXPECT_EQ(status(o), EOPNOTSUPP);
}

}  // namespace
}  // namespace jakiro::verbs
