#include "dataplane/vnet_face/vnet_face.hh"

#include "dataplane/vnet_face/buffer_charges.hh"
#include "dataplane/vnet_face/uplink_state.hh"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace jakiro::vnet_face {

namespace {

// Socket buffers deep enough to ride out a worker that lost its core for a few ms on a shared
// machine (a 64 KB super-frame costs about 66 KB of buffer).
constexpr int socket_buffer_bytes = 8 << 20;
// Per worker thread: the messages of one tx burst (66 KB; one set per thread, not per face).
struct tx_scratch {
    mmsghdr msgs[face::max_burst];
    virtio_net_hdr headers[face::max_burst];
    iovec iov[face::max_burst][1 + face::max_tx_segments];
};
thread_local tx_scratch tx;

std::string errno_text(const char* what) {
    return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

std::unique_ptr<face> face::open(const std::string& iface, rte_mempool* pool, std::string& error,
                                 bool uplink, buffer_charges* charges) {
    const unsigned index = if_nametoindex(iface.c_str());
    if (index == 0) {
        error = "no interface '" + iface + "' in this network namespace";
        return nullptr;
    }
    // Protocol 0 until bound: no frame of another interface is queued before bind().
    const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        error = errno_text("socket(AF_PACKET)");
        return nullptr;
    }
    auto fail = [&](const char* what) {
        error = errno_text(what) + " on '" + iface + "'";
        close(fd);
        return nullptr;
    };
    const int one = 1;
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) != 0) {
        return fail("PACKET_VNET_HDR");
    }
    // Frames we send must not come back to us as PACKET_OUTGOING copies.
    if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0) {
        return fail("PACKET_IGNORE_OUTGOING");
    }
    // The veth's queue adds nothing but a lock and a requeue: hand frames straight to it. Not
    // on the uplink: a bypassed send cannot be segmented in software, so a super-datagram to
    // an interface without tx-udp-segmentation would fail (ENOBUFS) instead of being cut.
    if (!uplink && setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) != 0) {
        return fail("PACKET_QDISC_BYPASS");
    }
    for (const int opt : {SO_RCVBUFFORCE, SO_SNDBUFFORCE}) {
        if (setsockopt(fd, SOL_SOCKET, opt, &socket_buffer_bytes, sizeof(int)) != 0) {
            return fail("socket buffer size");
        }
    }
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = static_cast<int>(index);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        return fail("bind");
    }
    // Tenant frames are addressed to the gateway MAC, not this veth's.
    packet_mreq mreq{};
    mreq.mr_ifindex = static_cast<int>(index);
    mreq.mr_type = PACKET_MR_PROMISC;
    if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq, sizeof(mreq)) != 0) {
        return fail("PACKET_MR_PROMISC");
    }
    // As with the af_packet PMD: the kernel reassembles a tenant's fragments before we read
    // them, so the security groups judge whole datagrams (a group of one; the id only has to
    // be unique in this namespace, and interface indexes are).
    const int fanout = static_cast<int>((index & 0xffff) | (PACKET_FANOUT_HASH << 16) |
                                        (PACKET_FANOUT_FLAG_DEFRAG << 16));
    if (setsockopt(fd, SOL_PACKET, PACKET_FANOUT, &fanout, sizeof(fanout)) != 0) {
        return fail("PACKET_FANOUT");
    }
    ifreq req{};
    std::strncpy(req.ifr_name, iface.c_str(), IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFHWADDR, &req) != 0) {
        return fail("SIOCGIFHWADDR");
    }
    rte_ether_addr mac;
    std::memcpy(mac.addr_bytes, req.ifr_hwaddr.sa_data, RTE_ETHER_ADDR_LEN);
    std::unique_ptr<face> opened(new face(fd, pool, iface, mac));
    if (uplink) {
        opened->_uplink = std::make_unique<uplink_state>();
    }
    opened->_charges = charges;
    return opened;
}

face::face(int fd, rte_mempool* pool, std::string iface, rte_ether_addr mac)
    : _fd(fd), _pool(pool), _iface(std::move(iface)), _mac(mac) {}

face::~face() {
    if (_spare_count > 0) {
        rte_pktmbuf_free_bulk(_spare, _spare_count);
    }
    close(_fd);
}

uint16_t face::rx_burst(rte_mbuf** pkts, uint16_t count, const buffer_allowance& allowance,
                        over_allowance& dropped) {
    dropped = {};
    count = std::min<uint16_t>(count, max_burst);
    // Frames of this burst the vNIC has no buffer for: read and dropped after the others, so a
    // vNIC at its bound neither waits in its socket (the kernel would drop what overflows,
    // uncounted for the vNIC) nor keeps it readable for the worker's epoll.
    uint16_t beyond = 0;
    if (_charges != nullptr) {
        // The spares are charged already: what they hold and `room` more may be used.
        const uint32_t held = _charges->held(allowance.vnic);
        const uint32_t room = allowance.buffers > held ? allowance.buffers - held : 0;
        const uint16_t usable =
            static_cast<uint16_t>(std::min<uint32_t>(count, _spare_count + room));
        beyond = count - usable;
        count = usable;
        if (count == 0) {
            dropped = discard(beyond);
            return 0;
        }
    }
    if (_spare_count < count) {
        if (rte_pktmbuf_alloc_bulk(_pool, _spare + _spare_count, count - _spare_count) == 0) {
            if (_charges != nullptr) {
                _charges->charge(allowance.vnic, _spare + _spare_count, count - _spare_count);
            }
            _spare_count = count;
        } else {
            _counters.rx_nombuf.add(1);
            count = _spare_count;  // what we have; the socket holds the rest
            if (count == 0) {
                return 0;
            }
        }
    }
    mmsghdr msgs[max_burst];
    iovec iov[max_burst][2];
    virtio_net_hdr headers[max_burst];
    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = _spare[_spare_count - 1 - i];
        iov[i][0] = {&headers[i], header_bytes};
        iov[i][1] = {rte_pktmbuf_mtod(m, void*), rte_pktmbuf_tailroom(m)};
        msgs[i].msg_hdr = {};
        msgs[i].msg_hdr.msg_iov = iov[i];
        msgs[i].msg_hdr.msg_iovlen = 2;
    }
    const int got = recvmmsg(_fd, msgs, count, MSG_DONTWAIT, nullptr);
    if (got < count) {
        // The socket is drained: give the 64 KB mbufs back. A face that keeps a burst's worth
        // while it is quiet would let 32 quiet faces hold the whole pool (face_registry.cc),
        // and a host has up to 256.
        const uint16_t used = got > 0 ? static_cast<uint16_t>(got) : 0;
        rte_pktmbuf_free_bulk(_spare, _spare_count - used);
        std::copy(_spare + _spare_count - used, _spare + _spare_count,
                  _spare);  // towards the front
        _spare_count = used;
    }
    if (got <= 0) {
        return 0;  // EAGAIN: nothing there
    }
    if (got == count && beyond > 0) {
        dropped = discard(beyond);
    }
    uint16_t out = 0;
    uint64_t bytes = 0, superframes = 0, bad = 0, truncated = 0;
    for (int i = 0; i < got; ++i) {
        rte_mbuf* m = _spare[--_spare_count];
        if ((msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0 || msgs[i].msg_len < header_bytes) {
            ++truncated;
            rte_pktmbuf_free(m);
            continue;
        }
        const uint32_t len = msgs[i].msg_len - header_bytes;
        m->data_len = static_cast<uint16_t>(len);
        m->pkt_len = len;
        if (to_mbuf(headers[i], m) != header_verdict::ok) {
            ++bad;
            rte_pktmbuf_free(m);
            continue;
        }
        bytes += len;
        superframes += (m->ol_flags & RTE_MBUF_F_TX_TCP_SEG) != 0;
        pkts[out++] = m;
    }
    _counters.rx_packets.add(out);
    _counters.rx_bytes.add(bytes);
    if (superframes != 0) {
        _counters.rx_superframes.add(superframes);
    }
    if (bad != 0) {
        _counters.rx_bad_header.add(bad);
    }
    if (truncated != 0) {
        _counters.rx_truncated.add(truncated);
    }
    return out;
}

over_allowance face::discard(uint16_t count) {
    // The kernel copies what fits (the vnet header, which it insists on having room for, and
    // a few bytes of the frame), drops the rest of each and, asked with MSG_TRUNC, says how
    // long it was.
    char nothing[header_bytes + 64];  // on the stack: faces of several workers discard at once
    mmsghdr msgs[max_burst];
    iovec iov = {nothing, sizeof(nothing)};
    for (uint16_t i = 0; i < count; ++i) {
        msgs[i].msg_hdr = {};
        msgs[i].msg_hdr.msg_iov = &iov;
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int got = recvmmsg(_fd, msgs, count, MSG_DONTWAIT | MSG_TRUNC, nullptr);
    over_allowance dropped;
    for (int i = 0; i < got; ++i) {
        dropped.frames += 1;
        dropped.bytes += msgs[i].msg_len > header_bytes ? msgs[i].msg_len - header_bytes : 0;
    }
    return dropped;
}

uint16_t face::tx_burst(rte_mbuf** pkts, uint16_t count) {
    uint16_t total = 0;
    while (total < count) {
        const uint16_t chunk = std::min<uint16_t>(count - total, max_burst);
        const uint16_t done = tx_chunk(pkts + total, chunk);
        total += done;
        if (done < chunk) {
            break;
        }
    }
    return total;
}

uint16_t face::tx_chunk(rte_mbuf** pkts, uint16_t count) {
    if (_tap) {
        return tx_chunk_tap(pkts, count);
    }
    uint16_t done = 0;  // sent, or refused and freed
    uint16_t sent = 0;
    uint64_t bytes = 0, superframes = 0, errors = 0;
    while (done < count) {
        // Messages for pkts[done..): stop before a frame with more segments than we describe.
        uint16_t prepared = 0;
        for (uint16_t i = done; i < count; ++i, ++prepared) {
            const rte_mbuf* m = pkts[i];
            if (m->nb_segs > max_tx_segments) {
                break;
            }
            tx.headers[prepared] = from_mbuf(m);
            iovec* iov = tx.iov[prepared];
            iov[0] = {&tx.headers[prepared], header_bytes};
            unsigned n = 1;
            for (const rte_mbuf* s = m; s != nullptr; s = s->next) {
                iov[n++] = {rte_pktmbuf_mtod(s, void*), s->data_len};
            }
            tx.msgs[prepared].msg_hdr = {};
            tx.msgs[prepared].msg_hdr.msg_iov = iov;
            tx.msgs[prepared].msg_hdr.msg_iovlen = n;
        }
        if (prepared == 0) {
            ++errors;  // too many segments to describe: refused like a bad frame
            rte_pktmbuf_free(pkts[done++]);
            continue;
        }
        const int r = sendmmsg(_fd, tx.msgs, prepared, MSG_DONTWAIT);
        if (r > 0) {
            for (int i = 0; i < r; ++i) {
                const rte_mbuf* m = pkts[done + i];
                bytes += m->pkt_len;
                superframes += stands_for_several(m);
            }
            rte_pktmbuf_free_bulk(pkts + done, r);
            done += r;
            sent += r;
            continue;
        }
        if (full(errno)) {
            break;  // the socket is full: the caller keeps the rest for the next round
        }
        ++errors;  // this frame is refused (EINVAL, EMSGSIZE, ...): never retried
        rte_pktmbuf_free(pkts[done++]);
    }
    count_sent(sent, bytes, superframes, errors);
    return done;
}

void face::count_sent(uint16_t sent, uint64_t bytes, uint64_t superframes, uint64_t errors) {
    _counters.tx_packets.add(sent);
    _counters.tx_bytes.add(bytes);
    if (superframes != 0) {
        _counters.tx_superframes.add(superframes);
    }
    if (errors != 0) {
        _counters.tx_errors.add(errors);
    }
}

face_stats face::stats() {
    tpacket_stats kernel{};
    socklen_t len = sizeof(kernel);
    if (_tap) {
        _kernel_drops = tap_drops();
    } else if (getsockopt(_fd, SOL_PACKET, PACKET_STATISTICS, &kernel, &len) == 0) {
        _kernel_drops += kernel.tp_drops;
    }
    face_stats s;
    s.rx_missed = _kernel_drops;
    s.rx_packets = _counters.rx_packets.read();
    s.rx_bytes = _counters.rx_bytes.read();
    s.rx_superframes = _counters.rx_superframes.read();
    s.tx_packets = _counters.tx_packets.read();
    s.tx_bytes = _counters.tx_bytes.read();
    s.tx_superframes = _counters.tx_superframes.read();
    s.rx_bad_header = _counters.rx_bad_header.read();
    s.rx_truncated = _counters.rx_truncated.read();
    s.rx_nombuf = _counters.rx_nombuf.read();
    s.tx_errors = _counters.tx_errors.read();
    return s;
}

bool face::link_up() const {
    ifreq req{};
    std::strncpy(req.ifr_name, _iface.c_str(), IFNAMSIZ - 1);
    if (!_tap) {
        return ioctl(_fd, SIOCGIFFLAGS, &req) == 0 && (req.ifr_flags & IFF_RUNNING) != 0;
    }
    // A tap's descriptor answers only tun ioctls: ask through a socket.
    const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const bool up =
        sock >= 0 && ioctl(sock, SIOCGIFFLAGS, &req) == 0 && (req.ifr_flags & IFF_RUNNING) != 0;
    if (sock >= 0) {
        close(sock);
    }
    return up;
}

}  // namespace jakiro::vnet_face
