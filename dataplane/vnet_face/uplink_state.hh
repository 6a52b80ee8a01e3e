#pragma once
// The uplink face's receive state (vnet_face.hh): messages read by the last recvmmsg and not
// yet handed on, and the frames of a super-datagram cut but not yet handed on. Worker only.

#include <rte_mbuf.h>
#include <sys/uio.h>

#include <cstdint>

#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/vnet_face/tap_header.hh"
#include "dataplane/vnet_face/vnet_face.hh"

namespace jakiro::vnet_face {

struct face::uplink_state {
    // What does not fit the head mbuf: the rest of an IPv4 datagram of at most 64 KB.
    static constexpr uint32_t tail_bytes = 65536;

    rte_mbuf* spare[max_burst] = {};  // head mbufs allocated ahead
    // Each spare's data room, noted when it is allocated (its header is in cache then): a
    // receive that read it from the mbufs missed the cache on every spare, at every recvmmsg,
    // whether a message came for it or not (43 % of receive_uplink's samples).
    iovec spare_room[max_burst] = {};
    uint16_t spare_count = 0;

    // The last recvmmsg: message i is heads[i] + tails[i], lengths[i] bytes.
    rte_mbuf* heads[max_burst] = {};
    virtio_net_hdr headers[max_burst] = {};
    uint32_t lengths[max_burst] = {};
    bool truncated[max_burst] = {};
    uint16_t received = 0;
    uint16_t next = 0;  // the first message not yet taken

    // A tap uplink's (tap_face.cc): message i's full header, and the 64 KB mbuf its bytes
    // beyond heads[i] went to (kept for the next message unless a VXLAN super-frame took it).
    tap_header tap_headers[max_burst] = {};
    rte_mbuf* bigs[max_burst] = {};

    // The frames cut from the last super-datagram, cut[cut_next..cut_count) still to go.
    rte_mbuf* cut[overlay::max_gso_chunks] = {};
    uint16_t cut_count = 0;
    uint16_t cut_next = 0;

    alignas(64) uint8_t tails[max_burst][tail_bytes];

    ~uplink_state() {
        for (uint16_t i = next; i < received; ++i) {
            rte_pktmbuf_free(heads[i]);
        }
        for (uint16_t i = cut_next; i < cut_count; ++i) {
            rte_pktmbuf_free(cut[i]);
        }
        if (spare_count > 0) {
            rte_pktmbuf_free_bulk(spare, spare_count);
        }
        for (rte_mbuf* big : bigs) {
            rte_pktmbuf_free(big);  // null-safe
        }
    }
};

}  // namespace jakiro::vnet_face
