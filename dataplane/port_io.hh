#pragma once
// Burst receive and send on any jakirod port id: an ethdev (af_packet, memif: ids below
// RTE_MAX_ETHPORTS) or a vnet face (the ids above, vnet_face/face_registry.hh). One compare per
// burst decides; the worker never knows which kind a vNIC has.

#include <rte_ethdev.h>

#include <algorithm>

#include "dataplane/vnet_face/face_registry.hh"

namespace jakiro {

// A tenant port's receive. A vnet face takes no more of the super-frame pool than `allowance`
// leaves its vNIC, and reads and drops what it has no buffer for (`dropped`); an ethdev
// receives into the PMD's own ring of buffers.
inline uint16_t port_rx_burst(uint16_t port, rte_mbuf** pkts, uint16_t count,
                              const vnet_face::buffer_allowance& allowance,
                              vnet_face::over_allowance& dropped) {
    if (vnet_face::is_face_port(port)) {
        return vnet_face::face_of(port)->rx_burst(pkts, count, allowance, dropped);
    }
    dropped = {};
    return rte_eth_rx_burst(port, 0, pkts, count);
}

// Reads up to `count` (<= 32) frames of a tenant port and drops them: the frames a vNIC sends
// beyond its packet-rate allowance. A vnet face reads them into nothing; an ethdev has them in
// its own buffers already.
inline vnet_face::over_allowance port_rx_discard(uint16_t port, uint16_t count) {
    if (vnet_face::is_face_port(port)) {
        return vnet_face::face_of(port)->discard(count);
    }
    rte_mbuf* pkts[vnet_face::face::max_burst];
    const uint16_t n = rte_eth_rx_burst(port, 0, pkts, std::min(count, vnet_face::face::max_burst));
    vnet_face::over_allowance dropped;
    for (uint16_t i = 0; i < n; ++i) {
        dropped.frames += 1;
        dropped.bytes += pkts[i]->pkt_len;
    }
    rte_pktmbuf_free_bulk(pkts, n);
    return dropped;
}

// The uplink's receive: a vnet face cuts the fabric's UDP GSO super-datagrams into VXLAN
// frames and counts the messages it refuses in `counters`.
inline uint16_t port_rx_uplink(uint16_t port, rte_mbuf** pkts, uint16_t count,
                               lcore_counters& counters) {
    if (vnet_face::is_face_port(port)) {
        return vnet_face::face_of(port)->rx_uplink(pkts, count, counters);
    }
    return rte_eth_rx_burst(port, 0, pkts, count);
}

inline uint16_t port_tx_burst(uint16_t port, rte_mbuf** pkts, uint16_t count) {
    if (vnet_face::is_face_port(port)) {
        return vnet_face::face_of(port)->tx_burst(pkts, count);
    }
    return rte_eth_tx_burst(port, 0, pkts, count);
}

// Whether the uplink `port` takes UDP GSO super-datagrams (overlay/udp_gso.hh): a vnet face
// does, an ethdev wants every frame on its own.
inline bool uplink_takes_udp_gso(uint16_t port) {
    return vnet_face::is_face_port(port);
}

// Whether the uplink `port` takes a VXLAN super-frame whole and has the kernel cut it (a tap
// face with UDP-tunnel GSO; vnet_face/tap_header.hh).
inline bool uplink_takes_vxlan_superframes(uint16_t port) {
    return vnet_face::is_face_port(port) && vnet_face::face_of(port)->takes_vxlan_superframes();
}

// Whether frames sent to `port` may stay super-frames (else they are cut to the MTU first).
inline bool port_takes_superframes(uint16_t port) {
    return vnet_face::is_face_port(port);
}

}  // namespace jakiro
