// The engine's drop reasons as /metrics and `jakiroctl qps` print them: each has a name a label
// can carry and a text that explains it, all generated from rnic/engine_drops.def.

#include "rnic/engine_drops.hh"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

namespace jakiro::rnic {
namespace {

bool is_snake_case(const std::string& s) {
    if (s.empty() || s.front() == '_' || s.back() == '_' || s.find("__") != std::string::npos) {
        return false;
    }
    for (const char c : s) {
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
            return false;
        }
    }
    return s.front() >= 'a' && s.front() <= 'z';
}

TEST(EngineDrops, EveryDropHasAUniqueSnakeCaseNameAndAText) {
    ASSERT_GT(engine_drop_count, 0u);
    std::set<std::string> names;
    for (std::size_t d = 0; d < engine_drop_count; ++d) {
        const auto reason = static_cast<engine_drop>(d);
        const std::string name = engine_drop_name(reason);
        EXPECT_TRUE(is_snake_case(name)) << "drop " << d << ": '" << name << "'";
        EXPECT_TRUE(names.insert(name).second) << "drop name '" << name << "' repeats";
        EXPECT_GT(std::strlen(engine_drop_text(reason)), 10u) << name << " has no text";
    }
    EXPECT_EQ(names.size(), engine_drop_count);
}

TEST(EngineDrops, NamesAreTheEnumeratorsTheCountersAreIndexedBy) {
    // /metrics and the integration tests find a counter by this name.
    EXPECT_STREQ(engine_drop_name(engine_drop::bad_icrc), "bad_icrc");
    EXPECT_STREQ(engine_drop_name(engine_drop::gsi_forged), "gsi_forged");
    EXPECT_STREQ(engine_drop_name(engine_drop::revoked), "revoked");
    EXPECT_STREQ(engine_drop_name(engine_drop::count), "unknown");
}

}  // namespace
}  // namespace jakiro::rnic
