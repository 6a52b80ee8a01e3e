#pragma once
// Seals and opens ESP payloads (esp_format.hh) in bursts with Intel IPSec-MB's job API: a
// burst's jobs are submitted one after another and flushed once, so the library keeps its
// lanes full where the CPU has them, and nothing is called per frame but the job manager.
//
// Works on bytes (no mbufs), so it is tested and benchmarked alone. One per lcore: the job
// manager is not thread-safe. No allocation after construction.

#include <intel-ipsec-mb.h>

#include <array>
#include <cstdint>
#include <span>

#include "dataplane/overlay/sealing/esp_format.hh"
#include "dataplane/overlay/sealing/pair_keys.hh"

namespace jakiro::overlay::sealing {

// One direction key as the library wants it: AES round keys and GHASH powers, precomputed.
struct alignas(64) gcm_key {
    gcm_key_data data;
    std::array<uint8_t, 4> salt{};
};

// Frame to seal: `esp` points at where the SPI goes; the plaintext (VXLAN header and inner
// frame, `plaintext_len` bytes) is already at esp + esp_prefix_bytes, and the buffer has room
// for esp_trailer_bytes(plaintext_len) behind it. Outer addresses as they are in the header.
struct seal_request {
    uint8_t* esp;
    uint32_t plaintext_len;
    const gcm_key* key;
    uint32_t spi;
    uint64_t seq;
    uint32_t outer_src_be;
    uint32_t outer_dst_be;
};

// Frame to open: `esp` at the SPI, `esp_len` bytes from there to the end of the ICV.
struct open_request {
    uint8_t* esp;
    uint32_t esp_len;
    const gcm_key* key;
    uint32_t outer_src_be;
    uint32_t outer_dst_be;
};

// Plaintext bytes that lie elsewhere than the frame being sealed (a tenant super-frame's
// payload, a segment of a chained frame): sealing copies them as it encrypts them.
struct plaintext_piece {
    const uint8_t* data;
    uint32_t len;
};

struct open_result {
    bool ok;                 // authenticated, and the trailer is well formed
    uint32_t plaintext_len;  // VXLAN header + inner frame, at esp + esp_prefix_bytes
};

class gcm_burst {
  public:
    static constexpr unsigned max_burst = 128;

    gcm_burst();
    ~gcm_burst();
    gcm_burst(const gcm_burst&) = delete;
    gcm_burst& operator=(const gcm_burst&) = delete;

    // False when IPSec-MB could not start (no manager): nothing can be sealed then.
    bool ready() const { return _mgr != nullptr; }
    const char* arch() const { return _arch; }

    void expand(const direction_key& key, gcm_key& out) const;

    // Seals `n` (<= max_burst) frames in place: writes the ESP header and IV, the trailer,
    // encrypts and appends the ICV.
    void seal(const seal_request* requests, unsigned n);
    // Seals one frame out of place, at once: writes the ESP header and IV at `esp`, encrypts
    // the `head_len` bytes already at esp + esp_prefix_bytes where they are and `pieces` into
    // the bytes right behind them (the plaintext is the head, then the pieces in order), then
    // writes the trailer and the ICV. The buffer has room for esp_trailer_bytes(plaintext)
    // behind the plaintext. One pass over the pieces: cutting and copying a frame is the
    // encryption's own read and write.
    void seal_gathered(uint8_t* esp, uint32_t head_len, std::span<const plaintext_piece> pieces,
                       const gcm_key& key, uint32_t spi, uint64_t seq, uint32_t outer_src_be,
                       uint32_t outer_dst_be);
    // Opens one frame out of place, at once: `esp_prefix` is its ESP header and IV (16 bytes,
    // read by the caller to find the SA), `ciphertext` the encrypted bytes behind them in
    // order (trailer included), `icv` its 16-byte ICV. The plaintext is written at `plaintext`
    // as it is decrypted: opening a frame where it lies is the only read of it.
    open_result open_gathered(const uint8_t* esp_prefix,
                              std::span<const plaintext_piece> ciphertext, const uint8_t* icv,
                              uint8_t* plaintext, const gcm_key& key, uint32_t outer_src_be,
                              uint32_t outer_dst_be);
    // Opens one frame out of place in steps, for a caller that reads its first bytes before it
    // knows where the rest belongs: open_begin with its ESP header and IV, open_update for its
    // ciphertext in order (any lengths, each to its own destination), open_end with its ICV:
    // true when it authenticated. Bytes written before open_end says so must not be used.
    struct open_stream {
        gcm_context_data ctx;
        const gcm_key* key;
    };
    void open_begin(open_stream& s, const uint8_t* esp_prefix, const gcm_key& key,
                    uint32_t outer_src_be, uint32_t outer_dst_be);
    void open_update(open_stream& s, uint8_t* out, const uint8_t* in, uint32_t len) {
        IMB_AES256_GCM_DEC_UPDATE(_mgr, &s.key->data, &s.ctx, out, in, len);
    }
    bool open_end(open_stream& s, const uint8_t* icv);

    // Opens `n` (<= max_burst) frames in place. A frame whose ICV does not match is !ok and
    // its bytes must not be used (they are decrypted garbage).
    void open(const open_request* requests, unsigned n, open_result* results);

    // Frames as short as an ESP payload can be: header, IV, VXLAN header, pad length, next
    // header, ICV. Shorter ones are malformed before any key is tried.
    static constexpr uint32_t min_esp_len = esp_prefix_bytes + 8 + 2 + esp_icv_bytes;

  private:
    struct scratch {
        alignas(16) uint8_t nonce[16];
        alignas(16) uint8_t aad[esp_aad_bytes + 12];
        alignas(16) uint8_t tag[esp_icv_bytes];
    };
    void run(unsigned n);

    IMB_MGR* _mgr = nullptr;
    const char* _arch = "none";
    std::array<scratch, max_burst> _scratch{};
    std::array<bool, max_burst> _done{};
    std::array<bool, max_burst> _failed{};
};

}  // namespace jakiro::overlay::sealing
