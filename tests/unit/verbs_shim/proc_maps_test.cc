// /proc/self/maps parsing: what memory registration learns about a range.

#include "verbs_shim/proc_maps.hh"

#include <gtest/gtest.h>
#include <sys/mman.h>

namespace jakiro::verbs_shim {
namespace {

TEST(ProcMaps, ParsesAnonymousHeapAndStackLines) {
    vma v;
    ASSERT_TRUE(parse_maps_line("7f1c2c000000-7f1c2c021000 rw-p 00000000 00:00 0 ", v));
    EXPECT_EQ(v.start, 0x7f1c2c000000u);
    EXPECT_EQ(v.end, 0x7f1c2c021000u);
    EXPECT_TRUE(v.read && v.write && !v.exec && !v.shared);
    EXPECT_EQ(v.path, "");
    EXPECT_TRUE(v.anonymous_private());

    ASSERT_TRUE(parse_maps_line("55d0c1a2b000-55d0c1a4c000 rw-p 00000000 00:00 0     [heap]", v));
    EXPECT_EQ(v.path, "[heap]");
    EXPECT_TRUE(v.anonymous_private());

    ASSERT_TRUE(parse_maps_line("7ffd1c0e0000-7ffd1c101000 rw-p 00000000 00:00 0    [stack]", v));
    EXPECT_FALSE(v.anonymous_private()) << "stacks are never remapped";

    ASSERT_TRUE(parse_maps_line("7f00000000-7f00001000 rw-p 00000000 00:00 0  [anon:arena]", v));
    EXPECT_TRUE(v.anonymous_private()) << "named anonymous memory is still anonymous";
}

TEST(ProcMaps, ParsesFileAndMemfdLinesWithTheirIdentity) {
    vma v;
    ASSERT_TRUE(parse_maps_line(
        "7f5e1a200000-7f5e1a228000 r-xp 00002000 fd:01 1835123    /usr/lib/my lib.so", v));
    EXPECT_EQ(v.offset, 0x2000u);
    EXPECT_EQ(v.dev_major, 0xfdu);
    EXPECT_EQ(v.dev_minor, 1u);
    EXPECT_EQ(v.inode, 1835123u);
    EXPECT_EQ(v.path, "/usr/lib/my lib.so") << "paths may contain spaces";
    EXPECT_TRUE(v.exec);
    EXPECT_FALSE(v.anonymous_private());
    EXPECT_FALSE(v.private_file_copy()) << "not writable";
    ASSERT_TRUE(parse_maps_line("5600-7600 rw-p 00002000 fd:01 99  /usr/bin/program", v));
    EXPECT_TRUE(v.private_file_copy()) << "a program's .data";
    ASSERT_TRUE(parse_maps_line("5600-7600 rw-p 00000000 00:0f 99  /anon_hugepage (deleted)", v));
    EXPECT_FALSE(v.private_file_copy()) << "hugetlb";

    ASSERT_TRUE(parse_maps_line(
        "7f0000001000-7f0000003000 rw-s 7f0000001000 00:01 4242   /memfd:jakiro-mr (deleted)", v));
    EXPECT_TRUE(v.shared);
    EXPECT_EQ(v.offset_of(0x7f0000002000), 0x7f0000002000u);
    EXPECT_FALSE(v.anonymous_private());
    EXPECT_FALSE(v.private_file_copy());

    ASSERT_TRUE(
        parse_maps_line("7f0000001000-7f0000003000 rw-s 00000000 00:01 77 /dev/zero (deleted)", v));
    EXPECT_FALSE(v.anonymous_private()) << "shared anonymous memory";
    EXPECT_FALSE(v.private_file_copy());
}

TEST(ProcMaps, RejectsMalformedLines) {
    vma v;
    EXPECT_FALSE(parse_maps_line("", v));
    EXPECT_FALSE(parse_maps_line("zzzz-1000 rw-p 0 00:00 0", v));
    EXPECT_FALSE(parse_maps_line("2000-1000 rw-p 00000000 00:00 0", v)) << "end before start";
    EXPECT_FALSE(parse_maps_line("1000-2000 rw-p", v));
}

TEST(ProcMaps, ReadsThisProcessesMappings) {
    void* p = mmap(nullptr, 3 * 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    std::vector<vma> maps;
    ASSERT_TRUE(read_maps(maps));
    const auto addr = reinterpret_cast<uintptr_t>(p);
    bool found = false;
    for (const vma& v : maps) {
        if (v.start <= addr && addr + 3 * 4096 <= v.end) {
            found = true;
            EXPECT_TRUE(v.read);
            EXPECT_FALSE(v.write);
            EXPECT_TRUE(v.anonymous_private());
        }
    }
    EXPECT_TRUE(found);
    for (std::size_t i = 1; i < maps.size(); ++i) {
        EXPECT_LE(maps[i - 1].end, maps[i].start) << "in address order, disjoint";
    }
    munmap(p, 3 * 4096);
}

TEST(ProcMaps, SmapsAlsoSaysWhatForkLeavesOutAndWhatDumpsLeaveOut) {
    auto* p = static_cast<char*>(
        mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(p, MAP_FAILED);
    ASSERT_EQ(madvise(p, 4096, MADV_DONTFORK), 0);
    ASSERT_EQ(madvise(p + 2 * 4096, 4096, MADV_DONTDUMP), 0);
    std::vector<vma> maps;
    ASSERT_TRUE(read_smaps(maps));
    auto at = [&](const char* a) {
        for (const vma& v : maps) {
            if (v.start <= reinterpret_cast<uintptr_t>(a) &&
                reinterpret_cast<uintptr_t>(a) < v.end) {
                return v;
            }
        }
        return vma{};
    };
    EXPECT_TRUE(at(p).dont_fork);
    EXPECT_FALSE(at(p).dont_dump);
    EXPECT_FALSE(at(p + 4096).dont_fork);
    EXPECT_FALSE(at(p + 4096).dont_dump);
    EXPECT_TRUE(at(p + 4096).anonymous_private()) << "the maps fields parse as in read_maps";
    EXPECT_TRUE(at(p + 2 * 4096).dont_dump);
    EXPECT_FALSE(at(p + 2 * 4096).dont_fork);
    std::vector<vma> plain;
    ASSERT_TRUE(read_maps(plain));
    EXPECT_FALSE(plain.empty());
    for (const vma& v : plain) {
        EXPECT_FALSE(v.dont_fork || v.dont_dump) << "maps has no flags to read";
    }
    munmap(p, 3 * 4096);
}

}  // namespace
}  // namespace jakiro::verbs_shim
