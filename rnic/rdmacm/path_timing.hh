#pragma once
// The timing a vNIC's RoCE path advertises, and the local ACK timeout the CM derives from it.
// One source for the device's attributes (local_ca_ack_delay), the path records rdma_cm
// resolves (packet life time) and the ACK timeout of every QP rdma_cm connects, so that a
// program gets the timeout the kernel's CM would give a QP on this device: Soft-RoCE reports
// the same two values and its rdma_cm QPs retransmit after 4.096 µs × 2^17 ≈ 537 ms.

#include <algorithm>
#include <cstdint>

namespace jakiro::rdmacm {

// log2(µs / 4.096) of a packet's life on the path, as the kernel's CM reports for RoCE.
constexpr uint8_t path_packet_life_time = 16;
// log2(µs / 4.096) of the longest the responder may take to acknowledge: 134 ms. A software
// responder on a shared core can be late.
constexpr uint8_t ca_ack_delay = 15;

// IBTA's local ACK timeout: twice the packet life time plus the responder's ACK delay, as a
// power of two rounded up (the sum of 2^(plt + 1) and 2^delay needs one more bit only when
// the two are within a factor of two of each other).
constexpr uint8_t local_ack_timeout(uint8_t packet_life_time, uint8_t ack_delay) {
    const int round_trip = packet_life_time + 1;
    const int high = std::max<int>(round_trip, ack_delay);
    const int low = std::min<int>(round_trip, ack_delay);
    return static_cast<uint8_t>(std::min(31, high + (low + 1 >= high ? 1 : 0)));
}

// What a QP connected through rdma_cm gets unless its program sets RDMA_OPTION_ID_ACK_TIMEOUT.
// Long enough to outlast a restart of jakirod (docs/restart.md) on every one of its 7 retries.
constexpr uint8_t default_ack_timeout = local_ack_timeout(path_packet_life_time, ca_ack_delay);
static_assert(default_ack_timeout == 17);

}  // namespace jakiro::rdmacm
