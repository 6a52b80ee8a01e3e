#pragma once
// Drop reasons as an enum plus their printable names, generated from drop_reasons.def.

#include <array>
#include <cstdint>
#include <string_view>

namespace jakiro {

enum class drop_reason : uint8_t {
#define X(name, text) name,
#include "dataplane/drop_reasons.def"
#undef X
    count_
};

constexpr std::size_t drop_reason_count = static_cast<std::size_t>(drop_reason::count_);

constexpr std::array<std::string_view, drop_reason_count> drop_reason_names = {
#define X(name, text) #name,
#include "dataplane/drop_reasons.def"
#undef X
};

constexpr std::array<std::string_view, drop_reason_count> drop_reason_texts = {
#define X(name, text) text,
#include "dataplane/drop_reasons.def"
#undef X
};

constexpr std::string_view name_of(drop_reason r) {
    return drop_reason_names[static_cast<std::size_t>(r)];
}

}  // namespace jakiro
