#pragma once
// A tenant's Ethernet face that moves super-frames: an AF_PACKET socket on the host side of
// the tenant's veth with PACKET_VNET_HDR, read with recvmmsg and written with sendmmsg, up to
// 32 frames per system call. DPDK 22.11's net_af_packet has neither a vnet header nor TSO, so a
// tenant behind it must cut every TCP stream into 1500-byte frames and jakirod pays one
// af_packet copy and ring slot per frame; here one 64 KB frame costs what one 1.5 KB frame did.
//
// Why sockets and not TPACKET rings: a ring costs a second copy (kernel -> ring -> mbuf) and
// 64 KB slots (128 of them are 8 MB per direction per vNIC); recvmmsg copies once, straight into
// the mbuf, and one system call per 32 super-frames is noise next to copying 2 MB.
//
// Memory: one mbuf per super-frame, from a pool with 64 KB data rooms (face_registry.hh), not
// chains of 2 KB mbufs: the pipelines parse headers in place, and a single segment keeps the
// payload contiguous for the checksum and for rte_gso's indirect segments. The pool is the
// host's; a tenant face charges its vNIC for every buffer it takes (buffer_charges.hh) and,
// with its vNIC at its allowance, reads what its tenant sends and drops it (counted) instead of
// taking more: the frames another vNIC needs buffers for stay free, and the socket, drained,
// does not keep the worker awake.
//
// Not an ethdev: it has no port id below RTE_MAX_ETHPORTS and no limit of 32 (see
// face_registry.hh). The socket is an ordinary AF_PACKET socket of the process, so the worker's
// rx_waker polls it while the worker sleeps like the af_packet PMD's.
//
// The uplink is a face too (open(..., uplink = true)): it receives into the daemon's ordinary
// mbufs, with a 64 KB side buffer per message for what does not fit, and cuts the UDP GSO
// super-datagrams other Jakiro hosts send into VXLAN frames (uplink_frames.hh); it sends the
// ones the egress pipeline joined (overlay/udp_gso.hh). One system call and one skb per
// super-frame instead of one per 1.5 KB frame.
//
// The uplink may instead be a tap device bridged to the underlay ("vnet:tap=NAME", open_tap):
// the same receive and send, one readv/writev per message (a tap has no recvmmsg), plus what
// a packet socket cannot say: a tenant's TCP super-frame crosses the fabric as ONE VXLAN frame
// (UDP-tunnel GSO, tap_header.hh) where the kernel supports it (Linux 6.16).
//
// Thread-safety: rx_burst/rx_uplink/tx_burst from the one worker that polls the vNIC; stats(),
// mac() and link_up() from the control thread (counters are single-writer atomics).

#include <rte_ether.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dataplane/counters.hh"
#include "dataplane/vnet_face/vnet_header.hh"

namespace jakiro::overlay::sealing {
class uplink_sealing;
}

namespace jakiro::vnet_face {

struct face_stats {
    // packets counts messages; superframes, those of them that stand for several wire frames
    // (a tenant's TCP GSO frame, a UDP GSO super-datagram on the uplink): the share of
    // messages that batched.
    uint64_t rx_packets = 0, rx_bytes = 0, rx_superframes = 0;
    uint64_t tx_packets = 0, tx_bytes = 0, tx_superframes = 0;
    uint64_t rx_bad_header = 0;  // refused vnet headers (header_verdict other than ok)
    uint64_t rx_truncated = 0;   // larger than an mbuf's data room
    uint64_t rx_nombuf = 0;      // bursts that found the pool empty
    uint64_t tx_errors = 0;      // frames the kernel refused (bad header, too big)
    uint64_t rx_missed = 0;      // dropped by the kernel: the socket's buffer was full
};

class buffer_charges;

// What a tenant face may hold for its vNIC: whose charge its buffers are, and how many the
// vNIC may hold at once (vnic_view::max_packet_buffers).
struct buffer_allowance {
    uint16_t vnic;
    uint32_t buffers;
};
// Frames a face read and dropped because its vNIC held its allowance, and their bytes.
struct over_allowance {
    uint16_t frames = 0;
    uint32_t bytes = 0;
};

// A take-over (docs/restart.md): the tap `iface` is already attached to `fd`, a predecessor's
// descriptor; the next open_tap of `iface` uses it instead of attaching anew (a single-queue
// tap admits one attachment, and reattaching would drop what it queued). Takes `fd`.
void inherit_tap(const std::string& iface, int fd);

class face {
  public:
    static constexpr uint16_t max_burst = 32;
    // A frame sent is one message: the vnet header plus one iovec per mbuf segment. GRO
    // merges at most RTE_GRO_MAX_BURST_ITEM_NUM (128) frames into one.
    static constexpr unsigned max_tx_segments = 128;

    // Opens the face on host interface `iface`; frames are received into mbufs of `pool`.
    // `uplink`: the fabric's face (rx_uplink, not rx_burst). `charges`: where a tenant face
    // charges its vNIC for the buffers it takes (a pool of buffer_charges::create_pool).
    static std::unique_ptr<face> open(const std::string& iface, rte_mempool* pool,
                                      std::string& error, bool uplink = false,
                                      buffer_charges* charges = nullptr);
    // Opens the uplink face on the existing tap device `iface` (tap_face.cc): frames are
    // received into mbufs of `pool`, a VXLAN super-frame's tail into one of `superframes`.
    // jakirod's underlay MAC is `mac`, or else the tap's own with the last byte's low bit
    // flipped (the tap's own MAC is the bridge's side of the link, delivered locally there).
    static std::unique_ptr<face> open_tap(const std::string& iface, rte_mempool* pool,
                                          rte_mempool* superframes,
                                          const std::optional<rte_ether_addr>& mac,
                                          std::string& error);
    ~face();
    face(const face&) = delete;
    face& operator=(const face&) = delete;

    // Up to `count` (<= max_burst) frames, with their offload metadata; refused ones are
    // counted and freed here. A face with charges takes no more buffers than `allowance`
    // leaves its vNIC, and reads and drops the rest of the `count` frames (`dropped`).
    uint16_t rx_burst(rte_mbuf** pkts, uint16_t count, const buffer_allowance& allowance,
                      over_allowance& dropped);
    // The uplink's receive: up to `count` frames, a super-datagram's cut into its VXLAN frames
    // (those that do not fit wait for the next call); refused messages are counted in
    // `counters`' drops. At most one recvmmsg (a tap: readv until it is drained or a burst
    // is read).
    uint16_t rx_uplink(rte_mbuf** pkts, uint16_t count, lcore_counters& counters);
    // The sealed overlay: super-datagrams of sealed frames addressed to `local_ip` and
    // `local_mac` are opened as they are cut, each frame decrypted from where it lies in the
    // message (overlay::sealing::uplink_sealing::open_datagram). Before the first rx_uplink.
    void open_sealed_datagrams(overlay::sealing::uplink_sealing* sealing, rte_be32_t local_ip,
                               const rte_ether_addr& local_mac) {
        _sealing = sealing;
        _sealing_ip = local_ip;
        _sealing_mac = local_mac;
    }
    // Whether rx_uplink has frames or messages read earlier still to give (then it must be
    // called whether or not the socket is readable).
    bool holds_uplink_frames() const;
    bool is_uplink() const { return _uplink != nullptr; }
    bool is_tap() const { return _tap; }
    // A tap uplink whose kernel agreed to UDP-tunnel GSO: it takes VXLAN super-frames whole.
    bool takes_vxlan_superframes() const { return _vxlan_superframes; }
    // Sends and frees the first N frames, N returned; the rest stay the caller's (socket
    // buffer full). A frame the kernel refuses is counted as an error, freed, and counts as sent.
    uint16_t tx_burst(rte_mbuf** pkts, uint16_t count);

    // Control thread only (it also collects the kernel's drop count, which reading resets).
    face_stats stats();
    // The super-frame counts alone (any thread): no system call, unlike stats().
    uint64_t superframes_received() const { return _counters.rx_superframes.read(); }
    uint64_t superframes_sent() const { return _counters.tx_superframes.read(); }
    const rte_ether_addr& mac() const { return _mac; }
    bool link_up() const;
    const std::string& iface() const { return _iface; }
    int fd() const { return _fd; }
    // Reads up to `count` (<= max_burst) frames into nothing: what a vNIC sends beyond an
    // allowance, dropped without taking a buffer.
    over_allowance discard(uint16_t count);

  private:
    struct uplink_state;  // uplink_rx.cc
    face(int fd, rte_mempool* pool, std::string iface, rte_ether_addr mac);
    uint16_t tx_chunk(rte_mbuf** pkts, uint16_t count);      // count <= max_burst
    uint16_t tx_chunk_tap(rte_mbuf** pkts, uint16_t count);  // tap_face.cc
    bool receive_uplink();                                   // one recvmmsg into _uplink
    bool receive_uplink_tap();                               // readv until drained (tap_face.cc)
    bool refill_uplink_spares();
    uint64_t tap_drops() const;  // the tap's tx_dropped: frames its queue had no room for
    // After a send: the counters of what went (sent, its bytes, how many were super-frames)
    // and of what the kernel refused.
    void count_sent(uint16_t sent, uint64_t bytes, uint64_t superframes, uint64_t errors);
    static bool stands_for_several(const rte_mbuf* m) {
        return (m->ol_flags & (RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_UDP_SEG)) != 0;
    }
    // A send that failed with `err` is tried again next round (the socket or queue is full).
    static bool full(int err) {
        return err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS || err == EINTR;
    }

    int _fd;
    rte_mempool* _pool;
    std::string _iface;
    rte_ether_addr _mac;
    rte_mbuf* _spare[max_burst] = {};  // allocated ahead, so a burst allocates only what it used
    uint16_t _spare_count = 0;
    uint64_t _kernel_drops = 0;             // control thread only
    std::unique_ptr<uplink_state> _uplink;  // the uplink face only
    bool _tap = false;                      // a tap device, not an AF_PACKET socket
    bool _vxlan_superframes = false;
    rte_mempool* _superframes = nullptr;  // a tap uplink's: the tails of VXLAN super-frames
    buffer_charges* _charges = nullptr;   // a tenant face's: its vNIC's charge for _pool's buffers
    overlay::sealing::uplink_sealing* _sealing = nullptr;  // the uplink's, when it seals
    rte_be32_t _sealing_ip = 0;
    rte_ether_addr _sealing_mac{};

    struct counters {
        // One writer, the worker that polls the face.
        stats::counter rx_packets, rx_bytes, rx_superframes;
        stats::counter tx_packets, tx_bytes, tx_superframes;
        stats::counter rx_bad_header, rx_truncated, rx_nombuf, tx_errors;
    } _counters;
};

}  // namespace jakiro::vnet_face
