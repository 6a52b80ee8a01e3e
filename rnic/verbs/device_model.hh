#pragma once
// What a vNIC's RDMA device looks like to a verbs program: identity, engine limits, port
// attributes and the path MTU. Pure functions of the configuration, so the channel server
// answers from them and the unit tests check them without sockets. Control side only.

#include <array>
#include <cstdint>
#include <string>

#include "rnic/verbs/quota.hh"
#include "rnic/wire/ip_address.hh"
#include "verbs_abi/protocol.hh"
#include "verbs_abi/rings.hh"

namespace jakiro::verbs {

// The vNIC as the RDMA face needs it (a copy: the channel server must not share the
// control thread's mutable host_config).
struct vnic_identity {
    std::string name;
    std::array<uint8_t, 6> mac{};
    uint32_t ip = 0;     // host byte order, like host_config
    uint16_t slot = 0;   // the vNIC's datapath slot (its index in the startup configuration)
    vnic_quota quota;    // YAML rdma.*, what its vnic_resources starts with (it holds the live one)
    uint8_t engine = 0;  // which of the host's RoCE engines runs its QPs: its worker's
    rnic::ipv6_address ip6{};  // its IPv6 address (GID index 1), network order; zero: none
};

// Largest IB MTU (256, 512, 1024, 2048, 4096) whose RoCEv2 packet fits the tenant MTU:
// 1024 for a 1500 underlay (tenant 1450), 4096 for 9000 (tenant 8950). 0 if none fits.
uint32_t path_mtu_for(uint32_t tenant_mtu);

// Modified EUI-64 of the MAC (ff:fe in the middle, universal/local bit flipped), the usual
// node GUID of a RoCE device.
uint64_t node_guid_from_mac(const std::array<uint8_t, 6>& mac);

// ::ffff:a.b.c.d, the RoCE v2 GID of an IPv4 address (host byte order).
std::array<uint8_t, 16> ipv4_mapped_gid(uint32_t ip);

// The limits of the software RoCE engine (documented in verbs_shim/README.md). What HELLO and
// QUERY advertise is these, lowered to the vNIC's live quota (requests.cc, clamp_to_quota).
verbs_proto::limits engine_limits();

void fill_hello(verbs_proto::hello_reply& reply, const vnic_identity& vnic,
                const std::string& host_name, uint32_t tenant_mtu);
// Memory windows per vNIC (device_attrs.max_mw): keys of the MR table, which holds max_mr
// keys for MRs and windows together.
constexpr uint32_t engine_max_mw = 1024;
void fill_query(verbs_proto::query_reply& reply, const vnic_identity& vnic, uint32_t tenant_mtu);

// "aa:bb:cc:dd:ee:ff": the socket file name of a vNIC (what the shim derives from eth0).
std::string mac_text(const std::array<uint8_t, 6>& mac);

}  // namespace jakiro::verbs
