#include "handover/image.hh"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

namespace jakiro::handover {
namespace {

image_writer sample(int fd) {
    image_writer w("jakirod test");
    w.begin(section_kind::daemon);
    w.u32(7);
    w.string("h1");
    w.end();
    w.begin(section_kind::listeners);
    w.fd(fd);
    w.u64(1ull << 40);
    w.end();
    return w;
}

TEST(StateImage, FieldsComeBackInTheOrderTheyWereWritten) {
    const int fd = eventfd(0, EFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    const auto w = sample(fd);
    image_reader r(w.data(), {dup(fd)});
    ASSERT_TRUE(r.open()) << r.error();
    EXPECT_EQ(r.writer(), "jakirod test");
    auto d = r.section(section_kind::daemon);
    EXPECT_EQ(d.u32(), 7u);
    EXPECT_EQ(d.string(), "h1");
    EXPECT_TRUE(d.done());
    auto l = r.section(section_kind::listeners);
    const int got = l.fd();
    EXPECT_GE(got, 0);
    EXPECT_EQ(l.u64(), 1ull << 40);
    EXPECT_TRUE(r.ok());
    // The descriptor is the same file: a write through one is read through the other.
    const uint64_t one = 1;
    ASSERT_EQ(write(fd, &one, sizeof one), 8);
    uint64_t value = 0;
    ASSERT_EQ(read(got, &value, sizeof value), 8);
    EXPECT_EQ(value, 1u);
    close(got);
    close(fd);
}

TEST(StateImage, ATruncatedImageIsRefusedWhole) {
    const auto w = sample(0);
    for (std::size_t cut = 1; cut < w.data().size(); ++cut) {
        std::vector<std::byte> part(w.data().begin(),
                                    w.data().begin() + static_cast<std::ptrdiff_t>(cut));
        image_reader r(std::move(part), {});
        if (!r.open()) {
            continue;
        }
        // The header and whole sections may survive a cut; what was cut is missing.
        auto l = r.section(section_kind::listeners);
        (void)l.fd();
        (void)l.u64();
        EXPECT_FALSE(r.ok()) << "cut at " << cut;
    }
}

TEST(StateImage, SomethingElseIsNotAStateImage) {
    std::vector<std::byte> junk(64, std::byte{0x41});
    image_reader r(junk, {});
    EXPECT_FALSE(r.open());
    EXPECT_EQ(r.error(), "not a jakirod state image");
}

TEST(StateImage, ADescriptorIndexIsTakenOnceAndMustExist) {
    image_writer w("t");
    w.begin(section_kind::listeners);
    w.fd(3);
    w.fd(3);
    w.end();
    image_reader r(w.data(), {eventfd(0, EFD_CLOEXEC)});  // one sent, two named
    ASSERT_TRUE(r.open());
    auto l = r.section(section_kind::listeners);
    const int first = l.fd();
    EXPECT_GE(first, 0);
    EXPECT_EQ(l.fd(), -1);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error().find("descriptor 1"), std::string::npos) << r.error();
    close(first);
}

TEST(StateImage, ACountAboveItsBoundFailsTheImage) {
    image_writer w("t");
    w.begin(section_kind::flows);
    w.u32(1'000'000);
    w.end();
    image_reader r(w.data(), {});
    ASSERT_TRUE(r.open());
    auto f = r.section(section_kind::flows);
    EXPECT_EQ(f.count(65536), 0u);
    EXPECT_FALSE(r.ok());
}

TEST(StateImage, AMissingSectionIsAnErrorNamingIt) {
    image_writer w("t");
    image_reader r(w.data(), {});
    ASSERT_TRUE(r.open());
    EXPECT_FALSE(r.has(section_kind::flows));
    (void)r.section(section_kind::flows).u32();
    EXPECT_NE(r.error().find("'flows'"), std::string::npos) << r.error();
}

TEST(SectionVersions, AReaderOfTheSameVersionsTakesEverything) {
    image_writer w("t");
    w.begin(section_kind::daemon);
    w.end();
    w.begin(section_kind::flows);
    w.end();
    EXPECT_EQ(incompatibility(readable_sections(), w.written(), w.required()), "");
}

TEST(SectionVersions, AnOlderReaderOfARequiredSectionRefusesNamingIt) {
    image_writer w("t");
    w.begin(section_kind::daemon);
    w.end();
    auto reader = readable_sections();
    reader[static_cast<uint16_t>(section_kind::daemon)] = 0;
    const std::string why = incompatibility(reader, w.written(), w.required());
    EXPECT_NE(why.find("'daemon'"), std::string::npos) << why;
    EXPECT_NE(why.find("up to version 0"), std::string::npos) << why;
}

TEST(SectionVersions, AnUnknownOptionalSectionIsSkippedAnUnknownRequiredOneRefused) {
    image_writer w("t");
    w.begin(section_kind::flows);  // optional
    w.end();
    auto reader = readable_sections();
    reader.erase(static_cast<uint16_t>(section_kind::flows));
    EXPECT_EQ(incompatibility(reader, w.written(), w.required()), "");
    w.begin(section_kind::listeners);  // required
    w.end();
    reader.erase(static_cast<uint16_t>(section_kind::listeners));
    EXPECT_NE(incompatibility(reader, w.written(), w.required()).find("unknown"),
              std::string::npos);
}

}  // namespace
}  // namespace jakiro::handover
