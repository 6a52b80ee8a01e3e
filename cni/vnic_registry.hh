#pragma once
// Where a container's vNIC is declared, so that jakirod serves it: the host YAML jakirod runs
// with (host_file_registry) or the cluster in etcd (etcd_registry), chosen by whether that
// host YAML has `control:`.

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "cni/cni_error.hh"
#include "cni/request.hh"
#include "dataplane/config/host_config.hh"

namespace jakiro::cni {

// A vNIC as the plugin declares it: the keys of a host YAML's vnics[] entry (or, in etcd, of a
// vNIC record, with `host` instead of `port`).
struct vnic_entry {
    std::string name;
    std::string vpc;
    std::string mac;
    uint32_t ip = 0;
    uint8_t length = 24;
    std::vector<std::string> security_groups;
    YAML::Node qos;
    // The owner, written beside the entry so that an operator reading the host YAML or etcd
    // knows where it came from: "<network> <container id> <ifname>".
    std::string owner;
};

class vnic_registry {
  public:
    virtual ~vnic_registry() = default;
    // The host's name, the tenant MTU and the VPC's VNI; false with `error` for an unknown VPC.
    virtual bool vpc_vni(const std::string& vpc, uint32_t& vni, cni_error& error) = 0;
    virtual uint32_t tenant_mtu() const = 0;
    virtual std::string host_name() const = 0;
    // Addresses of the VPC that others hold already (other vNICs, peers, other hosts' leases).
    virtual std::set<uint32_t> taken(const std::string& vpc) = 0;
    // Declares the vNIC. `address_taken` is set when the address went to someone else in the
    // meantime (the caller picks another); otherwise false means refused, with why.
    virtual bool add(const vnic_entry& entry, bool& address_taken, cni_error& error) = 0;
    // Withdraws it; one that is not declared is no error.
    virtual bool remove(const std::string& vnic, const std::string& vpc, uint32_t ip,
                        cni_error& error) = 0;
    // Whether the vNIC is declared as `entry` says (CHECK); `error` says what differs.
    virtual bool declared_as(const vnic_entry& entry, std::string& error) = 0;
};

// The VNI of `vpc` in `config` (`where` names it in the error: "in etcd", "of <file>"); false with
// an error that lists the VPCs there are.
bool vni_in(const host_config& config, const std::string& vpc, const std::string& where,
            uint32_t& vni, cni_error& error);
// The addresses `config`'s vNICs hold in `vpc`.
std::set<uint32_t> vnic_addresses_in(const host_config& config, const std::string& vpc);

// Reads the host YAML named by the network configuration and makes the registry it calls for.
std::unique_ptr<vnic_registry> open_registry(const network_config& config, cni_error& error);

// The default control socket of a host: /run/jakiro/<host>.sock.
std::string default_socket(const std::string& host);

}  // namespace jakiro::cni
