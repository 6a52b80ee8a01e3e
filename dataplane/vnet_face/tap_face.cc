// The tap uplink (vnet_face.hh, tap_header.hh): opening the tap, reading and writing it.
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "dataplane/vnet_face/tap_header.hh"
#include "dataplane/vnet_face/uplink_state.hh"
#include "dataplane/vnet_face/vnet_face.hh"

namespace jakiro::vnet_face {

namespace {

// TUNSETOFFLOAD bits newer than Debian 12's kernel headers (6.1): USO (6.2) and UDP-tunnel
// GSO (6.16). What the tap may hand us unsegmented, and so what the stack may send it whole.
constexpr unsigned tun_f_uso4 = 0x20;
constexpr unsigned tun_f_uso6 = 0x40;
constexpr unsigned tun_f_udp_tunnel_gso = 0x80;

std::string errno_text(const char* what, const std::string& iface) {
    return std::string(what) + " on tap '" + iface + "': " + std::strerror(errno);
}

// The strongest offload set this kernel's tap accepts, strongest first: VXLAN super-frames and
// UDP GSO super-datagrams; super-datagrams only; neither (the kernel cuts both for us).
// Returns whether VXLAN super-frames are on.
bool negotiate_offloads(int fd) {
    const unsigned sets[] = {
        TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | tun_f_uso4 | tun_f_uso6 | tun_f_udp_tunnel_gso,
        TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | tun_f_uso4 | tun_f_uso6,
        TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6,
    };
    for (const unsigned set : sets) {
        if (ioctl(fd, TUNSETOFFLOAD, set) == 0) {
            return (set & tun_f_udp_tunnel_gso) != 0;
        }
    }
    return false;
}

// Tap descriptors a predecessor handed over, by interface name (control thread / main).
std::map<std::string, int>& inherited_taps() {
    static std::map<std::string, int> taps;
    return taps;
}

int take_inherited_tap(const std::string& iface) {
    auto& taps = inherited_taps();
    const auto it = taps.find(iface);
    if (it == taps.end()) {
        return -1;
    }
    const int fd = it->second;
    taps.erase(it);
    return fd;
}

// Per worker thread: the iovecs of one message.
thread_local iovec tap_iov[1 + 128];

}  // namespace

void inherit_tap(const std::string& iface, int fd) {
    auto& taps = inherited_taps();
    if (const auto it = taps.find(iface); it != taps.end()) {
        close(it->second);
    }
    taps[iface] = fd;
}

std::unique_ptr<face> face::open_tap(const std::string& iface, rte_mempool* pool,
                                     rte_mempool* superframes,
                                     const std::optional<rte_ether_addr>& mac, std::string& error) {
    static_assert(std::size(tap_iov) == 1 + max_tx_segments);
    // TUNSETIFF would create a tap of that name, bridged to nothing: the operator's must exist.
    if (iface.size() >= IFNAMSIZ || if_nametoindex(iface.c_str()) == 0) {
        error = "no interface '" + iface + "' in this network namespace";
        return nullptr;
    }
    // A predecessor's descriptor, attached to the tap already (a single-queue tap takes one).
    int fd = take_inherited_tap(iface);
    const bool inherited = fd >= 0;
    if (!inherited) {
        fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    }
    if (fd < 0) {
        error = errno_text("open(/dev/net/tun)", iface);
        return nullptr;
    }
    auto fail = [&](const char* what) {
        error = errno_text(what, iface);
        close(fd);
        return nullptr;
    };
    ifreq req{};
    std::strncpy(req.ifr_name, iface.c_str(), IFNAMSIZ - 1);
    req.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (!inherited && ioctl(fd, TUNSETIFF, &req) != 0) {
        return fail("TUNSETIFF (is it a tap device, not attached elsewhere?)");
    }
    const int header_size = tap_header_bytes;
    if (ioctl(fd, TUNSETVNETHDRSZ, &header_size) != 0) {
        return fail("TUNSETVNETHDRSZ");
    }
    const bool vxlan_superframes = negotiate_offloads(fd);
    // The tap's own MAC is what the bridge sees on its port, delivered locally there: jakirod
    // must answer to another.
    if (ioctl(fd, SIOCGIFHWADDR, &req) != 0) {
        return fail("SIOCGIFHWADDR");
    }
    rte_ether_addr own;
    if (mac) {
        own = *mac;
    } else {
        std::memcpy(own.addr_bytes, req.ifr_hwaddr.sa_data, RTE_ETHER_ADDR_LEN);
        own.addr_bytes[RTE_ETHER_ADDR_LEN - 1] ^= 1;
    }
    std::unique_ptr<face> opened(new face(fd, pool, iface, own));
    opened->_tap = true;
    opened->_vxlan_superframes = vxlan_superframes;
    opened->_superframes = superframes;
    opened->_uplink = std::make_unique<uplink_state>();
    return opened;
}

bool face::receive_uplink_tap() {
    uplink_state& u = *_uplink;
    u.received = u.next = 0;
    if (!refill_uplink_spares()) {
        return false;
    }
    uint16_t count = u.spare_count;
    for (uint16_t i = 0; i < count; ++i) {
        if (u.bigs[i] == nullptr && (u.bigs[i] = rte_pktmbuf_alloc(_superframes)) == nullptr) {
            _counters.rx_nombuf.add(1);
            count = i;  // the tap holds the rest until mbufs come back
        }
    }
    uint16_t got = 0;
    while (got < count) {
        rte_mbuf* big = u.bigs[got];
        iovec iov[3] = {{&u.tap_headers[got], tap_header_bytes},
                        u.spare_room[u.spare_count - 1],
                        {rte_pktmbuf_mtod(big, void*), rte_pktmbuf_tailroom(big)}};
        const ssize_t n = readv(_fd, iov, 3);
        if (n < 0) {
            break;  // EAGAIN: drained
        }
        rte_mbuf* m = u.spare[--u.spare_count];
        const uint32_t len = n > tap_header_bytes ? static_cast<uint32_t>(n) - tap_header_bytes : 0;
        u.headers[got] = u.tap_headers[got].base;
        u.truncated[got] = len == 0;  // the buffers hold 64 KB and more: nothing is cut off
        u.lengths[got] = len;
        const uint16_t head = static_cast<uint16_t>(std::min<uint32_t>(len, iov[1].iov_len));
        m->data_len = head;
        m->pkt_len = head;
        u.heads[got] = m;
        ++got;
    }
    u.received = got;
    return got > 0;
}

uint16_t face::tx_chunk_tap(rte_mbuf** pkts, uint16_t count) {
    uint16_t done = 0;  // written, or refused and freed
    uint16_t sent = 0;
    uint64_t bytes = 0, superframes = 0, errors = 0;
    tap_header header;
    while (done < count) {
        rte_mbuf* m = pkts[done];
        if (m->nb_segs > max_tx_segments) {
            ++errors;  // too many segments to describe: refused like a bad frame
            rte_pktmbuf_free(pkts[done++]);
            continue;
        }
        header = tap_header_for(m);
        tap_iov[0] = {&header, tap_header_bytes};
        int n = 1;
        for (rte_mbuf* s = m; s != nullptr; s = s->next) {
            tap_iov[n++] = {rte_pktmbuf_mtod(s, void*), s->data_len};
        }
        if (writev(_fd, tap_iov, n) >= 0) {
            bytes += m->pkt_len;
            superframes += stands_for_several(m);
            ++sent;
        } else if (full(errno)) {
            break;  // the caller keeps the rest for the next round
        } else {
            ++errors;  // refused (EINVAL: a header the kernel will not take; EIO: tap down)
        }
        rte_pktmbuf_free(pkts[done++]);
    }
    count_sent(sent, bytes, superframes, errors);
    return done;
}

uint64_t face::tap_drops() const {
    std::ifstream in("/sys/class/net/" + _iface + "/statistics/tx_dropped");
    uint64_t dropped = 0;
    in >> dropped;
    return dropped;
}

}  // namespace jakiro::vnet_face
