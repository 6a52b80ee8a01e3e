// sysfs_files: which paths are a shim device's emulated attributes, and the descriptor open(2)
// of one gives. (That a listed device's types/0 reads "RoCE v2" and ndevs/0 its netdev is
// pinned against a real jakirod by tests/integration/test_ucx_mpi.py.)
#include "verbs_shim/sysfs_files.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace jakiro::verbs_shim;

TEST(SysfsFiles, PathsOutsideAJakiroDeviceAreNeverEmulated) {
    std::string text;
    for (const char* path : {"/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0",
                             "/sys/class/net/eth0/address", "/sys/class/infiniband/jakiro_t1",
                             "/sys/class/infiniband/", "relative/jakiro_t1/ports/1", ""}) {
        EXPECT_FALSE(sysfs_files::attribute_text(path, text)) << path;
    }
    EXPECT_FALSE(sysfs_files::attribute_text(nullptr, text));
}

TEST(SysfsFiles, AJakiroDeviceThisProcessCannotReachHasNoAttributes) {
    // No vNIC socket: the device list is empty, so no jakiro_* name is a device here.
    setenv("JAKIRO_VERBS_SOCKET", "/nonexistent/jakiro.sock", 1);
    std::string text;
    EXPECT_FALSE(sysfs_files::attribute_text(
        "/sys/class/infiniband/jakiro_t1/ports/1/gid_attrs/types/0", text));
    unsetenv("JAKIRO_VERBS_SOCKET");
}

TEST(SysfsFiles, OnlyAJakiroDeviceThisProcessHasGetsDirectories) {
    setenv("JAKIRO_VERBS_SOCKET", "/nonexistent/jakiro.sock", 1);
    std::vector<sysfs_files::dir_entry> entries;
    for (const char* path :
         {"/sys/class/infiniband", "/sys/class/infiniband/", "/sys/class/infiniband/jakiro_t1",
          "/sys/class/infiniband/jakiro_t1/device/net", "/sys/class/infiniband/mlx5_0/device/net",
          "/sys/class/net", "class/infiniband/jakiro_t1/device", "/sys/class/infinibandx", ""}) {
        EXPECT_FALSE(sysfs_files::directory_entries(path, entries)) << path;
        EXPECT_TRUE(entries.empty()) << path;
    }
    EXPECT_FALSE(sysfs_files::directory_entries(nullptr, entries));
    unsetenv("JAKIRO_VERBS_SOCKET");
}

TEST(SysfsFiles, AnAttributeOpensReadOnlyAtItsStartAndCannotBeWritten) {
    const int fd = sysfs_files::open_attribute("RoCE v2\n", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    char buf[32] = {};
    EXPECT_EQ(read(fd, buf, sizeof(buf)), 8);
    EXPECT_STREQ(buf, "RoCE v2\n");
    EXPECT_EQ(read(fd, buf, sizeof(buf)), 0) << "end of file after the text";
    EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    EXPECT_EQ(pwrite(fd, "x", 1, 0), -1) << "the text is sealed";
    close(fd);

    errno = 0;
    EXPECT_EQ(sysfs_files::open_attribute("eth0\n", O_RDWR), -1);
    EXPECT_EQ(errno, EACCES);
}

}  // namespace
