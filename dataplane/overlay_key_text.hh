#pragma once
// A sealed overlay's host key as the YAML and `jakiroctl overlay-key` write it: 32 bytes in
// standard base64, one line, as WireGuard writes its keys. Here, beside the folders, because
// the YAML's loader (config/) checks the keys it reads and the sealing (overlay/sealing/) uses
// them, and neither may include the other.

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace jakiro {

using overlay_key = std::array<uint8_t, 32>;

// "base64 of 32 bytes" -> key; nullopt for anything else (length, alphabet, trailing bytes,
// unused low bits set).
std::optional<overlay_key> parse_overlay_key(const std::string& base64);
std::string format_overlay_key(const overlay_key& key);

}  // namespace jakiro
