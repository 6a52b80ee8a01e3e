#include "rnic/queues/sealed_memfd.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace jakiro::verbs {
namespace {

// What a tenant receiving the fd could try: resize it under jakirod's mapping, or lift the seals.
TEST(SealedMemfd, ATenantCanNeitherShrinkNorGrowNorUnsealIt) {
    sealed_memfd shared;
    ASSERT_EQ(create_sealed_memfd("jakiro-test", 8192, shared), 0);
    struct stat st {};
    ASSERT_EQ(fstat(shared.fd, &st), 0);
    EXPECT_EQ(st.st_size, 8192);
    EXPECT_NE(ftruncate(shared.fd, 4096), 0);
    EXPECT_EQ(errno, EPERM);
    EXPECT_NE(ftruncate(shared.fd, 16384), 0);
    EXPECT_EQ(errno, EPERM);
    EXPECT_NE(fcntl(shared.fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
    EXPECT_EQ(errno, EPERM);
    EXPECT_TRUE(fcntl(shared.fd, F_GET_SEALS) & F_SEAL_SEAL);
    munmap(shared.base, 8192);
    close(shared.fd);
}

TEST(SealedMemfd, StartsAsZerosMappedReadWriteAndSharedWithTheFd) {
    sealed_memfd shared;
    ASSERT_EQ(create_sealed_memfd("jakiro-test", 4096, shared), 0);
    auto* bytes = static_cast<uint8_t*>(shared.base);
    for (int i = 0; i < 4096; ++i) {
        ASSERT_EQ(bytes[i], 0) << i;
    }
    bytes[100] = 0x5a;
    uint8_t seen = 0;
    ASSERT_EQ(pread(shared.fd, &seen, 1, 100), 1);
    EXPECT_EQ(seen, 0x5a);
    EXPECT_TRUE(fcntl(shared.fd, F_GETFD) & FD_CLOEXEC);
    munmap(shared.base, 4096);
    close(shared.fd);
}

}  // namespace
}  // namespace jakiro::verbs
