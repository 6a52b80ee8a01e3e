#pragma once
// ADD, DEL and CHECK: what the plugin does to attach a container's namespace as a vNIC of a
// VPC, to detach it, and to tell whether it is still attached as it was.
//
// ADD, under the host lock: the VPC must exist; an address is leased (a file under data_dir,
// and in etcd mode also a key in etcd); the veth is made into the container and addressed; the
// vNIC is declared (host YAML + apply, or etcd); then, without the lock, it waits until
// jakirod forwards for it. Any failure undoes every step before it: nothing is left behind.
// DEL undoes the same steps, each of them if present, so it is idempotent and works whatever
// state ADD or a restart of jakirod left.

#include <string>

#include "cni/cni_error.hh"
#include "cni/request.hh"

namespace jakiro::cni {

// The vNIC's name (also the host end of its veth): "jc" and 10 hex digits of a hash of the
// network, container and interface, so DEL finds it with nothing else.
std::string vnic_name(const std::string& network, const std::string& container_id,
                      const std::string& ifname);
// The vNIC's MAC: locally administered, a byte of the VNI, then the IPv4 address, so it is
// unique in its VPC by construction.
std::string vnic_mac(uint32_t vni, uint32_t ip);

// Each returns true with the result JSON in `out`, or false with `error` set.
bool add(const request& r, std::string& out, cni_error& error);
bool del(const request& r, cni_error& error);
bool check(const request& r, cni_error& error);

}  // namespace jakiro::cni
