// QP1's queues are per vNIC: one vNIC whose MADs pile up, coming in (a peer flooding it) or
// going out (its agent sending thousands of requests), loses only its own, counted; another
// vNIC's MADs always find room, and the engine takes a bounded burst of each vNIC per poll.

#include "rnic/gsi_port.hh"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

namespace jakiro::rnic {
namespace {

gsi_datagram mad_for(uint16_t vnic, uint8_t tag) {
    gsi_datagram d;
    d.vnic = vnic;
    d.mad[0] = tag;
    return d;
}

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

TEST(GsiPort, AFloodOfOneVnicsMadsNeverCrowdsOutAnothersOnTheWayIn) {
    gsi_port port;
    const int flooded = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int quiet = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    port.open(0, 64, flooded);
    port.open(1, 64, quiet);
    for (int i = 0; i < 1000; ++i) {
        port.push_rx(mad_for(0, 0xf));
    }
    port.push_rx(mad_for(1, 0x1));
    EXPECT_TRUE(readable(flooded));
    EXPECT_TRUE(readable(quiet)) << "each vNIC's agent is woken for its own MADs";
    const auto mine = port.take_rx(1);
    ASSERT_EQ(mine.size(), 1u);
    EXPECT_EQ(mine[0].mad[0], 0x1);
    EXPECT_EQ(port.take_rx(0).size(), 64u);
    EXPECT_EQ(port.counters(0).rx_dropped, 1000u - 64u);
    EXPECT_EQ(port.counters(1).rx_dropped, 0u);
    EXPECT_EQ(port.counters(1).received, 1u);
    port.close(0);
    port.close(1);
    close(flooded);
    close(quiet);
}

TEST(GsiPort, OneVnicsBurstOfMadsOutNeitherCrowdsOutAnothersNorHoldsTheEngine) {
    gsi_port port;
    port.open(0, 256);
    port.open(1, 256);
    for (int i = 0; i < 1000; ++i) {
        port.push_tx(mad_for(0, 0xf));
    }
    EXPECT_TRUE(port.push_tx(mad_for(1, 0x1)));
    EXPECT_EQ(port.counters(0).tx_dropped, 1000u - 256u);
    // One poll takes a burst of each: vNIC 1's MAD leaves with the first.
    const auto first = port.take_tx();
    EXPECT_EQ(first.size(), gsi_port::tx_burst + 1);
    EXPECT_EQ(std::count_if(first.begin(), first.end(), [](const auto& d) { return d.vnic == 1; }),
              1);
    EXPECT_TRUE(port.tx_pending()) << "vNIC 0's rest waits for the next polls";
    std::size_t rest = 0;
    while (port.tx_pending()) {
        rest += port.take_tx().size();
    }
    EXPECT_EQ(rest, 256u - gsi_port::tx_burst);
}

TEST(GsiPort, AVnicsBoundChangesLiveAndAVnicWithoutQueuesGetsNothing) {
    gsi_port port;
    port.open(3, 2);
    EXPECT_TRUE(port.push_tx(mad_for(3, 1)));
    EXPECT_TRUE(port.push_tx(mad_for(3, 2)));
    EXPECT_FALSE(port.push_tx(mad_for(3, 3)));
    port.set_limit(3, 4);
    EXPECT_TRUE(port.push_tx(mad_for(3, 3)));
    port.push_rx(mad_for(9, 1));  // no agent serves vNIC 9
    EXPECT_TRUE(port.take_rx(9).empty());
    EXPECT_EQ(port.dropped(), 2u);
    port.push_rx(mad_for(3, 9));
    port.close(3);
    EXPECT_FALSE(port.push_tx(mad_for(3, 4))) << "nobody queues for a vNIC that is gone";
    port.push_rx(mad_for(3, 5));
    EXPECT_TRUE(port.take_rx(3).empty()) << "nor receives for it";
    EXPECT_EQ(port.take_tx().size(), 3u) << "its last MADs (goodbyes) still leave";
    EXPECT_FALSE(port.tx_pending());
    EXPECT_EQ(port.counters(3).sent, 0u) << "then its queues are gone";
}

}  // namespace
}  // namespace jakiro::rnic
