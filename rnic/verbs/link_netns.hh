#pragma once
// Where the peer of a host-side veth lives, asked of the kernel over rtnetlink: the facts a
// vNIC's namespace is learnt from (docs/threat-model.md), none of which a tenant can change. A veth
// knows its peer's namespace (IFLA_LINK_NETNSID, a namespace id in the asking namespace's own
// numbering); RTM_GETNSID gives the id of any namespace jakirod holds a descriptor of, so the
// two meet without looking inside the tenant at all: not at its interfaces, their MACs or
// their ifindexes, which the tenant's root sets as it likes.
//
// Control side only; each call is a few netlink round trips in the caller's namespace.

#include <cstdint>
#include <string>

namespace jakiro::verbs {

class rtnl_socket {
  public:
    rtnl_socket();
    ~rtnl_socket();
    rtnl_socket(const rtnl_socket&) = delete;
    rtnl_socket& operator=(const rtnl_socket&) = delete;

    bool valid() const { return _fd >= 0; }

    // The namespace id (as the caller's namespace numbers it) of the namespace holding the
    // peer of veth `ifname`, an interface of the caller's namespace. False with `error` saying
    // why: no such interface, not a veth, or its peer is in the caller's own namespace.
    bool veth_peer_nsid(const std::string& ifname, int32_t& nsid, std::string& error);
    // The id the caller's namespace gives the namespace `ns_fd` refers to (RTM_GETNSID), or
    // -1 (NETNSA_NSID_NOT_ASSIGNED) when it has none or cannot be asked.
    int32_t nsid_of(int ns_fd);

  private:
    // Sends `request` and reads its one answer into _answer; the answer's length, or -1 with
    // errno set (an NLMSG_ERROR answer's errno included).
    int ask(const void* request, std::size_t size);

    int _fd = -1;
    uint32_t _seq = 0;
    alignas(4) char _answer[32768];
};

}  // namespace jakiro::verbs
