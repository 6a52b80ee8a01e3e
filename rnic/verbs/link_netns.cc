#include "rnic/verbs/link_netns.hh"

#include <linux/if_link.h>
#include <linux/net_namespace.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace jakiro::verbs {

namespace {

// The attributes after a message's fixed part, one at a time.
template <typename Fn>
void for_each_attribute(const char* data, std::size_t length, Fn fn) {
    auto* a = reinterpret_cast<const rtattr*>(data);
    auto left = static_cast<unsigned int>(length);
    for (; RTA_OK(a, left); a = RTA_NEXT(a, left)) {
        fn(a->rta_type, static_cast<const char*>(RTA_DATA(a)),
           static_cast<std::size_t>(RTA_PAYLOAD(a)));
    }
}

}  // namespace

rtnl_socket::rtnl_socket() {
    _fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (_fd >= 0) {
        // Answers only: never wait on a kernel that has nothing to say.
        timeval tv{2, 0};
        setsockopt(_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    }
}

rtnl_socket::~rtnl_socket() {
    if (_fd >= 0) {
        close(_fd);
    }
}

int rtnl_socket::ask(const void* request, std::size_t size) {
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(_fd, request, size, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) !=
        static_cast<ssize_t>(size)) {
        return -1;
    }
    const uint32_t seq = reinterpret_cast<const nlmsghdr*>(request)->nlmsg_seq;
    for (;;) {
        const ssize_t n = recv(_fd, _answer, sizeof(_answer), 0);
        if (n < 0) {
            return -1;
        }
        auto* h = reinterpret_cast<const nlmsghdr*>(_answer);
        if (!NLMSG_OK(h, static_cast<unsigned int>(n))) {
            errno = EPROTO;
            return -1;
        }
        if (h->nlmsg_seq != seq) {
            continue;  // an answer to an earlier request that timed out
        }
        if (h->nlmsg_type == NLMSG_ERROR) {
            const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
            errno = e->error != 0 ? -e->error : EPROTO;
            return -1;
        }
        return static_cast<int>(h->nlmsg_len);
    }
}

bool rtnl_socket::veth_peer_nsid(const std::string& ifname, int32_t& nsid, std::string& error) {
    const unsigned index = if_nametoindex(ifname.c_str());
    if (!valid() || index == 0) {
        error = "no interface " + ifname + " in jakirod's namespace";
        return false;
    }
    struct {
        nlmsghdr n;
        ifinfomsg i;
    } request{};
    request.n.nlmsg_len = sizeof(request);
    request.n.nlmsg_type = RTM_GETLINK;
    request.n.nlmsg_flags = NLM_F_REQUEST;
    request.n.nlmsg_seq = ++_seq;
    request.i.ifi_family = AF_UNSPEC;
    request.i.ifi_index = static_cast<int>(index);
    const int length = ask(&request, sizeof(request));
    auto* h = reinterpret_cast<const nlmsghdr*>(_answer);
    if (length < 0 || h->nlmsg_type != RTM_NEWLINK ||
        h->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) {
        error = "cannot ask the kernel about " + ifname + ": " + std::strerror(errno);
        return false;
    }
    bool veth = false, has_peer_namespace = false;
    const char* attributes =
        static_cast<const char*>(NLMSG_DATA(h)) + NLMSG_ALIGN(sizeof(ifinfomsg));
    for_each_attribute(
        attributes, h->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(sizeof(ifinfomsg))),
        [&](unsigned short type, const char* data, std::size_t size) {
            if (type == IFLA_LINK_NETNSID && size >= sizeof(int32_t)) {
                std::memcpy(&nsid, data, sizeof(nsid));
                has_peer_namespace = true;
            } else if (type == IFLA_LINKINFO) {
                for_each_attribute(data, size, [&](unsigned short t, const char* d, std::size_t s) {
                    veth = veth || (t == IFLA_INFO_KIND && std::string(d, strnlen(d, s)) == "veth");
                });
            }
        });
    if (!veth) {
        error = ifname + " is not a veth";
        return false;
    }
    if (!has_peer_namespace || nsid < 0) {
        error = "the peer of veth " + ifname + " is in jakirod's own namespace";
        return false;
    }
    return true;
}

int32_t rtnl_socket::nsid_of(int ns_fd) {
    struct nsid_request {
        nlmsghdr n;
        rtgenmsg g;
        char pad[3];
        rtattr a;
        uint32_t fd;
    } request{};
    static_assert(offsetof(nsid_request, a) == NLMSG_LENGTH(NLMSG_ALIGN(sizeof(rtgenmsg))));
    request.n.nlmsg_len = sizeof(request);
    request.n.nlmsg_type = RTM_GETNSID;
    request.n.nlmsg_flags = NLM_F_REQUEST;
    request.n.nlmsg_seq = ++_seq;
    request.g.rtgen_family = AF_UNSPEC;
    request.a.rta_type = NETNSA_FD;
    request.a.rta_len = RTA_LENGTH(sizeof(uint32_t));
    request.fd = static_cast<uint32_t>(ns_fd);
    int32_t nsid = NETNSA_NSID_NOT_ASSIGNED;
    if (!valid() || ask(&request, sizeof(request)) < 0) {
        return nsid;
    }
    auto* h = reinterpret_cast<const nlmsghdr*>(_answer);
    if (h->nlmsg_type != RTM_NEWNSID || h->nlmsg_len < NLMSG_LENGTH(sizeof(rtgenmsg))) {
        return nsid;
    }
    const char* attributes =
        static_cast<const char*>(NLMSG_DATA(h)) + NLMSG_ALIGN(sizeof(rtgenmsg));
    for_each_attribute(attributes, h->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(sizeof(rtgenmsg))),
                       [&](unsigned short type, const char* data, std::size_t size) {
                           if (type == NETNSA_NSID && size >= sizeof(int32_t)) {
                               std::memcpy(&nsid, data, sizeof(nsid));
                           }
                       });
    return nsid;
}

}  // namespace jakiro::verbs
