// A sleeping worker's watch of the process's frame sources: a socket whose vNIC is held over its
// packet rate leaves the watch and comes back, and each such change costs the watch one update,
// not one per socket of the host.

#include "dataplane/poll_loop/frame_sources.hh"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>

namespace jakiro {
namespace {

// An AF_PACKET socket that hears every frame on the loopback interface.
int loopback_listener() {
    const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

void send_on_loopback() {
    const int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(9);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)!sendto(udp, "x", 1, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
    close(udp);
}

bool set_readable(const frame_source_set& set) {
    epoll_event ev{};
    return epoll_wait(set.fd(), &ev, 1, 100) == 1;
}

TEST(FrameSourceSet, AnIgnoredSocketLeavesTheWatchAloneAndComesBack) {
    const int heard = loopback_listener();
    ASSERT_GE(heard, 0) << "AF_PACKET sockets need CAP_NET_RAW";
    // Sockets that hear nothing (no protocol bound), standing for the host's other faces.
    std::array<int, 8> quiet{};
    for (int& fd : quiet) {
        fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
    }
    frame_source_set set;
    ASSERT_GE(set.fd(), 0);
    set.refresh(1, {});
    ASSERT_GE(set.size(), quiet.size() + 1);
    send_on_loopback();
    EXPECT_TRUE(set_readable(set)) << "the control: a frame on a watched socket is heard";

    const uint64_t before = set.ignore_changes();
    frame_sources::ignore(heard, true);
    set.refresh(1, {});
    EXPECT_FALSE(set_readable(set)) << "its frame waits unheard while it is ignored";
    EXPECT_EQ(set.ignore_changes(), before + 1) << "one socket changed, one update";
    set.refresh(1, {});
    EXPECT_EQ(set.ignore_changes(), before + 1) << "nothing changed, nothing updated";

    frame_sources::ignore(heard, false);
    set.refresh(1, {});
    EXPECT_TRUE(set_readable(set)) << "back in the watch, what waited is heard";
    EXPECT_EQ(set.ignore_changes(), before + 2);

    for (const int fd : quiet) {
        close(fd);
    }
    close(heard);
}

}  // namespace
}  // namespace jakiro
