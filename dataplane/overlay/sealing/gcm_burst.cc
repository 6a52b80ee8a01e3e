#include "dataplane/overlay/sealing/gcm_burst.hh"

#include <openssl/crypto.h>

#include <cstring>

namespace jakiro::overlay::sealing {

namespace {

void put_be32(uint8_t* out, uint32_t v) {
    out[0] = static_cast<uint8_t>(v >> 24);
    out[1] = static_cast<uint8_t>(v >> 16);
    out[2] = static_cast<uint8_t>(v >> 8);
    out[3] = static_cast<uint8_t>(v);
}

void put_be64(uint8_t* out, uint64_t v) {
    put_be32(out, static_cast<uint32_t>(v >> 32));
    put_be32(out + 4, static_cast<uint32_t>(v));
}

// AAD: the ESP header and IV as on the wire (SPI, low sequence number, 64-bit sequence
// number) | outer source | outer destination.
void write_aad(uint8_t* aad, const uint8_t* esp, uint32_t src_be, uint32_t dst_be) {
    std::memcpy(aad, esp, esp_prefix_bytes);
    std::memcpy(aad + esp_prefix_bytes, &src_be, 4);
    std::memcpy(aad + esp_prefix_bytes + 4, &dst_be, 4);
}

void write_esp_header(uint8_t* esp, uint32_t spi, uint64_t seq) {
    put_be32(esp, spi);
    put_be32(esp + 4, static_cast<uint32_t>(seq));
    put_be64(esp + 8, seq);
}

// Trailer (RFC 4303 §2.4) behind a plaintext of `len` bytes at `trailer`: padding bytes 1, 2,
// 3..., pad length, next header. Returns its length without the ICV.
uint32_t write_trailer(uint8_t* trailer, uint32_t len) {
    const uint32_t pad = esp_trailer_bytes(len) - 2 - esp_icv_bytes;
    for (uint32_t p = 0; p < pad; ++p) {
        trailer[p] = static_cast<uint8_t>(p + 1);
    }
    trailer[pad] = static_cast<uint8_t>(pad);
    trailer[pad + 1] = esp_next_header;
    return pad + 2;
}

void fill_gcm(IMB_JOB* job, const gcm_key* key, uint8_t* text, uint32_t len, uint8_t* nonce,
              uint8_t* aad, uint8_t* tag) {
    job->cipher_mode = IMB_CIPHER_GCM;
    job->hash_alg = IMB_AUTH_AES_GMAC;
    job->enc_keys = &key->data;
    job->dec_keys = &key->data;
    job->key_len_in_bytes = IMB_KEY_256_BYTES;
    job->src = text;
    job->dst = text;
    job->cipher_start_src_offset_in_bytes = 0;
    job->msg_len_to_cipher_in_bytes = len;
    job->hash_start_src_offset_in_bytes = 0;
    job->msg_len_to_hash_in_bytes = len;
    job->iv = nonce;
    job->iv_len_in_bytes = IMB_GCM_IV_DATA_LEN;
    job->u.GCM.aad = aad;
    job->u.GCM.aad_len_in_bytes = esp_aad_bytes;
    job->auth_tag_output = tag;
    job->auth_tag_output_len_in_bytes = esp_icv_bytes;
}

}  // namespace

gcm_burst::gcm_burst() {
    _mgr = alloc_mb_mgr(0);
    if (_mgr == nullptr) {
        return;
    }
    IMB_ARCH picked = IMB_ARCH_NONE;
    init_mb_mgr_auto(_mgr, &picked);
    if (imb_get_errno(_mgr) != 0) {
        free_mb_mgr(_mgr);
        _mgr = nullptr;
        return;
    }
    switch (picked) {
        case IMB_ARCH_SSE:
            _arch = "sse";
            break;
        case IMB_ARCH_AVX:
            _arch = "avx";
            break;
        case IMB_ARCH_AVX2:
            _arch = "avx2";
            break;
        case IMB_ARCH_AVX512:
            _arch = "avx512";
            break;
        default:
            _arch = "other";
            break;
    }
}

gcm_burst::~gcm_burst() {
    if (_mgr != nullptr) {
        free_mb_mgr(_mgr);
    }
}

void gcm_burst::expand(const direction_key& key, gcm_key& out) const {
    IMB_AES256_GCM_PRE(_mgr, key.key.data(), &out.data);
    out.salt = key.salt;
}

// Completed jobs come back in submission order for GCM, but the index rides in user_data so
// nothing depends on it.
void gcm_burst::run(unsigned n) {
    (void)n;
    IMB_JOB* job;
    while ((job = IMB_FLUSH_JOB(_mgr)) != nullptr) {
        const auto i = reinterpret_cast<uintptr_t>(job->user_data);
        _done[i] = true;
        _failed[i] = job->status != IMB_STATUS_COMPLETED;
    }
}

void gcm_burst::seal(const seal_request* requests, unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
        const seal_request& r = requests[i];
        scratch& s = _scratch[i];
        uint8_t* esp = r.esp;
        write_esp_header(esp, r.spi, r.seq);
        uint8_t* text = esp + esp_prefix_bytes;
        const uint32_t len =
            r.plaintext_len + write_trailer(text + r.plaintext_len, r.plaintext_len);
        std::memcpy(s.nonce, r.key->salt.data(), 4);
        std::memcpy(s.nonce + 4, esp + 8, 8);
        write_aad(s.aad, esp, r.outer_src_be, r.outer_dst_be);

        IMB_JOB* job = IMB_GET_NEXT_JOB(_mgr);
        fill_gcm(job, r.key, text, len, s.nonce, s.aad, text + len);  // ICV right behind
        job->cipher_direction = IMB_DIR_ENCRYPT;
        job->chain_order = IMB_ORDER_CIPHER_HASH;
        job->user_data = reinterpret_cast<void*>(static_cast<uintptr_t>(i));
        job = IMB_SUBMIT_JOB(_mgr);
        while (job != nullptr) {
            job = IMB_GET_COMPLETED_JOB(_mgr);
        }
    }
    run(n);
}

void gcm_burst::seal_gathered(uint8_t* esp, uint32_t head_len,
                              std::span<const plaintext_piece> pieces, const gcm_key& key,
                              uint32_t spi, uint64_t seq, uint32_t outer_src_be,
                              uint32_t outer_dst_be) {
    write_esp_header(esp, spi, seq);
    alignas(16) uint8_t nonce[16];
    // Room to a whole number of blocks, as the burst's scratch has.
    alignas(16) uint8_t aad[esp_aad_bytes + 12] = {};
    std::memcpy(nonce, key.salt.data(), 4);
    std::memcpy(nonce + 4, esp + 8, 8);
    write_aad(aad, esp, outer_src_be, outer_dst_be);
    gcm_context_data ctx;
    IMB_AES256_GCM_INIT(_mgr, &key.data, &ctx, nonce, aad, esp_aad_bytes);
    uint8_t* text = esp + esp_prefix_bytes;
    IMB_AES256_GCM_ENC_UPDATE(_mgr, &key.data, &ctx, text, text, head_len);
    uint8_t* out = text + head_len;
    for (const plaintext_piece& p : pieces) {
        IMB_AES256_GCM_ENC_UPDATE(_mgr, &key.data, &ctx, out, p.data, p.len);
        out += p.len;
    }
    const auto plaintext_len = static_cast<uint32_t>(out - text);
    const uint32_t trailer = write_trailer(out, plaintext_len);
    IMB_AES256_GCM_ENC_UPDATE(_mgr, &key.data, &ctx, out, out, trailer);
    IMB_AES256_GCM_ENC_FINALIZE(_mgr, &key.data, &ctx, out + trailer, esp_icv_bytes);
}

void gcm_burst::open_begin(open_stream& s, const uint8_t* esp_prefix, const gcm_key& key,
                           uint32_t outer_src_be, uint32_t outer_dst_be) {
    alignas(16) uint8_t nonce[16];
    alignas(16) uint8_t aad[esp_aad_bytes + 12] = {};
    std::memcpy(nonce, key.salt.data(), 4);
    std::memcpy(nonce + 4, esp_prefix + 8, 8);
    write_aad(aad, esp_prefix, outer_src_be, outer_dst_be);
    s.key = &key;
    IMB_AES256_GCM_INIT(_mgr, &key.data, &s.ctx, nonce, aad, esp_aad_bytes);
}

bool gcm_burst::open_end(open_stream& s, const uint8_t* icv) {
    alignas(16) uint8_t tag[esp_icv_bytes];
    IMB_AES256_GCM_DEC_FINALIZE(_mgr, &s.key->data, &s.ctx, tag, esp_icv_bytes);
    // Constant time: how much of a forged tag matched must not show in the timing.
    return CRYPTO_memcmp(tag, icv, esp_icv_bytes) == 0;
}

open_result gcm_burst::open_gathered(const uint8_t* esp_prefix,
                                     std::span<const plaintext_piece> ciphertext,
                                     const uint8_t* icv, uint8_t* plaintext, const gcm_key& key,
                                     uint32_t outer_src_be, uint32_t outer_dst_be) {
    open_stream s;
    open_begin(s, esp_prefix, key, outer_src_be, outer_dst_be);
    uint8_t* out = plaintext;
    for (const plaintext_piece& p : ciphertext) {
        open_update(s, out, p.data, p.len);
        out += p.len;
    }
    const auto len = static_cast<uint32_t>(out - plaintext);
    const bool authentic = open_end(s, icv) && len >= 2;
    const uint8_t pad = authentic ? plaintext[len - 2] : 0;
    const bool trailer_ok = authentic && plaintext[len - 1] == esp_next_header && pad <= 3 &&
                            len >= uint32_t{pad} + 2 + 8;
    return {trailer_ok, trailer_ok ? len - pad - 2 : 0};
}

void gcm_burst::open(const open_request* requests, unsigned n, open_result* results) {
    for (unsigned i = 0; i < n; ++i) {
        const open_request& r = requests[i];
        scratch& s = _scratch[i];
        _done[i] = false;
        _failed[i] = false;
        const uint32_t len = r.esp_len - esp_prefix_bytes - esp_icv_bytes;
        std::memcpy(s.nonce, r.key->salt.data(), 4);
        std::memcpy(s.nonce + 4, r.esp + 8, 8);
        write_aad(s.aad, r.esp, r.outer_src_be, r.outer_dst_be);
        IMB_JOB* job = IMB_GET_NEXT_JOB(_mgr);
        fill_gcm(job, r.key, r.esp + esp_prefix_bytes, len, s.nonce, s.aad, s.tag);
        job->cipher_direction = IMB_DIR_DECRYPT;
        job->chain_order = IMB_ORDER_HASH_CIPHER;
        job->user_data = reinterpret_cast<void*>(static_cast<uintptr_t>(i));
        job = IMB_SUBMIT_JOB(_mgr);
        while (job != nullptr) {
            const auto k = reinterpret_cast<uintptr_t>(job->user_data);
            _done[k] = true;
            _failed[k] = job->status != IMB_STATUS_COMPLETED;
            job = IMB_GET_COMPLETED_JOB(_mgr);
        }
    }
    run(n);
    for (unsigned i = 0; i < n; ++i) {
        const open_request& r = requests[i];
        const uint32_t len = r.esp_len - esp_prefix_bytes - esp_icv_bytes;
        const uint8_t* text = r.esp + esp_prefix_bytes;
        // Constant time: how much of a forged tag matched must not show in the timing.
        const bool authentic = _done[i] && !_failed[i] &&
                               CRYPTO_memcmp(_scratch[i].tag, text + len, esp_icv_bytes) == 0;
        const uint8_t pad = text[len - 2];
        const bool trailer_ok = authentic && text[len - 1] == esp_next_header && pad <= 3 &&
                                len >= uint32_t{pad} + 2 + 8;
        results[i] = {trailer_ok, trailer_ok ? len - pad - 2 : 0};
    }
}

}  // namespace jakiro::overlay::sealing
