#include "secgroup/tcp_tracker.hh"

namespace jakiro::secgroup {

const char* to_string(flow_state state) {
    switch (state) {
        case flow_state::tcp_syn_sent:
            return "syn_sent";
        case flow_state::tcp_syn_received:
            return "syn_received";
        case flow_state::tcp_established:
            return "established";
        case flow_state::tcp_fin_wait:
            return "fin_wait";
        case flow_state::tcp_closing:
            return "closing";
        case flow_state::tcp_closed:
            return "closed";
        case flow_state::udp:
            return "udp";
        case flow_state::icmp:
            return "icmp";
        case flow_state::other:
            return "other";
        case flow_state::count_:
            break;
    }
    return "?";
}

}  // namespace jakiro::secgroup
