#include "dataplane/overlay_key_text.hh"

#include <openssl/evp.h>

#include <algorithm>

namespace jakiro {

std::optional<overlay_key> parse_overlay_key(const std::string& base64) {
    std::string text = base64;
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
        text.pop_back();
    }
    // 32 bytes are 44 base64 characters, the last one '='.
    if (text.size() != 44 || text[43] != '=' || text[42] == '=') {
        return std::nullopt;
    }
    uint8_t out[33];
    const int n = EVP_DecodeBlock(out, reinterpret_cast<const unsigned char*>(text.data()), 44);
    if (n != 33) {  // EVP_DecodeBlock counts the padding as a zero byte
        return std::nullopt;
    }
    overlay_key key;
    std::copy(out, out + 32, key.begin());
    // Canonical only: the unused low bits of the last character must be zero.
    if (format_overlay_key(key) != text) {
        return std::nullopt;
    }
    return key;
}

std::string format_overlay_key(const overlay_key& key) {
    char out[45];
    EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out), key.data(), 32);
    return std::string(out, 44);
}

}  // namespace jakiro
