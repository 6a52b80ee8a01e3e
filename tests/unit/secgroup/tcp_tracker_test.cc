#include "secgroup/tcp_tracker.hh"

#include <gtest/gtest.h>

namespace jakiro::secgroup {
namespace {

struct Tcp : testing::Test {
    flow_state state = flow_state::tcp_syn_sent;
    uint8_t fins = 0;
    void from_initiator(uint8_t flags) { state = tcp_advance(state, flags, true, fins); }
    void from_responder(uint8_t flags) { state = tcp_advance(state, flags, false, fins); }
};

TEST_F(Tcp, ThreeWayHandshakeReachesEstablished) {
    EXPECT_EQ(tcp_initial_state(tcp_syn), flow_state::tcp_syn_sent);
    from_responder(tcp_syn | tcp_ack);
    EXPECT_EQ(state, flow_state::tcp_syn_received);
    from_initiator(tcp_ack);
    EXPECT_EQ(state, flow_state::tcp_established);
}

TEST_F(Tcp, SynAckFromTheInitiatorSideDoesNotAdvance) {
    from_initiator(tcp_syn | tcp_ack);
    EXPECT_EQ(state, flow_state::tcp_syn_sent);
}

TEST_F(Tcp, MidStreamPacketIsPickedUpAsEstablished) {
    EXPECT_EQ(tcp_initial_state(tcp_ack), flow_state::tcp_established);
    EXPECT_EQ(tcp_initial_state(tcp_syn | tcp_ack), flow_state::tcp_established);
}

TEST_F(Tcp, FinFromBothSidesCloses) {
    state = flow_state::tcp_established;
    from_initiator(tcp_fin | tcp_ack);
    EXPECT_EQ(state, flow_state::tcp_fin_wait);
    from_initiator(tcp_fin | tcp_ack);  // retransmitted FIN: still one side
    EXPECT_EQ(state, flow_state::tcp_fin_wait);
    from_responder(tcp_fin | tcp_ack);
    EXPECT_EQ(state, flow_state::tcp_closing);
}

TEST_F(Tcp, ResetClosesFromAnyState) {
    for (auto start :
         {flow_state::tcp_syn_sent, flow_state::tcp_established, flow_state::tcp_fin_wait}) {
        state = start;
        from_responder(tcp_rst);
        EXPECT_EQ(state, flow_state::tcp_closed);
    }
}

TEST_F(Tcp, NewSynReopensAClosedTuple) {
    state = flow_state::tcp_closing;
    fins = 3;
    from_initiator(tcp_syn);
    EXPECT_EQ(state, flow_state::tcp_syn_sent);
    EXPECT_EQ(fins, 0);
}

}  // namespace
}  // namespace jakiro::secgroup
