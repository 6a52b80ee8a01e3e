#pragma once
// Rates and sizes as operators write them in YAML, tc-style: "5Gbit", "500Mbit", "10gbps" (bits
// per second, SI prefixes), "64KiB", "1MB", "4GiB", "9000" (bytes). Exact integers; nullopt for
// anything else (no sign, no fraction, no unknown unit, no overflow).

#include <cstdint>
#include <optional>
#include <string_view>

namespace jakiro {

std::optional<uint64_t> parse_rate_bps(std::string_view text);
std::optional<uint64_t> parse_bytes(std::string_view text);

}  // namespace jakiro
