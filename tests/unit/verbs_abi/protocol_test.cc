// The shim ⇄ jakirod protocol: encoding, and the validation both ends rely on to refuse
// truncated, oversized, foreign and wrong-version messages.

#include "verbs_abi/protocol.hh"

#include <gtest/gtest.h>

#include <cerrno>
#include <random>
#include <vector>

namespace jakiro::verbs_proto {
namespace {

template <typename Msg>
std::vector<std::byte> bytes(const Msg& m) {
    const auto b = bytes_of(m);
    return {b.begin(), b.end()};
}

hello_request hello(uint32_t id = 7) {
    return make_message<hello_request>(static_cast<uint16_t>(opcode::hello), id);
}

parse_error check(const std::vector<std::byte>& m, bool truncated = false) {
    header h{};
    return check_request(m, truncated, h);
}

void set_header(std::vector<std::byte>& m, const header& h) {
    std::memcpy(m.data(), &h, sizeof(h));
}

header header_of(const std::vector<std::byte>& m) {
    header h{};
    std::memcpy(&h, m.data(), sizeof(h));
    return h;
}

TEST(Protocol, MakeMessageFillsTheHeaderAndZeroesTheBody) {
    const auto m = make_message<query_request>(static_cast<uint16_t>(opcode::query), 42);
    EXPECT_EQ(m.hdr.magic, magic);
    EXPECT_EQ(m.hdr.version, version);
    EXPECT_EQ(m.hdr.opcode, static_cast<uint16_t>(opcode::query));
    EXPECT_EQ(m.hdr.length, sizeof(query_request));
    EXPECT_EQ(m.hdr.request_id, 42u);
    EXPECT_EQ(m.port_num, 0u);
    EXPECT_EQ(m.flags, 0u);
}

TEST(Protocol, AcceptsWellFormedHelloAndQuery) {
    EXPECT_EQ(check(bytes(hello())), parse_error::none);
    EXPECT_EQ(check(bytes(make_message<query_request>(static_cast<uint16_t>(opcode::query), 1))),
              parse_error::none);
}

TEST(Protocol, DecodeRoundTripsAndRefusesOtherSizes) {
    auto m = hello(9);
    m.pid = 1234;
    put_name(m.program, "ibv_devinfo");
    const auto b = bytes(m);
    hello_request out{};
    ASSERT_TRUE(decode(std::span<const std::byte>(b), out));
    EXPECT_EQ(out.pid, 1234u);
    EXPECT_STREQ(out.program, "ibv_devinfo");
    EXPECT_FALSE(decode(std::span<const std::byte>(b).first(b.size() - 1), out));
}

TEST(Protocol, PutNameTruncatesAndTerminates) {
    char field[8];
    put_name(field, "a-very-long-vnic-name");
    EXPECT_STREQ(field, "a-very-");
}

TEST(Protocol, RejectsMessagesShorterThanAHeader) {
    auto b = bytes(hello());
    for (std::size_t n = 0; n < sizeof(header); ++n) {
        std::vector<std::byte> cut(b.begin(), b.begin() + static_cast<long>(n));
        EXPECT_EQ(check(cut), parse_error::truncated) << n << " bytes";
    }
    EXPECT_EQ(errno_for(parse_error::truncated), 0) << "no reply: the peer is dropped";
}

TEST(Protocol, RejectsTruncatedBodies) {
    // The header claims the full size but fewer bytes arrived.
    auto b = bytes(hello());
    b.resize(sizeof(hello_request) - 4);
    EXPECT_EQ(check(b), parse_error::length_mismatch);
    // A consistent header that is simply too short for HELLO.
    auto h = header_of(b);
    h.length = static_cast<uint32_t>(b.size());
    set_header(b, h);
    EXPECT_EQ(check(b), parse_error::bad_size);
    EXPECT_EQ(errno_for(parse_error::bad_size), EBADMSG);
}

TEST(Protocol, RejectsOversizedMessages) {
    std::vector<std::byte> big(max_message_size + 1);
    auto h = hello().hdr;
    h.length = static_cast<uint32_t>(big.size());
    set_header(big, h);
    EXPECT_EQ(check(big), parse_error::oversized);
    // What the kernel cut (MSG_TRUNC) is oversized whatever arrived.
    EXPECT_EQ(check(bytes(hello()), true), parse_error::oversized);
    // A header that claims more than the limit.
    auto b = bytes(hello());
    h = header_of(b);
    h.length = 1u << 20;
    set_header(b, h);
    EXPECT_EQ(check(b), parse_error::oversized);
    EXPECT_EQ(errno_for(parse_error::oversized), EMSGSIZE);
}

TEST(Protocol, RejectsForeignMagic) {
    auto b = bytes(hello());
    auto h = header_of(b);
    h.magic = 0x12345678;
    set_header(b, h);
    EXPECT_EQ(check(b), parse_error::bad_magic);
}

TEST(Protocol, RejectsOtherVersions) {
    for (uint16_t v : {uint16_t{0}, uint16_t{version + 1}, uint16_t{0xffff}}) {
        auto b = bytes(hello());
        auto h = header_of(b);
        h.version = v;
        set_header(b, h);
        EXPECT_EQ(check(b), parse_error::bad_version) << v;
    }
    EXPECT_EQ(errno_for(parse_error::bad_version), EPROTONOSUPPORT);
}

TEST(Protocol, AcceptsEveryResourceRequestAtItsExactSize) {
    EXPECT_EQ(
        check(bytes(make_message<alloc_pd_request>(static_cast<uint16_t>(opcode::alloc_pd), 1))),
        parse_error::none);
    for (opcode op : {opcode::dealloc_pd, opcode::dereg_mr, opcode::destroy_cq}) {
        EXPECT_EQ(check(bytes(make_message<destroy_request>(static_cast<uint16_t>(op), 1))),
                  parse_error::none);
        // A destroy request is not a reg_mr, whatever its opcode says.
        EXPECT_EQ(check(bytes(make_message<reg_mr_request>(static_cast<uint16_t>(op), 1))),
                  parse_error::bad_size);
    }
    EXPECT_EQ(check(bytes(make_message<reg_mr_request>(static_cast<uint16_t>(opcode::reg_mr), 1))),
              parse_error::none);
    EXPECT_EQ(
        check(bytes(make_message<create_cq_request>(static_cast<uint16_t>(opcode::create_cq), 1))),
        parse_error::none);
    EXPECT_EQ(
        check(bytes(make_message<destroy_request>(static_cast<uint16_t>(opcode::create_cq), 1))),
        parse_error::bad_size);
}

TEST(Protocol, SuccessfulResourceRepliesMustHaveTheirFullSize) {
    int status = -1;
    const auto pd = make_message<alloc_pd_request>(static_cast<uint16_t>(opcode::alloc_pd), 3);
    EXPECT_TRUE(check_reply(bytes(make_message<alloc_pd_reply>(reply_opcode(opcode::alloc_pd), 3)),
                            false, pd.hdr, status));
    EXPECT_EQ(status, 0);
    const auto cq = make_message<create_cq_request>(static_cast<uint16_t>(opcode::create_cq), 4);
    auto short_reply = make_message<reply_header>(reply_opcode(opcode::create_cq), 4);
    EXPECT_FALSE(check_reply(bytes(short_reply), false, cq.hdr, status)) << "status 0, no body";
    short_reply.status = EBUSY;
    EXPECT_TRUE(check_reply(bytes(short_reply), false, cq.hdr, status));
    EXPECT_EQ(status, EBUSY);
    const auto dereg = make_message<destroy_request>(static_cast<uint16_t>(opcode::dereg_mr), 5);
    EXPECT_TRUE(check_reply(bytes(make_message<reply_header>(reply_opcode(opcode::dereg_mr), 5)),
                            false, dereg.hdr, status));
}

TEST(Protocol, AcceptsEveryQueuePairRequestAtItsExactSize) {
    EXPECT_EQ(request_size(static_cast<uint16_t>(opcode::create_qp)), 64u);
    EXPECT_EQ(request_size(static_cast<uint16_t>(opcode::modify_qp)), 168u);
    EXPECT_EQ(request_size(static_cast<uint16_t>(opcode::query_qp)), 24u);
    EXPECT_EQ(request_size(static_cast<uint16_t>(opcode::destroy_qp)), 24u);
    EXPECT_EQ(
        check(bytes(make_message<create_qp_request>(static_cast<uint16_t>(opcode::create_qp), 1))),
        parse_error::none);
    EXPECT_EQ(
        check(bytes(make_message<modify_qp_request>(static_cast<uint16_t>(opcode::modify_qp), 1))),
        parse_error::none);
    EXPECT_EQ(
        check(bytes(make_message<query_qp_request>(static_cast<uint16_t>(opcode::query_qp), 1))),
        parse_error::none);
    EXPECT_EQ(
        check(bytes(make_message<destroy_request>(static_cast<uint16_t>(opcode::destroy_qp), 1))),
        parse_error::none);
    // Each at another's size is refused (query_qp and destroy_qp are both 24 bytes: that
    // pair cannot be told apart by size, only by opcode).
    EXPECT_EQ(
        check(bytes(make_message<create_cq_request>(static_cast<uint16_t>(opcode::create_qp), 1))),
        parse_error::bad_size);
    EXPECT_EQ(
        check(bytes(make_message<create_qp_request>(static_cast<uint16_t>(opcode::modify_qp), 1))),
        parse_error::bad_size);
    EXPECT_EQ(
        check(bytes(make_message<modify_qp_request>(static_cast<uint16_t>(opcode::query_qp), 1))),
        parse_error::bad_size);
    EXPECT_EQ(
        check(bytes(make_message<create_qp_request>(static_cast<uint16_t>(opcode::destroy_qp), 1))),
        parse_error::bad_size);
}

TEST(Protocol, QueuePairRepliesHaveTheirSizes) {
    EXPECT_EQ(reply_size(opcode::create_qp), sizeof(create_qp_reply));
    EXPECT_EQ(reply_size(opcode::create_qp), 64u);
    EXPECT_EQ(reply_size(opcode::query_qp), 176u);
    EXPECT_EQ(reply_size(opcode::modify_qp), sizeof(reply_header));
    EXPECT_EQ(reply_size(opcode::destroy_qp), sizeof(reply_header));
    int status = -1;
    const auto create =
        make_message<create_qp_request>(static_cast<uint16_t>(opcode::create_qp), 8);
    EXPECT_TRUE(
        check_reply(bytes(make_message<create_qp_reply>(reply_opcode(opcode::create_qp), 8)), false,
                    create.hdr, status));
    EXPECT_EQ(status, 0);
    EXPECT_FALSE(check_reply(bytes(make_message<reply_header>(reply_opcode(opcode::create_qp), 8)),
                             false, create.hdr, status))
        << "status 0 without the body";
    const auto query = make_message<query_qp_request>(static_cast<uint16_t>(opcode::query_qp), 9);
    EXPECT_TRUE(check_reply(bytes(make_message<query_qp_reply>(reply_opcode(opcode::query_qp), 9)),
                            false, query.hdr, status));
    const auto modify =
        make_message<modify_qp_request>(static_cast<uint16_t>(opcode::modify_qp), 10);
    EXPECT_TRUE(check_reply(bytes(make_message<reply_header>(reply_opcode(opcode::modify_qp), 10)),
                            false, modify.hdr, status));
    EXPECT_FALSE(
        check_reply(bytes(make_message<query_qp_reply>(reply_opcode(opcode::modify_qp), 10)), false,
                    modify.hdr, status))
        << "a modify reply is a bare reply_header";
}

TEST(Protocol, AnswersReservedAndUnknownOpcodesWithEopnotsupp) {
    for (opcode op : {opcode::create_ah, opcode::destroy_ah, opcode::create_comp_channel,
                      opcode::destroy_comp_channel}) {
        auto m = make_message<query_request>(static_cast<uint16_t>(op), 1);
        EXPECT_EQ(check(bytes(m)), parse_error::unknown_opcode);
    }
    auto m = make_message<query_request>(0x1234, 1);
    EXPECT_EQ(check(bytes(m)), parse_error::unknown_opcode);
    EXPECT_EQ(errno_for(parse_error::unknown_opcode), EOPNOTSUPP);
}

TEST(Protocol, RefusesRepliesAndEventsSentAsRequests) {
    auto r = make_message<hello_request>(reply_opcode(opcode::hello), 1);
    EXPECT_EQ(check(bytes(r)), parse_error::not_a_request);
    auto e = make_message<async_event_message>(static_cast<uint16_t>(opcode::async_event), 0);
    EXPECT_EQ(check(bytes(e)), parse_error::not_a_request);
    auto c = make_message<comp_event_message>(static_cast<uint16_t>(opcode::comp_event), 0);
    EXPECT_EQ(check(bytes(c)), parse_error::not_a_request);
}

TEST(Protocol, ReplyMustAnswerTheRequest) {
    const auto req = hello(5).hdr;
    auto ok = make_message<hello_reply>(reply_opcode(opcode::hello), 5);
    int status = -1;
    EXPECT_TRUE(check_reply(bytes(ok), false, req, status));
    EXPECT_EQ(status, 0);

    auto wrong_id = make_message<hello_reply>(reply_opcode(opcode::hello), 6);
    EXPECT_FALSE(check_reply(bytes(wrong_id), false, req, status));
    EXPECT_EQ(status, EPROTO);

    auto wrong_op = make_message<hello_reply>(reply_opcode(opcode::query), 5);
    EXPECT_FALSE(check_reply(bytes(wrong_op), false, req, status));

    // A successful reply must be complete.
    auto b = bytes(ok);
    b.resize(sizeof(reply_header));
    auto h = header_of(b);
    h.length = sizeof(reply_header);
    set_header(b, h);
    EXPECT_FALSE(check_reply(b, false, req, status));
    EXPECT_EQ(status, EPROTO);
}

TEST(Protocol, ErrorReplyCarriesItsStatus) {
    const auto req = hello(5).hdr;
    auto r = make_message<reply_header>(reply_opcode(opcode::hello), 5);
    r.status = EOPNOTSUPP;
    int status = 0;
    EXPECT_TRUE(check_reply(bytes(r), false, req, status));
    EXPECT_EQ(status, EOPNOTSUPP);
    r.status = -3;  // negative statuses do not exist
    EXPECT_FALSE(check_reply(bytes(r), false, req, status));
}

TEST(Protocol, VersionMismatchReplyReadsAsEprotonosupport) {
    const auto req = hello(5).hdr;
    auto r = make_message<reply_header>(reply_opcode(opcode::hello), 5);
    r.hdr.version = version + 1;
    r.status = EPROTONOSUPPORT;
    int status = 0;
    EXPECT_TRUE(check_reply(bytes(r), false, req, status));
    EXPECT_EQ(status, EPROTONOSUPPORT);
}

TEST(Protocol, RandomBytesAreNeverAcceptedAsARequest) {
    std::mt19937 rng(4);
    for (int i = 0; i < 20000; ++i) {
        std::vector<std::byte> b(rng() % 300);
        for (auto& x : b) {
            x = static_cast<std::byte>(rng());
        }
        if (b.size() >= sizeof(header) && i % 2 == 0) {
            // Half keep a valid magic and version so the deeper checks run too.
            auto h = header_of(b);
            h.magic = magic;
            h.version = version;
            set_header(b, h);
        }
        header h{};
        const auto e = check_request(b, false, h);
        if (e == parse_error::none) {
            EXPECT_EQ(b.size(), request_size(h.opcode));
            EXPECT_EQ(h.length, b.size());
        }
    }
}

}  // namespace
}  // namespace jakiro::verbs_proto
