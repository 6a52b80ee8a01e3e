#include "dataplane/config/qos_units.hh"

#include <cctype>
#include <string>

namespace jakiro {

namespace {

struct unit {
    std::string_view name;
    uint64_t factor;
};

// Splits "123unit" and scales; case-insensitive unit names.
std::optional<uint64_t> scaled(std::string_view text, std::initializer_list<unit> units) {
    std::size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
        ++digits;
    }
    if (digits == 0 || digits > 19) {
        return std::nullopt;
    }
    const uint64_t value = std::stoull(std::string(text.substr(0, digits)));
    std::string suffix;
    for (char c : text.substr(digits)) {
        suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    for (const auto& u : units) {
        if (suffix == u.name) {
            if (u.factor != 0 && value > UINT64_MAX / u.factor) {
                return std::nullopt;
            }
            return value * u.factor;
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<uint64_t> parse_rate_bps(std::string_view text) {
    return scaled(text, {{"", 1},
                         {"bit", 1},
                         {"bps", 1},
                         {"kbit", 1'000},
                         {"kbps", 1'000},
                         {"mbit", 1'000'000},
                         {"mbps", 1'000'000},
                         {"gbit", 1'000'000'000},
                         {"gbps", 1'000'000'000},
                         {"tbit", 1'000'000'000'000},
                         {"tbps", 1'000'000'000'000}});
}

std::optional<uint64_t> parse_bytes(std::string_view text) {
    return scaled(text, {{"", 1},
                         {"b", 1},
                         {"kb", 1'000},
                         {"kib", 1ull << 10},
                         {"mb", 1'000'000},
                         {"mib", 1ull << 20},
                         {"gb", 1'000'000'000},
                         {"gib", 1ull << 30},
                         {"tb", 1'000'000'000'000},
                         {"tib", 1ull << 40}});
}

}  // namespace jakiro
