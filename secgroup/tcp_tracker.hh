#pragma once
// Connection states a stateful firewall needs, and how TCP flags move a flow between them.
// A simplified Linux conntrack: enough to time out half-open, closing and reset connections
// quickly while established ones live long. Plain C++.

#include <cstdint>

namespace jakiro::secgroup {

enum class flow_state : uint8_t {
    tcp_syn_sent,      // initiator's SYN seen
    tcp_syn_received,  // responder's SYN+ACK seen
    tcp_established,
    tcp_fin_wait,  // one side sent FIN
    tcp_closing,   // both sides sent FIN (TIME_WAIT-like)
    tcp_closed,    // RST seen
    udp,
    icmp,
    other,
    count_
};

constexpr uint8_t tcp_fin = 0x01, tcp_syn = 0x02, tcp_rst = 0x04, tcp_ack = 0x10;

const char* to_string(flow_state state);

// State of a new TCP flow whose first packet carried `flags`: a bare SYN opens a handshake;
// anything else is picked up mid-stream (e.g. after a restart) as established.
inline flow_state tcp_initial_state(uint8_t flags) {
    return (flags & (tcp_syn | tcp_ack | tcp_rst)) == tcp_syn ? flow_state::tcp_syn_sent
                                                              : flow_state::tcp_established;
}

// Next state after a segment with `flags`, sent by the flow's initiator or by the responder.
// `fins` remembers which sides have sent FIN (bit 0 initiator, bit 1 responder).
inline flow_state tcp_advance(flow_state state, uint8_t flags, bool from_initiator, uint8_t& fins) {
    if (flags & tcp_rst) {
        return flow_state::tcp_closed;
    }
    const bool syn = flags & tcp_syn;
    const bool ack = flags & tcp_ack;
    if (syn && !ack && from_initiator &&
        (state == flow_state::tcp_closed || state == flow_state::tcp_closing)) {
        fins = 0;  // the 5-tuple is being reused by a new connection
        return flow_state::tcp_syn_sent;
    }
    if (flags & tcp_fin) {
        fins |= from_initiator ? 1 : 2;
        if (fins == 3) {
            return flow_state::tcp_closing;
        }
        if (state == flow_state::tcp_established || state == flow_state::tcp_syn_received) {
            return flow_state::tcp_fin_wait;
        }
        return state;
    }
    switch (state) {
        case flow_state::tcp_syn_sent:
            return syn && ack && !from_initiator ? flow_state::tcp_syn_received : state;
        case flow_state::tcp_syn_received:
            return ack && from_initiator ? flow_state::tcp_established : state;
        default:
            return state;
    }
}

}  // namespace jakiro::secgroup
