#pragma once
// Address handles (UD): where a datagram goes. On RoCE v2 an address handle is the
// destination's GID: IPv4-mapped (from GID index 0, the vNIC's IPv4 address) or IPv6 (from GID
// index 1, its IPv6 address); nothing else of ibv_ah_attr matters on an overlay (no LIDs, no
// service levels, the vNIC resolves the next hop per packet). An AH lives in the shim only:
// ibv_post_send copies its address into the WQE, and jakirod checks that address against the
// vNIC's security groups for every datagram (an AH is no permission).
//
// A received datagram's GRH area holds, as on real RoCE v2 NICs, the IPv6 header, or over IPv4
// 20 unused bytes and then the IPv4 header (ibv_init_ah_from_wc reads the source address from
// there).

#include <infiniband/verbs.h>

#include <cstdint>

#include "verbs_abi/rings.hh"

namespace jakiro::verbs_shim {

constexpr uint32_t ah_magic = 0x4a4b'4148;  // "HAKJ"

struct shim_ah {
    ibv_ah ah;  // first member
    uint32_t magic;
    uint32_t remote_ip_be;   // 0 for an IPv6 destination
    uint8_t remote_ip6[16];  // an IPv6 destination; all zero for an IPv4 one
    ibv_ah_attr attr;        // as created (for nothing but debugging: verbs has no ibv_query_ah)
};

shim_ah* to_ah(ibv_ah* ah);

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr);
int destroy_ah(ibv_ah* ah);
// -1 with errno on failure, as libibverbs.
int init_ah_from_wc(ibv_context* context, uint8_t port_num, const ibv_wc* wc, const ibv_grh* grh,
                    ibv_ah_attr* attr);
ibv_ah* create_ah_from_wc(ibv_pd* pd, const ibv_wc* wc, const ibv_grh* grh, uint8_t port_num);

// ibv_post_send on a UD QP: the destination of `wr` into its WQE.
void write_ud_destination(verbs_proto::send_wqe& slot, const shim_ah& ah, uint32_t remote_qpn,
                          uint32_t remote_qkey);

}  // namespace jakiro::verbs_shim
