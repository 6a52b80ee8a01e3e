#pragma once
// Which vNIC sent a frame on its way to the uplink, for the work the uplink's worker does on it
// later: sealing it (overlay/sealing/uplink_sealing.hh) charges that vNIC. The frame may cross
// to the uplink's worker through a hand-off ring; the mark goes with the mbuf.
//
// Kept in the mbuf's outer VLAN tag field, which this datapath uses for nothing else: a mbuf
// taken from a pool has it reset to 0 (rte_pktmbuf_reset), and no transmit path reads it
// without RTE_MBUF_F_TX_QINQ, which jakirod never sets. 0: no vNIC's (jakirod's own frames,
// such as its replies into the tunnel, which clear it since they reuse a received mbuf).

#include <rte_mbuf.h>

#include <cstdint>

namespace jakiro::overlay {

constexpr uint16_t unmarked = UINT16_MAX;

inline void mark_vnic(rte_mbuf* m, uint16_t slot) {
    m->vlan_tci_outer = static_cast<uint16_t>(slot + 1);
}

inline void clear_vnic_mark(rte_mbuf* m) {
    m->vlan_tci_outer = 0;
}

// The slot of the vNIC that sent `m`, or `unmarked`.
inline uint16_t marked_vnic(const rte_mbuf* m) {
    return m->vlan_tci_outer == 0 ? unmarked : static_cast<uint16_t>(m->vlan_tci_outer - 1);
}

}  // namespace jakiro::overlay
