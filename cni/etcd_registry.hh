#pragma once
// A host with `control:` in its YAML: the container's vNIC is a vNIC record in etcd
// (/jakiro/v1/vnics/<vnic>, naming this host), which every host's jakirod follows. The address
// is held cluster-wide by a second key, /jakiro-cni/v1/addresses/<vpc>/<ip>, created in the
// same transaction only if absent: two hosts' plugins can never give one address of a VPC to
// two containers.

#include <memory>
#include <string>

#include "cni/vnic_registry.hh"
#include "dataplane/config/host_config.hh"

namespace jakiro::cni {

inline constexpr const char* address_key_root = "/jakiro-cni/v1/addresses/";

std::unique_ptr<vnic_registry> make_etcd_registry(host_config host, std::string& error);

}  // namespace jakiro::cni
