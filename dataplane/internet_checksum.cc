#include "dataplane/internet_checksum.hh"

#include <algorithm>
#include <cstring>

namespace jakiro {

namespace {

// Adds 32-bit halves of 64-bit words into 64-bit accumulators: no carry is lost below 2^32
// words, and four independent sums keep the adds in flight together.
uint64_t sum_words(const uint8_t* p, std::size_t words) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    std::size_t i = 0;
    for (; i + 4 <= words; i += 4) {
        uint64_t w[4];
        std::memcpy(w, p + i * 8, sizeof(w));
        a += (w[0] & 0xffffffffu) + (w[0] >> 32);
        b += (w[1] & 0xffffffffu) + (w[1] >> 32);
        c += (w[2] & 0xffffffffu) + (w[2] >> 32);
        d += (w[3] & 0xffffffffu) + (w[3] >> 32);
    }
    for (; i < words; ++i) {
        uint64_t w;
        std::memcpy(&w, p + i * 8, sizeof(w));
        a += (w & 0xffffffffu) + (w >> 32);
    }
    return a + b + c + d;
}

uint64_t swap_bytes_of_sum(uint64_t sum) {
    const uint16_t folded = fold_sum(sum);
    return static_cast<uint16_t>((folded << 8) | (folded >> 8));
}

}  // namespace

uint64_t ones_sum(const void* buf, std::size_t len) {
    const auto* p = static_cast<const uint8_t*>(buf);
    uint64_t sum = sum_words(p, len / 8);
    std::size_t done = len & ~std::size_t{7};
    // The tail in native 16-bit words, then a last odd byte as the first byte of a word (the
    // sum is byte-order independent: RFC 1071 2(B)).
    for (; done + 2 <= len; done += 2) {
        uint16_t v;
        std::memcpy(&v, p + done, sizeof(v));
        sum += v;
    }
    if (done < len) {
        uint16_t v = 0;
        std::memcpy(&v, p + done, 1);
        sum += v;
    }
    return sum;
}

uint16_t fold_sum(uint64_t sum) {
    sum = (sum & 0xffffffffu) + (sum >> 32);
    sum = (sum & 0xffffffffu) + (sum >> 32);
    sum = (sum & 0xffffu) + (sum >> 16);
    sum = (sum & 0xffffu) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

uint64_t ones_sum_mbuf(const rte_mbuf* m, uint32_t offset, uint32_t len) {
    while (m != nullptr && offset >= m->data_len) {
        offset -= m->data_len;
        m = m->next;
    }
    uint64_t sum = 0;
    uint32_t done = 0;  // bytes summed so far: an odd count shifts the next segment's words
    for (; m != nullptr && done < len; m = m->next, offset = 0) {
        const uint32_t n = std::min<uint32_t>(m->data_len - offset, len - done);
        const uint64_t part = ones_sum(rte_pktmbuf_mtod_offset(m, const uint8_t*, offset), n);
        sum += (done & 1) ? swap_bytes_of_sum(part) : part;
        done += n;
    }
    return sum;
}

uint16_t ipv4_l4_checksum(const rte_mbuf* m, const rte_ipv4_hdr* ip, uint32_t l4_offset) {
    const uint32_t l4_len = rte_be_to_cpu_16(ip->total_length) - rte_ipv4_hdr_len(ip);
    const uint64_t sum = ones_sum_mbuf(m, l4_offset, l4_len) + rte_ipv4_phdr_cksum(ip, 0);
    const auto checksum = static_cast<uint16_t>(~fold_sum(sum));
    // A UDP checksum of 0 means "none": send its ones' complement twin (RFC 768).
    return checksum == 0 && ip->next_proto_id == IPPROTO_UDP ? 0xffff : checksum;
}

}  // namespace jakiro
