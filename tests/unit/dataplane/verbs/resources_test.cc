// A vNIC's PDs, MRs and CQs in jakirod, driven as a (fake) client drives them: ownership,
// validation of everything a client sends, limits, EBUSY ordering, and release of all a
// client owned when it goes away.

#include "verbs/resources.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include "maps_helper.hh"
#include "verbs/device_model.hh"

namespace jakiro::verbs {
namespace {

namespace proto = verbs_proto;

constexpr uint64_t alice = 1, bob = 2;
constexpr uint64_t page = 4096;

proto::limits small_limits() {
    proto::limits l = engine_limits();
    l.max_pd = 2;
    l.max_mr = 2;
    l.max_cq = 2;
    l.max_cqe = 64;
    l.max_mr_size = 1 << 20;
    return l;
}

// A memfd as the shim makes it: sealed against shrinking, `pages` long, with a pattern.
int region_fd(std::size_t pages, bool seal = true) {
    const int fd = memfd_create("test-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(pages * page)), 0);
    for (std::size_t i = 0; i < pages; ++i) {
        const std::string text = "page " + std::to_string(i);
        EXPECT_EQ(pwrite(fd, text.data(), text.size(), static_cast<off_t>(i * page)),
                  static_cast<ssize_t>(text.size()));
    }
    if (seal) {
        EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    }
    return fd;
}

using test::mappings_of;

proto::reg_mr_request mr_request(uint32_t pd, uint64_t length = 3 * page,
                                 uint32_t access = proto::mr_access_all) {
    auto r =
        proto::make_message<proto::reg_mr_request>(static_cast<uint16_t>(proto::opcode::reg_mr), 1);
    r.pd_handle = pd;
    r.access = access;
    r.addr = 0x7f0000001000;
    r.length = length;
    r.iova = 0x7f0000001000;
    r.fd_offset = 0;
    r.page_offset = 0;
    return r;
}

proto::create_cq_request cq_request(uint32_t cqe, bool with_channel = false) {
    auto r = proto::make_message<proto::create_cq_request>(
        static_cast<uint16_t>(proto::opcode::create_cq), 1);
    r.cqe = cqe;
    r.flags = with_channel ? uint32_t{proto::cq_with_channel} : 0u;
    return r;
}

class Resources : public testing::Test {
  protected:
    uint32_t pd_of(uint64_t client) {
        uint32_t pd = 0;
        EXPECT_EQ(res.alloc_pd(client, pd), 0);
        return pd;
    }

    vnic_resources res{small_limits()};
};

TEST_F(Resources, PdsBelongToTheClientThatAllocatedThem) {
    const uint32_t pd = pd_of(alice);
    EXPECT_NE(pd, 0u);
    EXPECT_EQ(res.dealloc_pd(bob, pd), EINVAL) << "not bob's";
    EXPECT_EQ(res.dealloc_pd(alice, pd ^ 1), EINVAL) << "a guessed handle";
    EXPECT_EQ(res.dealloc_pd(alice, pd), 0);
    EXPECT_EQ(res.dealloc_pd(alice, pd), EINVAL) << "already gone";
}

TEST_F(Resources, MaxPdIsEnforced) {
    pd_of(alice);
    pd_of(bob);
    uint32_t pd = 0;
    EXPECT_EQ(res.alloc_pd(alice, pd), ENOMEM);
}

TEST_F(Resources, RegMrMapsTheClientsPagesWithoutACopy) {
    const uint32_t pd = pd_of(alice);
    const int fd = region_fd(4);
    auto req = mr_request(pd, 5000);
    req.fd_offset = page;   // the region starts in the file's second page...
    req.page_offset = 100;  // ...100 bytes in
    req.iova = 0x9000;
    uint32_t key = 0;
    ASSERT_EQ(res.reg_mr(alice, req, fd, key), 0);
    EXPECT_EQ(mappings_of(fd), 1) << "jakirod's own mapping";
    const auto r = res.mrs().find(pd, key, 0x9000, 5000, proto::access_remote_write);
    ASSERT_TRUE(r);
    char text[7] = {};
    ASSERT_EQ(pread(fd, text, 6, static_cast<off_t>(page)), 6);
    EXPECT_STREQ(text, "page 1");
    EXPECT_EQ(std::memcmp(r.bytes.data() - 100, "page 1", 6), 0) << "same memory as the file";
    std::memcpy(r.bytes.data(), "engine", 6);
    ASSERT_EQ(pread(fd, text, 6, static_cast<off_t>(page + 100)), 6);
    EXPECT_STREQ(text, "engine") << "the engine writes land in the client's pages";
    EXPECT_EQ(res.mrs().find(pd, key, 0x9000 + 4999, 2, 0).status, mr_status::out_of_bounds);
    close(fd);
}

TEST_F(Resources, AnMrWithoutWriteRightsIsMappedReadOnly) {
    const uint32_t pd = pd_of(alice);
    const int fd = region_fd(1);
    uint32_t key = 0;
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, page, proto::access_remote_read), fd, key), 0);
    const auto mr = res.mrs().get(key);
    ASSERT_NE(mr, nullptr);
    bool found = false;
    for (const auto& m : test::mappings()) {
        if (m.start == reinterpret_cast<uintptr_t>(mr->map_base)) {
            found = true;
            EXPECT_EQ(m.perms.substr(0, 2), "r-");
        }
    }
    EXPECT_TRUE(found);
    close(fd);
}

TEST_F(Resources, RegMrValidatesEverythingTheClientSends) {
    const uint32_t pd = pd_of(alice);
    const uint32_t bobs_pd = pd_of(bob);
    const int good = region_fd(4);
    struct bad_case {
        const char* what;
        proto::reg_mr_request req;
        int fd;
        int expected;
    };
    auto with = [&](auto change) {
        auto r = mr_request(pd);
        change(r);
        return r;
    };
    int pipe_fds[2];
    ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
    char path[] = "/tmp/jakiro-mr-XXXXXX";
    const int plain_file = mkstemp(path);
    ASSERT_GE(plain_file, 0);
    unlink(path);
    ASSERT_EQ(ftruncate(plain_file, 4 * page), 0);
    const int unsealed = region_fd(4, false);
    const uint64_t top = std::numeric_limits<uint64_t>::max();

    const bad_case cases[] = {
        {"unknown PD", with([](auto& r) { r.pd_handle = 0x12345; }), good, EINVAL},
        {"another client's PD", with([&](auto& r) { r.pd_handle = bobs_pd; }), good, EINVAL},
        {"flags", with([](auto& r) { r.flags = 1; }), good, EINVAL},
        {"unknown access bit", with([](auto& r) { r.access = 1u << 5; }), good, EINVAL},
        {"remote write without local write",
         with([](auto& r) { r.access = proto::access_remote_write; }), good, EINVAL},
        {"remote atomic without local write",
         with([](auto& r) { r.access = proto::access_remote_atomic; }), good, EINVAL},
        {"empty", with([](auto& r) { r.length = 0; }), good, EINVAL},
        {"larger than max_mr_size", with([](auto& r) { r.length = (1 << 20) + 1; }), good, EINVAL},
        {"iova + length past 2^64", with([&](auto& r) { r.iova = top - 10; }), good, EINVAL},
        {"page offset of a page or more", with([](auto& r) { r.page_offset = 4096; }), good,
         EINVAL},
        {"unaligned file offset", with([](auto& r) { r.fd_offset = 100; }), good, EINVAL},
        {"file offset beyond off_t", with([&](auto& r) { r.fd_offset = top & ~(page - 1); }), good,
         EINVAL},
        {"span past the end of the file", with([](auto& r) { r.fd_offset = 2 * page; }), good,
         EINVAL},
        {"no descriptor", mr_request(pd), -1, EBADF},
        {"a pipe", mr_request(pd), pipe_fds[0], EINVAL},
        {"a plain file (no seals)", mr_request(pd), plain_file, EINVAL},
        {"a memfd that could still shrink", mr_request(pd), unsealed, EINVAL},
    };
    for (const auto& c : cases) {
        uint32_t key = 0;
        EXPECT_EQ(res.reg_mr(alice, c.req, c.fd, key), c.expected) << c.what;
    }
    EXPECT_EQ(res.count().mrs, 0u) << "nothing registered";
    EXPECT_EQ(mappings_of(good), 0);
    uint32_t key = 0;
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd, 4 * page), good, key), 0) << "the good one works";
    EXPECT_EQ(res.reg_mr(bob, mr_request(pd), good, key), EINVAL) << "not bob's PD";
    for (int fd : {good, pipe_fds[0], pipe_fds[1], plain_file, unsealed}) {
        close(fd);
    }
}

proto::rereg_mr_request rereg_request(uint32_t key, const proto::reg_mr_request& as) {
    auto r = proto::make_message<proto::rereg_mr_request>(
        static_cast<uint16_t>(proto::opcode::rereg_mr), 1);
    r.mr_handle = key;
    r.pd_handle = as.pd_handle;
    r.access = as.access;
    r.addr = as.addr;
    r.length = as.length;
    r.iova = as.iova;
    r.fd_offset = as.fd_offset;
    r.page_offset = as.page_offset;
    return r;
}

TEST_F(Resources, ReregSwapsTheRegistrationUnderTheSameKeyAllOrNothing) {
    const uint32_t pd1 = pd_of(alice);
    const uint32_t pd2 = pd_of(alice);
    const int fd = region_fd(4);
    uint32_t key = 0;
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd1, page, proto::access_remote_read), fd, key), 0);
    // New PD, range (the file's third page, another iova) and rights, all at once.
    auto next = mr_request(pd2, page, proto::mr_access_all);
    next.fd_offset = 2 * page;
    next.iova = 0x5000;
    ASSERT_EQ(res.rereg_mr(alice, rereg_request(key, next), fd), 0);
    const auto r = res.mrs().find(pd2, key, 0x5000, 6, proto::access_remote_write);
    ASSERT_TRUE(r) << "the same key, now writable in pd2 at the new range";
    EXPECT_EQ(std::memcmp(r.bytes.data(), "page 2", 6), 0);
    EXPECT_EQ(res.mrs().find(pd1, key, 0x5000, 6, 0).status, mr_status::pd_mismatch);
    EXPECT_EQ(res.dealloc_pd(alice, pd1), 0) << "the MR left pd1";
    EXPECT_EQ(res.dealloc_pd(alice, pd2), EBUSY) << "and counts in pd2";
    EXPECT_EQ(res.count().mrs, 1u);

    // Refused: bob's attempt, a bad range, remote write without local write. The MR stays.
    EXPECT_EQ(res.rereg_mr(bob, rereg_request(key, next), fd), EINVAL) << "not bob's";
    auto bad = next;
    bad.fd_offset = 8 * page;
    EXPECT_EQ(res.rereg_mr(alice, rereg_request(key, bad), fd), EINVAL) << "past the file";
    bad = next;
    bad.access = proto::access_remote_write;
    EXPECT_EQ(res.rereg_mr(alice, rereg_request(key, bad), fd), EINVAL);
    EXPECT_EQ(res.rereg_mr(alice, rereg_request(key ^ 0x100, next), fd), EINVAL) << "no such MR";
    EXPECT_TRUE(res.mrs().find(pd2, key, 0x5000, 6, proto::access_remote_write));
    EXPECT_EQ(res.dereg_mr(alice, key), 0);
    EXPECT_EQ(res.dealloc_pd(alice, pd2), 0);
    close(fd);
}

TEST_F(Resources, MaxMrIsEnforced) {
    const uint32_t pd = pd_of(alice);
    const int fd = region_fd(3);
    uint32_t key = 0;
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd), fd, key), 0);
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd), fd, key), 0) << "the same pages twice";
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd), fd, key), ENOMEM);
    close(fd);
}

TEST_F(Resources, APdWithMrsIsBusyUntilTheyAreDeregistered) {
    const uint32_t pd = pd_of(alice);
    const int fd = region_fd(3);
    uint32_t key = 0;
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd), fd, key), 0);
    EXPECT_EQ(res.dealloc_pd(alice, pd), EBUSY);
    EXPECT_EQ(res.dereg_mr(bob, key), EINVAL) << "not bob's MR";
    EXPECT_EQ(res.dereg_mr(alice, key), 0);
    EXPECT_EQ(mappings_of(fd), 0) << "unmapped at deregistration";
    EXPECT_EQ(res.dereg_mr(alice, key), EINVAL);
    EXPECT_EQ(res.dealloc_pd(alice, pd), 0);
    close(fd);
}

TEST_F(Resources, CreateCqValidatesAndAnswersAPowerOfTwoRing) {
    struct {
        const char* what;
        proto::create_cq_request req;
        int expected;
    } const cases[] = {
        {"no entries", cq_request(0), EINVAL},
        {"more than max_cqe", cq_request(65), EINVAL},
        {"comp_vector 1 (there is one vector)",
         [] {
             auto r = cq_request(8);
             r.comp_vector = 1;
             return r;
         }(),
         EINVAL},
        {"unknown flag",
         [] {
             auto r = cq_request(8);
             r.flags = 2;
             return r;
         }(),
         EINVAL},
        {"reserved field",
         [] {
             auto r = cq_request(8);
             r.reserved = 1;
             return r;
         }(),
         EINVAL},
        {"channel flag without its descriptor", cq_request(8, true), EBADF},
    };
    for (const auto& c : cases) {
        int no_fd = -1;
        cq_created out;
        EXPECT_EQ(res.create_cq(alice, c.req, no_fd, out), c.expected) << c.what;
    }
    cq_created out;
    int no_fd = -1;
    ASSERT_EQ(res.create_cq(alice, cq_request(50), no_fd, out), 0);
    EXPECT_EQ(out.capacity, 64u);
    EXPECT_EQ(out.ring_bytes, proto::cq_ring_bytes(64));
    ASSERT_GE(out.ring_fd, 0);
    close(out.ring_fd);
    EXPECT_EQ(res.count().cqs, 1u);
}

TEST_F(Resources, ACompletionChannelMustBeASeqpacketSocket) {
    const int efd = eventfd(0, EFD_CLOEXEC);
    int stream[2], seq[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, stream), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, seq), 0);
    cq_created out;
    int fd = efd;
    EXPECT_EQ(res.create_cq(alice, cq_request(8, true), fd, out), EINVAL) << "an eventfd";
    EXPECT_EQ(fd, efd) << "not taken";
    fd = stream[1];
    EXPECT_EQ(res.create_cq(alice, cq_request(8, true), fd, out), EINVAL) << "a stream socket";
    fd = seq[1];
    EXPECT_EQ(res.create_cq(alice, cq_request(8, false), fd, out), EBADF)
        << "a descriptor the request did not announce";
    ASSERT_EQ(res.create_cq(alice, cq_request(8, true), fd, out), 0);
    EXPECT_EQ(fd, -1) << "taken by the CQ";
    close(out.ring_fd);
    EXPECT_TRUE(res.find_cq(out.handle)->has_channel());
    for (int f : {efd, stream[0], stream[1], seq[0]}) {
        close(f);
    }
}

TEST_F(Resources, MaxCqIsEnforcedAndCqsBelongToTheirClient) {
    cq_created a, b, c;
    int no_fd = -1;
    ASSERT_EQ(res.create_cq(alice, cq_request(8), no_fd, a), 0);
    ASSERT_EQ(res.create_cq(bob, cq_request(8), no_fd, b), 0);
    EXPECT_EQ(res.create_cq(alice, cq_request(8), no_fd, c), ENOMEM);
    EXPECT_EQ(res.destroy_cq(bob, a.handle), EINVAL);
    res.find_cq(a.handle)->users = 1;  // a QP completes into it
    EXPECT_EQ(res.destroy_cq(alice, a.handle), EBUSY);
    res.find_cq(a.handle)->users = 0;
    EXPECT_EQ(res.destroy_cq(alice, a.handle), 0);
    EXPECT_EQ(res.find_cq(a.handle), nullptr);
    EXPECT_EQ(mappings_of(a.ring_fd), 0) << "ring unmapped";
    close(a.ring_fd);
    close(b.ring_fd);
}

TEST_F(Resources, AClientThatGoesAwayLeavesNothingBehind) {
    const uint32_t pd = pd_of(alice);
    const uint32_t bobs_pd = pd_of(bob);
    const int memory = region_fd(3);
    uint32_t key = 0;
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd), memory, key), 0);
    int channel[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel), 0);
    int jakirods_end = channel[1];
    cq_created cq;
    ASSERT_EQ(res.create_cq(alice, cq_request(8, true), jakirods_end, cq), 0);
    EXPECT_EQ(res.count(alice).pds, 1u);
    EXPECT_EQ(res.count(alice).mrs, 1u);
    EXPECT_EQ(res.count(alice).cqs, 1u);
    EXPECT_EQ(mappings_of(memory), 1);
    EXPECT_EQ(mappings_of(cq.ring_fd), 1);

    res.release_client(alice);  // PD before its MR on purpose: release does the right order
    const auto left = res.count(alice);
    EXPECT_EQ(left.pds + left.mrs + left.cqs, 0u);
    EXPECT_EQ(mappings_of(memory), 0) << "MR unmapped";
    EXPECT_EQ(mappings_of(cq.ring_fd), 0) << "CQ ring unmapped";
    char byte;
    EXPECT_EQ(recv(channel[0], &byte, 1, MSG_DONTWAIT), 0) << "channel closed: EOF";
    EXPECT_EQ(res.count(bob).pds, 1u) << "bob keeps his";
    EXPECT_EQ(res.dealloc_pd(bob, bobs_pd), 0);
    uint32_t again = 0;
    EXPECT_EQ(res.alloc_pd(alice, again), 0) << "alice's quota is free again";
    close(memory);
    close(cq.ring_fd);
    close(channel[0]);
}

}  // namespace
}  // namespace jakiro::verbs
