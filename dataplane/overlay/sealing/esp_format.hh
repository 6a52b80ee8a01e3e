#pragma once
// The sealed overlay frame: ESP in UDP (RFC 3948) in tunnel mode, AES-256-GCM (RFC 4106),
// carrying what a plaintext frame carries after its outer UDP header: the VXLAN header and the
// inner Ethernet frame. tshark labels it UDPENCAP/ESP on port 4500 with no preferences.
//
//   outer Ethernet | outer IPv4 | outer UDP (dst 4500, src = the flow's entropy port, csum 0)
//   | SPI (4) | sequence number, low 32 bits (4) | IV = 64-bit sequence number (8)
//   | encrypted: VXLAN header (8) | inner frame | padding 0-3 | pad length | next header
//   | ICV (16)
//
// - SPI = the sender's epoch of the pair's keys (pair_keys.hh); the receiver finds the SA by
//   the outer source address and the SPI, so a frame is opened only with the key of the host
//   its outer header names.
// - Nonce = the direction key's 4-byte salt | the IV, and the IV is the SA's 64-bit sequence
//   number (RFC 4106 §3.1 allows a counter): never repeated under one key, and the receiver
//   reads the full 64-bit number for the replay window without ESN guesswork.
// - AAD = SPI | low sequence number | IV | outer IPv4 source | outer IPv4 destination: every
//   byte the receiver relies on before it has opened the frame is authenticated. The VNI is inside
//   the ciphertext, so it is authenticated and hidden too.
// - Next header 253 (RFC 3692, experimental): no IANA number names "VXLAN header + Ethernet".
//
// Size: the plaintext VXLAN frame's 50 bytes of outer headers plus 16 in front and 18-21
// behind; tenant MTU shrinks by esp_mtu_reserve.

#include <cstdint>

namespace jakiro::overlay::sealing {

constexpr uint16_t esp_udp_port = 4500;   // RFC 3948
constexpr uint32_t esp_header_bytes = 8;  // SPI, low sequence number
constexpr uint32_t esp_iv_bytes = 8;
constexpr uint32_t esp_prefix_bytes = esp_header_bytes + esp_iv_bytes;  // inserted after UDP
constexpr uint32_t esp_icv_bytes = 16;
constexpr uint8_t esp_next_header = 253;
constexpr uint32_t esp_aad_bytes = esp_prefix_bytes + 4 + 4;
// The most bytes sealing appends: 3 of padding, pad length, next header, ICV.
constexpr uint32_t esp_max_trailer_bytes = 3 + 2 + esp_icv_bytes;
// What the tenant MTU gives up when the overlay is sealed (rounded up to a multiple of 4).
constexpr uint32_t esp_mtu_reserve = 40;
static_assert(esp_prefix_bytes + esp_max_trailer_bytes <= esp_mtu_reserve);

// Bytes appended behind a plaintext of `len` bytes (VXLAN header + inner frame): padding so
// that plaintext, pad length and next header end on 4 bytes (RFC 4303 §2.4), then the ICV.
constexpr uint32_t esp_trailer_bytes(uint32_t len) {
    return (4 - (len + 2) % 4) % 4 + 2 + esp_icv_bytes;
}

}  // namespace jakiro::overlay::sealing
