#include "rnic/verbs/device_model.hh"

#include <cstdio>
#include <cstring>

#include "rnic/rdmacm/path_timing.hh"

namespace jakiro::verbs {

namespace {

// Bytes a RoCEv2 packet adds to its payload inside the tenant's Ethernet MTU: IPv4 20, UDP 8,
// BTH 12, the largest extension header that travels with payload (RETH 16 + ImmDt 4) and the
// ICRC 4. A path MTU plus this must fit the tenant MTU or the engine's packets would not.
constexpr uint32_t roce_overhead = 20 + 8 + 12 + 16 + 4 + 4;

// The largest path MTU the engine segments to: the largest IB MTU there is.
constexpr uint32_t max_path_mtu = 4096;

// jakirod's version, reported as the device's firmware version.
constexpr const char* firmware_version = "jakiro 0.1.0";

// Not Mellanox (0x02c9) or any vendor perftest special-cases: 0xFFFFFF is "no IEEE OUI", and
// the part id spells "JK". Tools then take their generic, spec-only paths.
constexpr uint32_t vendor_id = 0xffffff;
constexpr uint32_t vendor_part_id = 0x4a4b;

}  // namespace

uint32_t path_mtu_for(uint32_t tenant_mtu) {
    for (uint32_t mtu = max_path_mtu; mtu >= 256; mtu /= 2) {
        if (mtu + roce_overhead <= tenant_mtu) {
            return mtu;
        }
    }
    return 0;
}

uint64_t node_guid_from_mac(const std::array<uint8_t, 6>& mac) {
    const uint8_t eui[8] = {
        static_cast<uint8_t>(mac[0] ^ 0x02), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
    uint64_t guid = 0;
    for (uint8_t b : eui) {
        guid = guid << 8 | b;
    }
    return guid;
}

std::array<uint8_t, 16> ipv4_mapped_gid(uint32_t ip) {
    std::array<uint8_t, 16> gid{};
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12] = static_cast<uint8_t>(ip >> 24);
    gid[13] = static_cast<uint8_t>(ip >> 16);
    gid[14] = static_cast<uint8_t>(ip >> 8);
    gid[15] = static_cast<uint8_t>(ip);
    return gid;
}

// Modest values the engine is built to honour (verbs_shim/README.md, "Limits"): a vNIC is a
// slice of one software RNIC, so these are per vNIC, not per host.
verbs_proto::limits engine_limits() {
    verbs_proto::limits l{};
    l.max_mr_size = uint64_t{1} << 30;  // 1 GiB: one memfd mapping per MR in jakirod
    l.page_size_cap = ~uint64_t{4095};  // any multiple of 4 KiB pages
    l.max_qp = 1024;                    // the default per-vNIC RC QP quota (docs/configuration.md)
    l.max_qp_wr = 4096;                 // ring slots per SQ/RQ
    l.max_sge = 16;
    l.max_sge_rd = 16;
    l.max_cq = 2048;  // two per QP
    l.max_cqe = 65536;
    l.max_mr = 4096;
    l.max_pd = 1024;
    l.max_qp_rd_atom = 16;  // outstanding RDMA READs per QP, both directions
    l.max_qp_init_rd_atom = 16;
    l.max_res_rd_atom = 16 * 1024;  // max_qp_rd_atom for every QP
    l.max_srq = 1024;               // as many as QPs (srq_ring.hh: one memfd each)
    l.max_srq_wr = 4096;            // ring slots per SRQ, as per SQ/RQ
    l.max_srq_sge = 16;             // SGEs per WQE slot
    l.max_ah = 65536;  // AHs live in the shim only (ah.hh): a bound for programs that size by it
    l.max_msg_size = 1u << 30;                        // a message may span one whole MR
    l.max_inline_data = verbs_proto::wqe_max_inline;  // copied into the SQ slot (rings.hh)
    l.atomics = 1;  // IBV_ATOMIC_HCA: atomic with respect to every QP of the vNIC (one engine)
    return l;
}

void fill_hello(verbs_proto::hello_reply& reply, const vnic_identity& vnic,
                const std::string& host_name, uint32_t tenant_mtu) {
    verbs_proto::put_name(reply.vnic_name, vnic.name.c_str());
    verbs_proto::put_name(reply.host_name, host_name.c_str());
    for (std::size_t i = 0; i < 6; ++i) {
        reply.mac[i] = vnic.mac[i];
    }
    const auto gid = ipv4_mapped_gid(vnic.ip);
    for (std::size_t i = 0; i < 4; ++i) {
        reply.ipv4[i] = gid[12 + i];
    }
    // The port is up whenever jakirod serves the vNIC; link state of the tenant veth does
    // not matter to the RDMA face, which never uses it.
    reply.port_state = static_cast<uint8_t>(verbs_proto::port_state::active);
    reply.tenant_mtu = tenant_mtu;
    reply.path_mtu = path_mtu_for(tenant_mtu);
    reply.node_guid = node_guid_from_mac(vnic.mac);
    reply.lim = engine_limits();
    std::memcpy(reply.ipv6, vnic.ip6.data(), sizeof(reply.ipv6));
}

void fill_query(verbs_proto::query_reply& reply, const vnic_identity& vnic, uint32_t tenant_mtu) {
    auto& d = reply.device;
    verbs_proto::put_name(d.fw_ver, firmware_version);
    d.node_guid = node_guid_from_mac(vnic.mac);
    d.sys_image_guid = d.node_guid;
    d.vendor_id = vendor_id;
    d.vendor_part_id = vendor_part_id;
    d.hw_ver = 0;
    d.caps = verbs_proto::cap_rc_rnr_nak_gen | verbs_proto::cap_sys_image_guid |
             verbs_proto::cap_completion_timestamps | verbs_proto::cap_memory_windows;
    d.max_mw = engine_max_mw;
    d.phys_port_cnt = 1;
    // Requesters derive their retransmit timers from this, rdma_cm's agent included.
    d.local_ca_ack_delay = rdmacm::ca_ack_delay;
    d.max_pkeys = 1;
    d.lim = engine_limits();

    auto& p = reply.port;
    p.state = static_cast<uint8_t>(verbs_proto::port_state::active);
    p.phys_state = 5;  // LinkUp
    p.link_layer = 2;  // Ethernet
    p.max_vl_num = 1;
    p.max_mtu = max_path_mtu;
    p.active_mtu = path_mtu_for(tenant_mtu);
    p.max_msg_sz = d.lim.max_msg_size;
    p.caps = verbs_proto::cap_ip_based_gids;
    // Index 0: RoCE v2, the vNIC's IPv4 address; index 1 its IPv6 address, when it has one
    // (verbs_proto::gid_index_ipv6). There is no RoCE v1.
    const bool has_ipv6 = !rnic::is_unspecified(vnic.ip6);
    p.gid_tbl_len = has_ipv6 ? 2 : 1;
    p.pkey_tbl_len = 1;
    p.active_width = 1;   // 1X
    p.active_speed = 32;  // 25 Gb/s: nominal, the vNIC is paced by the host, not a line rate
    p.gid0_type = 2;      // RoCE v2
    const auto gid = ipv4_mapped_gid(vnic.ip);
    for (std::size_t i = 0; i < gid.size(); ++i) {
        p.gid0[i] = gid[i];
    }
    if (has_ipv6) {
        std::memcpy(p.gid1, vnic.ip6.data(), sizeof(p.gid1));
    }
}

std::string mac_text(const std::array<uint8_t, 6>& mac) {
    char text[18];
    std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2],
                  mac[3], mac[4], mac[5]);
    return text;
}

}  // namespace jakiro::verbs
