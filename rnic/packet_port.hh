#pragma once
// Where the RoCE engine's packets go and how they are framed. The engine writes whole inner
// frames (Ethernet, IPv4, UDP 4791, BTH and the rest, ICRC); the port decides what happens
// next: jakirod's datapath looks the destination up in the VLT and tunnels it or hands it to
// a local vNIC; tests connect two engines back to back, losing and reordering on purpose.
// Frames to IPv6 peers (RoCE v2 over IPv6) have calls of their own, so the IPv4 path keeps its
// 32-bit keys.

#include <array>
#include <cstdint>

#include "qos/ingress_meter.hh"
#include "rnic/wire/ip_address.hh"

namespace jakiro::rnic {

constexpr uint32_t frame_l2_l4_bytes = 14 + 20 + 8;       // Ethernet, IPv4 (no options), UDP
constexpr uint32_t frame_l2_l4_bytes_ipv6 = 14 + 40 + 8;  // Ethernet, IPv6, UDP

constexpr uint32_t frame_l2_l4_bytes_for(bool ipv6) {
    return ipv6 ? frame_l2_l4_bytes_ipv6 : frame_l2_l4_bytes;
}

class packet_port {
  public:
    virtual ~packet_port() = default;
    // A buffer for one frame of `len` bytes, or nullptr when none is free (the engine tries
    // again on its next poll; nothing is lost).
    virtual uint8_t* begin_frame(uint32_t len) = 0;
    // Sends the frame begun last, from local vNIC `vnic` to inner IPv4 `dst_ip_be`.
    virtual void end_frame(uint16_t vnic, uint32_t dst_ip_be, uint32_t len) = 0;
    // The slot of the vNIC on this host that `dst_ip_be` is in `vnic`'s VPC, or no_local_vnic
    // (remote, or unknown): lets the engine move data memory to memory between local QPs.
    static constexpr uint16_t no_local_vnic = 0xFFFF;
    virtual uint16_t local_vnic(uint16_t vnic, uint32_t dst_ip_be) const {
        (void)vnic;
        (void)dst_ip_be;
        return no_local_vnic;
    }
    // QoS (the rdma class is paced, not dropped): may vNIC `vnic` send a frame of `frame_len`
    // bytes (or a memory-to-memory message of that many) now? False: try again next poll.
    virtual bool admit(uint16_t vnic, uint32_t frame_len) {
        (void)vnic;
        (void)frame_len;
        return true;
    }
    // DHTB ingress for a message moved memory to memory: the ingress meter of receiving vNIC
    // `vnic`, or nullptr when it is not metered (not shaped, or no QoS).
    virtual qos::ingress_meter* receiving_meter(uint16_t vnic) {
        (void)vnic;
        return nullptr;
    }
    // UD (no connection was admitted): may vNIC `vnic` send a datagram to `remote_ip_be`
    // (`outbound`) or receive one from it? The port counts what it refuses.
    virtual bool permits_datagram(uint16_t vnic, uint32_t remote_ip_be, bool outbound) {
        (void)vnic;
        (void)remote_ip_be;
        (void)outbound;
        return true;
    }
    // RC/UC after a policy change: may vNIC `vnic` still be connected to `remote_ip_be` (the
    // admission ibv_modify_qp ran, under the tables the port routes with)?
    virtual bool admits_connection(uint16_t vnic, uint32_t remote_ip_be) {
        (void)vnic;
        (void)remote_ip_be;
        return true;
    }
    // The same four for an IPv6 peer. A port that carries no IPv6 (a test's, a benchmark's)
    // keeps the defaults: it sends no frame (the begun one is abandoned, as when the wire is
    // lost), finds no local vNIC and admits nothing.
    virtual void end_frame_ipv6(uint16_t vnic, const ipv6_address& dst, uint32_t len) {
        (void)vnic;
        (void)dst;
        (void)len;
    }
    virtual uint16_t local_vnic_ipv6(uint16_t vnic, const ipv6_address& dst) const {
        (void)vnic;
        (void)dst;
        return no_local_vnic;
    }
    virtual bool permits_datagram_ipv6(uint16_t vnic, const ipv6_address& remote, bool outbound) {
        (void)vnic;
        (void)remote;
        (void)outbound;
        return false;
    }
    virtual bool admits_connection_ipv6(uint16_t vnic, const ipv6_address& remote) {
        (void)vnic;
        (void)remote;
        return false;
    }
    // Counts a message the engine moved memory to memory for `vnic` (traffic accounting).
    virtual void count_local(uint16_t from_vnic, uint16_t to_vnic, uint64_t bytes) {
        (void)from_vnic;
        (void)to_vnic;
        (void)bytes;
    }
};

// Writes Ethernet (destination left zero: the datapath fills it per route), IPv4 (DF,
// ECN-capable, TTL 64) and UDP (checksum 0, as RoCEv2 allows) for a RoCE packet of
// `roce_len` bytes (BTH through ICRC).
void write_frame_headers(uint8_t* frame, const std::array<uint8_t, 6>& src_mac, uint32_t src_ip_be,
                         uint32_t dst_ip_be, uint16_t udp_src_port, uint8_t traffic_class,
                         uint32_t roce_len);

// The same for RoCE v2 over IPv6: Ethernet, IPv6 (next header UDP, the traffic class with
// ECT(0), `flow_label`, `hop_limit`; 0 means 64) and UDP (checksum 0: the ICRC covers the
// packet, and RoCE v2 NICs send UDP over IPv6 without one too, as RFC 6935 lets tunnels do).
void write_frame_headers_ipv6(uint8_t* frame, const std::array<uint8_t, 6>& src_mac,
                              const ipv6_address& src, const ipv6_address& dst,
                              uint16_t udp_src_port, uint8_t traffic_class, uint32_t flow_label,
                              uint8_t hop_limit, uint32_t roce_len);

// Computes and stores the ICRC of a frame written by write_frame_headers or
// write_frame_headers_ipv6 whose RoCE part (ICRC included) is `roce_len` bytes.
void seal_icrc(uint8_t* frame, uint32_t roce_len);

}  // namespace jakiro::rnic
