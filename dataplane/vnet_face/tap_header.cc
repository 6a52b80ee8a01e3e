#include "dataplane/vnet_face/tap_header.hh"

namespace jakiro::vnet_face {

tap_header tap_header_for(const rte_mbuf* m) {
    tap_header h{};
    constexpr uint64_t vxlan_tso = RTE_MBUF_F_TX_TUNNEL_VXLAN | RTE_MBUF_F_TX_TCP_SEG;
    if ((m->ol_flags & vxlan_tso) != vxlan_tso) {
        h.base = from_mbuf(m);
        return h;
    }
    const uint16_t outer = static_cast<uint16_t>(m->outer_l2_len + m->outer_l3_len);
    const uint16_t inner_ip = static_cast<uint16_t>(outer + m->l2_len);
    const uint16_t inner_tcp = static_cast<uint16_t>(inner_ip + m->l3_len);
    h.base.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    h.base.gso_type = VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4 | tcp_gso_type(m);
    h.base.gso_size = m->tso_segsz;
    h.base.hdr_len = static_cast<uint16_t>(inner_tcp + m->l4_len);
    h.base.csum_start = inner_tcp;
    h.base.csum_offset = tcp_csum_offset;
    h.outer_th_offset = outer;
    h.inner_nh_offset = inner_ip;
    return h;
}

}  // namespace jakiro::vnet_face
