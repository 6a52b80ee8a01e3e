// The uplink face's receive path (vnet_face.hh, uplink_state.hh).
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "dataplane/overlay/sealing/uplink_sealing.hh"
#include "dataplane/vnet_face/uplink_frames.hh"
#include "dataplane/vnet_face/uplink_state.hh"
#include "dataplane/vnet_face/vnet_face.hh"

namespace jakiro::vnet_face {

namespace {

// Monotonic nanoseconds, the clock the uplink's sealing keeps its times in (vDSO).
uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// A header the kernel gives a UDP GSO super-datagram with (take_uplink_message's checks).
bool sealed_datagram_header(const virtio_net_hdr& hdr) {
    return hdr.gso_type == VIRTIO_NET_HDR_GSO_UDP_L4 && hdr.flags == VIRTIO_NET_HDR_F_NEEDS_CSUM &&
           hdr.gso_size != 0;
}

}  // namespace

bool face::refill_uplink_spares() {
    uplink_state& u = *_uplink;
    if (u.spare_count < max_burst) {
        if (rte_pktmbuf_alloc_bulk(_pool, u.spare + u.spare_count, max_burst - u.spare_count) ==
            0) {
            for (uint16_t s = u.spare_count; s < max_burst; ++s) {
                rte_mbuf* m = u.spare[s];
                u.spare_room[s] = {rte_pktmbuf_mtod(m, void*), rte_pktmbuf_tailroom(m)};
            }
            u.spare_count = max_burst;
        } else {
            _counters.rx_nombuf.add(1);
            if (u.spare_count == 0) {
                return false;  // the socket holds the frames until mbufs come back
            }
        }
    }
    return true;
}

bool face::receive_uplink() {
    if (_tap) {
        return receive_uplink_tap();
    }
    uplink_state& u = *_uplink;
    u.received = u.next = 0;
    if (!refill_uplink_spares()) {
        return false;
    }
    const uint16_t count = u.spare_count;
    mmsghdr msgs[max_burst];
    iovec iov[max_burst][3];
    for (uint16_t i = 0; i < count; ++i) {
        iov[i][0] = {&u.headers[i], header_bytes};
        iov[i][1] = u.spare_room[u.spare_count - 1 - i];
        iov[i][2] = {u.tails[i], uplink_state::tail_bytes};
        msgs[i].msg_hdr = {};
        msgs[i].msg_hdr.msg_iov = iov[i];
        msgs[i].msg_hdr.msg_iovlen = 3;
    }
    const int got = recvmmsg(_fd, msgs, count, MSG_DONTWAIT, nullptr);
    if (got <= 0) {
        return false;  // EAGAIN: nothing there
    }
    for (int i = 0; i < got; ++i) {
        rte_mbuf* m = u.spare[--u.spare_count];
        const uint32_t len = msgs[i].msg_len > header_bytes ? msgs[i].msg_len - header_bytes : 0;
        u.truncated[i] = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0 || len == 0;
        u.lengths[i] = len;
        const uint16_t head = static_cast<uint16_t>(std::min<uint32_t>(len, iov[i][1].iov_len));
        m->data_len = head;
        m->pkt_len = head;
        u.heads[i] = m;
    }
    u.received = static_cast<uint16_t>(got);
    return true;
}

bool face::holds_uplink_frames() const {
    const uplink_state& u = *_uplink;
    return u.cut_next < u.cut_count || u.next < u.received;
}

uint16_t face::rx_uplink(rte_mbuf** pkts, uint16_t count, lcore_counters& counters) {
    uplink_state& u = *_uplink;
    uint16_t out = 0;
    uint64_t bytes = 0, datagrams = 0;
    bool polled = false;
    while (out < count) {
        if (u.cut_next < u.cut_count) {
            const uint16_t n = std::min<uint16_t>(count - out, u.cut_count - u.cut_next);
            for (uint16_t i = 0; i < n; ++i) {
                rte_mbuf* m = u.cut[u.cut_next + i];
                bytes += rte_pktmbuf_pkt_len(m);
                pkts[out + i] = m;
            }
            out += n;
            u.cut_next += n;
            continue;
        }
        if (u.next < u.received) {
            const uint16_t i = u.next++;
            if (u.truncated[i]) {
                counters.drops[static_cast<std::size_t>(drop_reason::uplink_frame_too_big)].add(1);
                rte_pktmbuf_free(u.heads[i]);
                continue;
            }
            uint16_t frames = 0;
            std::optional<drop_reason> dropped;
            if (_tap && (u.headers[i].gso_type & VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4) != 0) {
                // One VXLAN frame carrying a whole TCP super-frame: its tail mbuf joins it.
                rte_mbuf* m = u.heads[i];
                if (u.lengths[i] > m->data_len) {
                    rte_mbuf* tail = std::exchange(u.bigs[i], nullptr);
                    tail->data_len = static_cast<uint16_t>(u.lengths[i] - m->data_len);
                    tail->pkt_len = tail->data_len;
                    m->next = tail;
                    m->nb_segs = 2;
                    m->pkt_len = u.lengths[i];
                }
                dropped = take_vxlan_superframe(u.tap_headers[i], m);
                if (!dropped) {
                    u.cut[0] = m;
                    frames = 1;
                }
            } else {
                const uint8_t* tail =
                    _tap ? rte_pktmbuf_mtod(u.bigs[i], const uint8_t*) : u.tails[i];
                std::optional<uint16_t> opened;
                if (_sealing != nullptr && sealed_datagram_header(u.headers[i])) {
                    // Sealed frames are opened where they lie instead of copied out first.
                    rte_mbuf* head = u.heads[i];
                    opened = _sealing->open_datagram(
                        rte_pktmbuf_mtod(head, const uint8_t*), rte_pktmbuf_data_len(head), tail,
                        u.lengths[i], u.headers[i].gso_size, _pool,
                        _sealing->datagram_pool() != nullptr ? _sealing->datagram_pool()
                                                             : _superframes,
                        u.cut, _sealing_ip, _sealing_mac, counters, now_ns());
                    if (opened) {
                        rte_pktmbuf_free(head);
                        frames = *opened;
                    }
                }
                if (!opened) {
                    dropped = take_uplink_message(u.headers[i], u.heads[i], tail, u.lengths[i],
                                                  _pool, u.cut, frames);
                }
            }
            if (dropped) {
                counters.drops[static_cast<std::size_t>(*dropped)].add(1);
                continue;
            }
            datagrams += u.headers[i].gso_type != VIRTIO_NET_HDR_GSO_NONE;
            u.cut_count = frames;
            u.cut_next = 0;
            continue;
        }
        if (polled || !receive_uplink()) {
            break;
        }
        polled = true;
    }
    _counters.rx_packets.add(out);
    _counters.rx_bytes.add(bytes);
    if (datagrams != 0) {
        _counters.rx_superframes.add(datagrams);
    }
    return out;
}

}  // namespace jakiro::vnet_face
