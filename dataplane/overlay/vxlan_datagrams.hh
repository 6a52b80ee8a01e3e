#pragma once
// Plaintext VXLAN frames leave a kernel uplink as UDP GSO super-datagrams (udp_gso.hh): the
// frames of one transmit burst that the kernel can cut back out of one datagram, the same
// outer headers (one host, one outer source port: one inner flow's hash) and the same size,
// are chained into one, at most max_gso_chunks each. A tenant's small frames otherwise cost a
// tap write and an skb through the host's bridge each, and the receiving host a read each:
// 45 % of what a flood of 64-byte datagrams costs the dataplane's CPU on the test bed, and a
// system call per TCP ACK.
//
// The frames of a burst interleave their flows (a tenant sending from several sockets, ACKs
// between data), so frames are gathered per outer flow, not only in consecutive runs. A flow's
// frames keep their order: a datagram goes where its first frame was, and a flow's frame that
// cannot join (another size, a datagram full, or one that stays as it is: a RoCE datagram the
// RNIC built, a tunnel super-frame) ends that datagram, so its later frames go behind it.
// Frames of different flows may pass one another, as on any multi-queue NIC.
//
// Pure mbuf logic: in place, no allocation.

#include <rte_mbuf.h>

#include <cstdint>

namespace jakiro::overlay {

// Joins, in place, the first `n` of `pkts` (frames to be sent on an uplink that takes UDP
// GSO) that may cross as super-datagrams; every other frame (ARP, a chain, a frame with
// offloads asked for, a super-datagram already, a sealed frame) is left as it is. Returns how
// many of `pkts` are left.
uint16_t join_vxlan_datagrams(rte_mbuf** pkts, uint16_t n);

}  // namespace jakiro::overlay
