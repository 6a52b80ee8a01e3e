#pragma once
// The host configuration as loaded from YAML: plain values, validated, no DPDK types.
// Owned by the control side; the datapath only ever sees snapshots built from it.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qos/config.hh"
#include "secgroup/flow_table.hh"
#include "secgroup/rule.hh"

namespace jakiro {

using mac_address = std::array<uint8_t, 6>;

// IPv4 addresses are kept in host byte order on the control side; the datapath snapshot
// converts them to network order once.
struct ipv4_prefix {
    uint32_t address = 0;
    uint8_t length = 32;
};

struct underlay_config {
    std::string port;  // DPDK vdev string, e.g. "net_af_packet0,iface=ul0"
    uint32_t ip = 0;
    uint32_t mtu = 1500;
};

struct vpc_config {
    std::string name;
    uint32_t vni = 0;
};

// The RDMA face of a vNIC.
struct rdma_config {
    // QPs of any transport (RC, UC, UD) the vNIC's tenants may hold at once (ibv_create_qp
    // beyond: EDQUOT). The RCFT has one entry per QP, so this also bounds the vNIC's share
    // of it. YAML `rdma.max_qps`; `max_rc_qps` is its older name, from before UC and UD.
    static constexpr uint32_t max_qps_limit = 1024;  // = ibv_device_attr.max_qp
    uint32_t max_qps = max_qps_limit;
};

struct vnic_config {
    std::string name;
    std::string vpc;
    mac_address mac{};
    ipv4_prefix ip;
    std::string port;
    // The tenant's network namespace (a name under /run/netns), where jakirod serves the
    // vNIC's RDMA face. Empty: the namespace of the port's veth peer (verbs/tenant_namespace).
    std::string netns;
    std::vector<std::string> security_groups;  // none: ingress denied, egress denied
    rdma_config rdma;
    // DHTB (DESIGN.md §6): rate, burst and the rdma/tcp classes; none = not shaped.
    std::optional<qos::vnic_qos> qos;
};

// A VLT entry for an address of a VPC that lives on another host.
struct peer_config {
    std::string vpc;
    uint32_t ip = 0;
    uint32_t host = 0;
    // Inner destination MAC for frames to this address. Jakiro hosts rewrite it on delivery,
    // so it only matters for foreign VTEPs (e.g. a Linux vxlan device).
    std::optional<mac_address> mac;
    // Groups the remote vNIC belongs to: makes it a member for remote-group rules here.
    std::vector<std::string> security_groups;
};

struct conntrack_config {
    uint32_t max_flows = 65536;  // per worker
    secgroup::flow_timeouts timeouts;
};

struct host_config {
    std::string source_file;
    std::string name;
    underlay_config underlay;
    mac_address gateway_mac{0x02, 0x6a, 0x6b, 0x00, 0x00, 0x01};
    std::vector<vpc_config> vpcs;
    std::vector<vnic_config> vnics;
    std::vector<peer_config> peers;
    std::vector<secgroup::group> security_groups;
    conntrack_config conntrack;
    std::optional<qos::uplink_qos> uplink_qos;  // host.qos.uplink_rate: all vNICs together

    const vpc_config* find_vpc(const std::string& name) const;
    // Group names are unique within a VPC (every VPC may have its own "default").
    const secgroup::group* find_group(const std::string& vpc, const std::string& name) const;
    int group_index(const std::string& vpc, const std::string& name) const;
    // Overlay MTU seen by tenants: the underlay MTU less the 50 bytes of outer headers.
    uint32_t tenant_mtu() const { return underlay.mtu - 50; }
};

std::string format_ipv4(uint32_t host_order);
std::string format_mac(const mac_address& mac);
std::optional<uint32_t> parse_ipv4(const std::string& text);
std::optional<ipv4_prefix> parse_ipv4_prefix(const std::string& text);
std::optional<mac_address> parse_mac(const std::string& text);

}  // namespace jakiro
