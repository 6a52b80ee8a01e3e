#pragma once
// The network namespace a vNIC's tenant lives in, and the two things jakirod does with it
// (docs/architecture.md §1, docs/threat-model.md): it binds the vNIC's RDMA endpoint there as an
// abstract Unix socket, which only processes of that namespace can reach, and it checks that a
// connecting process really is in it (SO_PEERCRED pid -> /proc/<pid>/ns/net).
//
// Control side only (the channel server and apply); every function may block briefly.

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace jakiro::verbs {

class tenant_namespace {
  public:
    tenant_namespace() = default;
    ~tenant_namespace();
    tenant_namespace(tenant_namespace&& other) noexcept;
    tenant_namespace& operator=(tenant_namespace&& other) noexcept;
    tenant_namespace(const tenant_namespace&) = delete;
    tenant_namespace& operator=(const tenant_namespace&) = delete;

    // The namespace jakirod itself runs in (unit tests, and a vNIC whose tenant shares it).
    static bool own(tenant_namespace& out, std::string& error);
    // `name` under /run/netns (YAML vnics[].netns).
    static bool named(const std::string& name, tenant_namespace& out, std::string& error);
    // The namespace holding the peer of the veth in `port_devargs` ("...,iface=t1"), as the
    // kernel records it for the host-side veth (link_netns.hh), found among the named
    // namespaces and those of running processes by its namespace id. Nothing seen inside a
    // tenant (its interfaces' MACs or ifindexes, which its root sets at will) takes part, so no
    // tenant can pass for another's. False with `error` saying why (not a veth, its peer in
    // jakirod's own namespace or in none jakirod can open).
    static bool veth_peer(const std::string& port_devargs, tenant_namespace& out,
                          std::string& error);

    bool valid() const { return _fd >= 0; }
    const std::string& description() const { return _description; }
    bool same_as(const tenant_namespace& other) const {
        return _dev == other._dev && _ino == other._ino;
    }

    // A listening SOCK_SEQPACKET socket at `address` ("@abstract" or a path) created inside
    // this namespace; -1 with `error` set.
    int listen_inside(const std::string& address, int backlog, std::string& error) const;
    // Whether process `pid` is in this namespace now.
    bool holds_process(pid_t pid) const;

  private:
    int _fd = -1;
    dev_t _dev = 0;
    ino_t _ino = 0;
    std::string _description;

    bool adopt(int fd, std::string description, std::string& error);
};

}  // namespace jakiro::verbs
