#pragma once
// Why the RNIC engine refused an inbound packet: the enum and its printable names and texts,
// all generated from engine_drops.def (as dataplane/drops.hh is from drop_reasons.def).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace jakiro::rnic {

enum class engine_drop : uint8_t {
#define X(name, text) name,
#include "rnic/engine_drops.def"
#undef X
    count
};

constexpr std::size_t engine_drop_count = static_cast<std::size_t>(engine_drop::count);

// The name (snake_case, the /metrics `reason` label and the `jakiroctl qps` key) and the
// one-line explanation of each drop, indexed by the enum.
constexpr std::array<const char*, engine_drop_count> engine_drop_names = {
#define X(name, text) #name,
#include "rnic/engine_drops.def"
#undef X
};
constexpr std::array<const char*, engine_drop_count> engine_drop_texts = {
#define X(name, text) text,
#include "rnic/engine_drops.def"
#undef X
};

constexpr const char* engine_drop_name(engine_drop d) {
    const auto i = static_cast<std::size_t>(d);
    return i < engine_drop_count ? engine_drop_names[i] : "unknown";
}
constexpr const char* engine_drop_text(engine_drop d) {
    const auto i = static_cast<std::size_t>(d);
    return i < engine_drop_count ? engine_drop_texts[i] : "unknown";
}

}  // namespace jakiro::rnic
