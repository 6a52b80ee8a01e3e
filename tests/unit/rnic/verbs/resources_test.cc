// A vNIC's PDs, MRs and CQs in jakirod, driven as a (fake) client drives them: ownership,
// validation of everything a client sends, limits, EBUSY ordering, and release of all a
// client owned when it goes away.

#include "rnic/verbs/resources.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "rnic/verbs/device_model.hh"
#include "tests/unit/rnic/verbs/maps_helper.hh"

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

// Only a sealed shmem memfd can back an MR: anything else could raise a signal in jakirod
// when the engine touches it later (hugetlbfs hole punch, truncation, I/O errors). Every
// refused kind answers EINVAL, which the shim's ibv_reg_mr hands to the program as errno.
TEST_F(Resources, RegMrRefusesAHugetlbMemfdEvenWhenSealed) {
    const uint32_t pd = pd_of(alice);
    constexpr uint64_t huge = 2 << 20;
    const int fd = memfd_create("test-huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
    ASSERT_GE(fd, 0) << "hugetlb memfds exist on this kernel even with no pages reserved";
    ASSERT_EQ(ftruncate(fd, huge), 0);
    ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    uint32_t key = 0;
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, key), EINVAL)
        << "a hole punched there would hand the huge page back and SIGBUS jakirod";
    EXPECT_EQ(res.count().mrs, 0u);
    EXPECT_EQ(mappings_of(fd), 0);
    close(fd);
}

TEST_F(Resources, RegMrRefusesEveryDescriptorThatIsNotASealedShmemMemfd) {
    const uint32_t pd = pd_of(alice);
    struct refused {
        const char* what;
        int fd;
    };
    std::vector<refused> kinds;
    // A regular file on a disk filesystem, 4 pages long (it cannot even be sealed).
    char path[] = "/var/tmp/jakiro-mr-XXXXXX";
    const int disk_file = mkstemp(path);
    ASSERT_GE(disk_file, 0);
    unlink(path);
    ASSERT_EQ(ftruncate(disk_file, 4 * page), 0);
    kinds.push_back({"a file on a disk filesystem", disk_file});
    // A tmpfs file that is not a memfd: tmpfs files opened by path can never be sealed.
    char shm_path[] = "/dev/shm/jakiro-mr-XXXXXX";
    const int shm_file = mkstemp(shm_path);
    ASSERT_GE(shm_file, 0);
    unlink(shm_path);
    ASSERT_EQ(ftruncate(shm_file, 4 * page), 0);
    kinds.push_back({"a tmpfs file opened by path (unsealable)", shm_file});
    kinds.push_back({"a memfd with no seal", region_fd(4, false)});
    const int grow_only = region_fd(4, false);
    ASSERT_EQ(fcntl(grow_only, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_WRITE), 0);
    kinds.push_back({"a memfd sealed against growing and writing but not shrinking", grow_only});
    int pipe_fds[2];
    ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
    kinds.push_back({"a pipe", pipe_fds[0]});
    int sockets[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets), 0);
    kinds.push_back({"a socket", sockets[0]});
    kinds.push_back({"an eventfd", eventfd(0, EFD_CLOEXEC)});
    kinds.push_back({"a directory", open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC)});
    kinds.push_back({"a character device", open("/dev/zero", O_RDWR | O_CLOEXEC)});
    for (const auto& k : kinds) {
        ASSERT_GE(k.fd, 0) << k.what;
        uint32_t key = 0;
        EXPECT_EQ(res.reg_mr(alice, mr_request(pd), k.fd, key), EINVAL) << k.what;
        EXPECT_EQ(mappings_of(k.fd), 0) << k.what;
    }
    EXPECT_EQ(res.count().mrs, 0u) << "nothing registered";
    for (const auto& k : kinds) {
        close(k.fd);
    }
    close(pipe_fds[1]);
    close(sockets[1]);
}

// Shmem keeps no secret from jakirod's mapping: a hole the client punches under a registered
// MR reads as zeros, and the engine writing there gets a fresh page, never a signal.
TEST_F(Resources, AHolePunchedUnderARegisteredMrReadsAsZerosWithoutASignal) {
    const uint32_t pd = pd_of(alice);
    const int fd = region_fd(4);
    uint32_t key = 0;
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, 4 * page), fd, key), 0);
    const auto r = res.mrs().find(pd, key, 0x7f0000001000, 4 * page, 0);
    ASSERT_TRUE(r);
    EXPECT_EQ(std::memcmp(r.bytes.data() + page, "page 1", 6), 0);
    ASSERT_EQ(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4 * page), 0);
    for (uint64_t i = 0; i < 4 * page; ++i) {
        ASSERT_EQ(r.bytes[i], std::byte{0}) << "byte " << i;
    }
    std::memcpy(r.bytes.data() + 2 * page, "after", 5);  // the engine writing a WRITE's data
    char text[6] = {};
    ASSERT_EQ(pread(fd, text, 5, static_cast<off_t>(2 * page)), 5);
    EXPECT_STREQ(text, "after");
    close(fd);
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
    EXPECT_EQ(res.rereg_mr(alice, rereg_request(key ^ 0xff, next), fd), EINVAL) << "no such MR";
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
             r.flags = 4;  // 1: channel, 2: timestamps
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

// ---- the vNIC's quota (YAML rdma.*): EDQUOT beyond it, changed live without destroying

class Quota : public testing::Test {
  protected:
    static vnic_quota tight() {
        vnic_quota q;
        q.max_pds = 2;
        q.max_mrs = 2;
        q.max_mr_bytes = 5 * page;
        q.max_cqs = 2;
        q.max_cqes = 96;  // rings of 64 + 32
        return q;
    }
    uint32_t pd_of(uint64_t client) {
        uint32_t pd = 0;
        EXPECT_EQ(res.alloc_pd(client, pd), 0);
        return pd;
    }
    int cq(uint32_t cqe, cq_created& out) {
        int no_fd = -1;
        const int error = res.create_cq(alice, cq_request(cqe), no_fd, out);
        if (error == 0) {
            close(out.ring_fd);
        }
        return error;
    }

    vnic_resources res{engine_limits(), {}, tight()};
};

TEST_F(Quota, MaxPdsRefusesOneMorePdWithEdquotAcrossClients) {
    pd_of(alice);
    const uint32_t bobs = pd_of(bob);
    uint32_t pd = 0;
    EXPECT_EQ(res.alloc_pd(alice, pd), EDQUOT) << "the quota is the vNIC's, not the client's";
    EXPECT_EQ(res.dealloc_pd(bob, bobs), 0);
    EXPECT_EQ(res.alloc_pd(alice, pd), 0) << "room again";
}

TEST_F(Quota, MaxMrsRefusesOneMoreMrWithEdquot) {
    const uint32_t pd = pd_of(alice);
    const int fd = region_fd(1);
    uint32_t key = 0;
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, key), 0);
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, key), 0);
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, key), EDQUOT);
    EXPECT_EQ(res.dereg_mr(alice, key), 0);
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, key), 0) << "room again";
    close(fd);
}

TEST_F(Quota, MaxMrBytesCountsEveryRegisteredByteUntilDeregistration) {
    const uint32_t pd = pd_of(alice);
    const uint32_t bobs_pd = pd_of(bob);
    const int fd = region_fd(6);
    uint32_t first = 0, key = 0;
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, 3 * page), fd, first), 0);
    EXPECT_EQ(res.reg_mr(bob, mr_request(bobs_pd, 2 * page + 1), fd, key), EDQUOT)
        << "3 pages + 2 pages and a byte > 5 pages";
    ASSERT_EQ(res.reg_mr(bob, mr_request(bobs_pd, 2 * page), fd, key), 0) << "exactly the quota";
    EXPECT_EQ(res.count().mr_bytes, 5 * page);
    EXPECT_EQ(res.count(bob).mr_bytes, 2 * page);
    EXPECT_EQ(res.dereg_mr(alice, first), 0);
    EXPECT_EQ(res.count().mr_bytes, 2 * page);
    res.release_client(bob);
    EXPECT_EQ(res.count().mr_bytes, 0u) << "a client that goes away gives its bytes back";
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, 5 * page), fd, key), 0);
    close(fd);
}

TEST_F(Quota, MaxCqesCountsRingSlotsAndMaxCqsCountsCqs) {
    cq_created a, b, c;
    ASSERT_EQ(cq(50, a), 0);  // a ring of 64
    EXPECT_EQ(cq(33, b), EDQUOT) << "a ring of 64 more: 128 > 96";
    ASSERT_EQ(cq(32, b), 0);
    EXPECT_EQ(res.count().cqes, 96u);
    EXPECT_EQ(cq(1, c), EDQUOT) << "max_cqs (and max_cqes)";
    EXPECT_EQ(res.destroy_cq(alice, b.handle), 0);
    EXPECT_EQ(res.count().cqes, 64u);
    ASSERT_EQ(cq(16, c), 0);
}

TEST_F(Quota, ResizeCqGrowsOnlyWithinMaxCqesAndAShrinkGivesSlotsBack) {
    cq_created a, b, resized;
    ASSERT_EQ(cq(32, a), 0);
    ASSERT_EQ(cq(32, b), 0);  // 64 of 96 slots
    uint32_t moved = 0;
    EXPECT_EQ(res.resize_cq(alice, a.handle, 64, resized, moved), 0) << "32 more slots fit exactly";
    close(resized.ring_fd);
    EXPECT_EQ(res.count().cqes, 96u);
    EXPECT_EQ(res.resize_cq(alice, b.handle, 33, resized, moved), EDQUOT)
        << "a ring of 64 instead of 32: 128 > 96";
    EXPECT_EQ(res.count().cqes, 96u) << "a refused resize changes nothing";
    ASSERT_EQ(res.resize_cq(alice, a.handle, 2, resized, moved), 0);
    close(resized.ring_fd);
    EXPECT_EQ(resized.capacity, 2u);
    EXPECT_EQ(res.count().cqes, 34u) << "a shrink gives its slots back";
    EXPECT_EQ(res.resize_cq(bob, a.handle, 8, resized, moved), EINVAL) << "alice's CQ";
}

TEST_F(Quota, ResizeCqBelowTheUnconsumedCountIsEinvalAndKeepsTheRing) {
    cq_created a, resized;
    ASSERT_EQ(cq(16, a), 0);
    const auto queue = res.find_cq(a.handle);
    proto::cqe e{};
    for (uint64_t i = 0; i < 5; ++i) {
        e.wr_id = i;
        ASSERT_TRUE(queue->complete(e));
    }
    uint32_t moved = 0;
    EXPECT_EQ(res.resize_cq(alice, a.handle, 4, resized, moved), EINVAL) << "5 wait, 4 fit";
    EXPECT_EQ(queue->ring().capacity(), 16u);
    EXPECT_EQ(res.count().cqes, 16u);
    ASSERT_EQ(res.resize_cq(alice, a.handle, 5, resized, moved), 0);
    close(resized.ring_fd);
    EXPECT_EQ(moved, 5u);
    EXPECT_EQ(queue->ring().capacity(), 8u);
    EXPECT_EQ(queue->ring().produced(), 5u);
}

TEST_F(Quota, LoweringTheQuotaLiveRefusesNewObjectsAndKeepsExistingOnes) {
    const uint32_t pd = pd_of(alice);
    const int fd = region_fd(2);
    uint32_t key = 0;
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, key), 0);
    cq_created a;
    ASSERT_EQ(cq(8, a), 0);
    vnic_quota none = tight();
    none.max_pds = 0;
    none.max_mrs = 0;
    none.max_cqs = 0;
    res.set_quota(none);
    EXPECT_EQ(res.quota().max_mrs, 0u);
    uint32_t more = 0;
    cq_created b;
    EXPECT_EQ(res.alloc_pd(alice, more), EDQUOT);
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, more), EDQUOT);
    EXPECT_EQ(cq(8, b), EDQUOT);
    const auto kept = res.count();
    EXPECT_EQ(kept.pds + kept.mrs + kept.cqs, 3u) << "nothing destroyed";
    EXPECT_TRUE(res.mrs().find(pd, key, 0x7f0000001000, page, 0)) << "the MR still works";
    res.set_quota(tight());  // raised again
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, more), 0);
    close(fd);
}

TEST_F(Quota, SetQuotaIsSafeWhileTheVerbsRun) {
    std::atomic<bool> stop{false};
    std::thread apply([&] {
        for (uint32_t i = 0; !stop.load(); ++i) {
            vnic_quota q = tight();
            q.max_pds = i % 3;
            res.set_quota(q);
        }
    });
    for (int i = 0; i < 2000; ++i) {
        uint32_t pd = 0;
        const int error = res.alloc_pd(alice, pd);
        ASSERT_TRUE(error == 0 || error == EDQUOT) << error;
        if (error == 0) {
            EXPECT_EQ(res.dealloc_pd(alice, pd), 0);
        }
    }
    stop = true;
    apply.join();
    EXPECT_LE(res.count().pds, 2u);
}

// ---- what a vNIC's objects hold of the host, charged until they really go

vnic_quota mrs_only(uint32_t max_mrs) {
    vnic_quota q;
    q.max_mrs = max_mrs;
    q.max_cqs = 0;
    q.max_qps = 0;
    q.max_srqs = 0;
    return q;
}

// A work request that names an MR pins it (the engine holds the lookup's pin until the WR is
// done): deregistered meanwhile, the MR keeps its mapping, so it stays charged to the vNIC, and
// the tenant cannot register new MRs in its place until the pin goes.
TEST(ResourcesMemory, AnMrPinnedByWorkStaysChargedAfterDeregUntilTheLastPinGoes) {
    vnic_resources res(engine_limits(), {}, mrs_only(2));
    uint32_t pd = 0, first = 0, second = 0, third = 0;
    ASSERT_EQ(res.alloc_pd(alice, pd), 0);
    const int fd = region_fd(1);
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, first), 0);
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, second), 0);
    auto pin = res.mrs().find(pd, first, 0x7f0000001000, 8, 0);  // what a posted WQE holds
    ASSERT_TRUE(pin);
    ASSERT_EQ(res.dereg_mr(alice, first), 0);
    EXPECT_EQ(mappings_of(fd), 2) << "jakirod still maps the pinned MR";
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, third), EDQUOT)
        << "its quota is still taken by the pinned registration";
    memory_report m = res.memory();
    EXPECT_EQ(m.mrs, 2u);
    EXPECT_EQ(m.mrs_pinned, 1u);
    EXPECT_EQ(m.mr_bytes_pinned, page);
    EXPECT_EQ(m.held.mappings, 2u);
    EXPECT_EQ(m.quota_refusals, 1u);
    // Control: once the work is done, the registration goes, and so does its charge.
    pin = {};
    EXPECT_EQ(mappings_of(fd), 1);
    EXPECT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, third), 0);
    m = res.memory();
    EXPECT_EQ(m.mrs_pinned, 0u);
    EXPECT_EQ(m.held.mappings, 2u);
    res.release_client(alice);
    EXPECT_EQ(res.memory().held.mappings, 0u);
    close(fd);
}

// ibv_rereg_mr while work requests pin the old registration (and another MR, deregistered,
// is still pinned too): the vNIC's registered bytes become the new length, the pinned ones
// stay charged and reported as pinned until their work is done, the quota counts them all, and
// when the pins go nothing is left behind (no mapping, no byte).
TEST(ResourcesMemory, AReregUnderPinsCountsTheNewLengthAndKeepsThePinnedCharged) {
    vnic_quota quota = mrs_only(4);
    quota.max_mr_bytes = 4 * page;
    vnic_resources res(engine_limits(), {}, quota);
    uint32_t pd = 0, mr = 0, other = 0;
    ASSERT_EQ(res.alloc_pd(alice, pd), 0);
    const int fd = region_fd(4);
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, mr), 0);
    ASSERT_EQ(res.reg_mr(alice, mr_request(pd, page), fd, other), 0);
    auto other_pin = res.mrs().find(pd, other, 0x7f0000001000, 8, 0);
    ASSERT_TRUE(other_pin);
    ASSERT_EQ(res.dereg_mr(alice, other), 0);
    auto old_pin = res.mrs().find(pd, mr, 0x7f0000001000, 8, 0);  // a WQE in flight on it
    ASSERT_TRUE(old_pin);
    ASSERT_EQ(res.rereg_mr(alice, rereg_request(mr, mr_request(pd, 2 * page)), fd), 0);
    EXPECT_EQ(res.count().mr_bytes, 2 * page) << "the one live MR, at its new length";
    memory_report m = res.memory();
    EXPECT_EQ(m.mrs, 3u) << "the new registration and the two pinned ones";
    EXPECT_EQ(m.mrs_pinned, 2u);
    EXPECT_EQ(m.mr_bytes, 4 * page);
    EXPECT_EQ(m.mr_bytes_pinned, 2 * page);
    EXPECT_EQ(mappings_of(fd), 3);
    EXPECT_EQ(res.rereg_mr(alice, rereg_request(mr, mr_request(pd, 3 * page)), fd), EDQUOT)
        << "the pinned bytes still take the quota";
    EXPECT_TRUE(res.mrs().find(pd, mr, 0x7f0000001000, 2 * page, 0)) << "refused: unchanged";
    old_pin = {};
    other_pin = {};
    EXPECT_EQ(mappings_of(fd), 1) << "the pins gone, their mappings go";
    m = res.memory();
    EXPECT_EQ(m.mrs_pinned, 0u);
    EXPECT_EQ(m.mr_bytes_pinned, 0u);
    EXPECT_EQ(m.mr_bytes, 2 * page);
    // Control: the quota they held is free again.
    ASSERT_EQ(res.rereg_mr(alice, rereg_request(mr, mr_request(pd, 4 * page)), fd), 0);
    EXPECT_EQ(res.count().mr_bytes, 4 * page);
    EXPECT_EQ(res.dereg_mr(alice, mr), 0);
    EXPECT_EQ(res.count().mr_bytes, 0u) << "nothing registered, nothing counted";
    m = res.memory();
    EXPECT_EQ(m.mr_bytes, 0u);
    EXPECT_EQ(m.mrs, 0u);
    EXPECT_EQ(mappings_of(fd), 0);
    close(fd);
}

// The host has fewer mappings than the vNICs' quotas allow together: each vNIC is guaranteed
// its part, the one that wants more is refused (ENOMEM, counted), the other is never refused
// within its part, and the host never passes its capacity.
TEST(ResourcesMemory, AVnicOverItsShareOfAFullHostIsRefusedAndTheOtherIsNot) {
    auto reserve = std::make_shared<host_reserve>(host_amounts{10, 1000});
    vnic_resources attacker(engine_limits(), {}, mrs_only(20), reserve);
    vnic_resources victim(engine_limits(), {}, mrs_only(20), reserve);
    EXPECT_TRUE(reserve->overcommitted(host_resource::mappings));
    EXPECT_EQ(attacker.memory().share.mappings, 5u);
    uint32_t apd = 0, vpd = 0, key = 0;
    ASSERT_EQ(attacker.alloc_pd(alice, apd), 0);
    ASSERT_EQ(victim.alloc_pd(bob, vpd), 0);
    const int fd = region_fd(1);
    int registered = 0, error = 0;
    while ((error = attacker.reg_mr(alice, mr_request(apd, page), fd, key)) == 0) {
        ++registered;
    }
    EXPECT_EQ(error, ENOMEM);
    EXPECT_EQ(registered, 5);
    EXPECT_EQ(attacker.memory().refused.mappings, 1u);
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(victim.reg_mr(bob, mr_request(vpd, page), fd, key), 0) << i;
    }
    EXPECT_EQ(victim.memory().refused.mappings, 0u);
    EXPECT_EQ(reserve->held().mappings, 10u);
    // Control: a host with room for both quotas refuses neither (the quota does, at 20).
    reserve->set_capacity({100, 1000});
    while ((error = attacker.reg_mr(alice, mr_request(apd, page), fd, key)) == 0) {
        ++registered;
    }
    EXPECT_EQ(error, EDQUOT);
    EXPECT_EQ(registered, 20);
    close(fd);
}

// Every ring and completion channel is charged while jakirod holds it: a CQ with a channel is a
// mapping and a descriptor; a resize keeps the replaced ring's header page (and its mapping)
// until the next resize.
TEST(ResourcesMemory, RingsAndChannelsAreChargedWhileJakirodHoldsThem) {
    vnic_quota q;
    vnic_resources res(engine_limits(), {}, q);
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    int channel = pair[0];
    cq_created cq;
    ASSERT_EQ(res.create_cq(alice, cq_request(64, true), channel, cq), 0);
    close(cq.ring_fd);
    EXPECT_EQ(res.memory().held.mappings, 1u);
    EXPECT_EQ(res.memory().held.descriptors, 1u);
    uint32_t moved = 0;
    cq_created resized;
    ASSERT_EQ(res.resize_cq(alice, cq.handle, 128, resized, moved), 0);
    close(resized.ring_fd);
    EXPECT_EQ(res.memory().held.mappings, 2u) << "the ring and the replaced one's header page";
    ASSERT_EQ(res.resize_cq(alice, cq.handle, 256, resized, moved), 0);
    close(resized.ring_fd);
    EXPECT_EQ(res.memory().held.mappings, 2u) << "one replaced ring at most";
    EXPECT_EQ(res.memory().cq_resizes, 2u);
    ASSERT_EQ(res.destroy_cq(alice, cq.handle), 0);
    EXPECT_EQ(res.memory().held.mappings, 0u);
    EXPECT_EQ(res.memory().held.descriptors, 0u);
    close(pair[1]);
}

}  // namespace
}  // namespace jakiro::verbs
