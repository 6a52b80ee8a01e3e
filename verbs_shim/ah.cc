#include "verbs_shim/ah.hh"

#include <netinet/ip.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "verbs_shim/context.hh"
#include "verbs_shim/debug.hh"
#include "verbs_shim/pd.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

namespace {

constexpr uint8_t ipv4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool ipv4_mapped(const uint8_t* gid) {
    return std::memcmp(gid, ipv4_mapped_prefix, sizeof(ipv4_mapped_prefix)) == 0;
}

// A global (or unique-local) unicast IPv6 address: what a RoCE v2 peer's IPv6 GID can be.
bool routable_ipv6(const uint8_t* gid) {
    return gid[0] != 0 && gid[0] != 0xff && !(gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80);
}

// The vNIC's IPv6 address (its GID at index 1), or nullptr when it has none.
const uint8_t* own_ipv6(ibv_context* context) {
    static constexpr uint8_t none[16] = {};
    const shim_context* c = to_context(context);
    return c != nullptr && std::memcmp(c->hello.ipv6, none, sizeof(none)) != 0 ? c->hello.ipv6
                                                                               : nullptr;
}

void map_ipv4(uint32_t ip_be, uint8_t* gid) {
    std::memcpy(gid, ipv4_mapped_prefix, sizeof(ipv4_mapped_prefix));
    std::memcpy(gid + 12, &ip_be, 4);
}

}  // namespace

shim_ah* to_ah(ibv_ah* ah) {
    auto* a = reinterpret_cast<shim_ah*>(ah);
    return a != nullptr && a->magic == ah_magic ? a : nullptr;
}

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    shim_pd* p = to_pd(pd);
    if (p == nullptr || attr == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    // RoCE needs the GRH: the destination is a GID, IPv4-mapped from GID index 0 or IPv6 from
    // GID index 1 (which the port has when its vNIC has an IPv6 address).
    const bool ipv6 = attr->is_global != 0 && !ipv4_mapped(attr->grh.dgid.raw);
    if (attr->is_global == 0 || attr->port_num != 1 ||
        attr->grh.sgid_index != (ipv6 ? proto::gid_index_ipv6 : proto::gid_index_ipv4)) {
        debug(
            "ibv_create_ah: a RoCE v2 address needs is_global, port 1, and an IPv4-mapped dgid "
            "with sgid_index 0 or an IPv6 one with sgid_index 1");
        errno = EINVAL;
        return nullptr;
    }
    if (ipv6) {
        if (!routable_ipv6(attr->grh.dgid.raw) || own_ipv6(pd->context) == nullptr) {
            debug("ibv_create_ah: the dgid is no global IPv6 address, or the port has no IPv6 GID");
            errno = EINVAL;
            return nullptr;
        }
    }
    auto* a = new (std::nothrow) shim_ah{};
    if (a == nullptr) {
        errno = ENOMEM;
        return nullptr;
    }
    a->magic = ah_magic;
    a->ah.context = pd->context;
    a->ah.pd = pd;
    if (ipv6) {
        std::memcpy(a->remote_ip6, attr->grh.dgid.raw, sizeof(a->remote_ip6));
    } else {
        std::memcpy(&a->remote_ip_be, attr->grh.dgid.raw + 12, 4);
    }
    a->attr = *attr;
    return &a->ah;
}

int destroy_ah(ibv_ah* ah) {
    shim_ah* a = to_ah(ah);
    if (a == nullptr) {
        return EINVAL;
    }
    a->magic = 0;
    delete a;
    return 0;
}

int init_ah_from_wc(ibv_context* context, uint8_t port_num, const ibv_wc* wc, const ibv_grh* grh,
                    ibv_ah_attr* attr) {
    shim_context* c = to_context(context);
    if (c == nullptr || wc == nullptr || attr == nullptr || port_num != 1) {
        errno = EINVAL;
        return -1;
    }
    std::memset(attr, 0, sizeof(*attr));
    attr->dlid = wc->slid;
    attr->sl = wc->sl;
    attr->src_path_bits = wc->dlid_path_bits;
    attr->port_num = port_num;
    if ((wc->wc_flags & IBV_WC_GRH) == 0) {
        return 0;  // no GRH: a local-route address, as libibverbs builds it
    }
    if (grh == nullptr) {
        errno = EINVAL;
        return -1;
    }
    // RoCE v2 over IPv6: the GRH area is the IPv6 header.
    const auto* area = reinterpret_cast<const uint8_t*>(grh);
    if ((area[0] >> 4) == 6) {
        const uint8_t* own = own_ipv6(context);
        if (own == nullptr || std::memcmp(area + 24, own, 16) != 0) {
            errno = ENOENT;  // not addressed to our IPv6 GID
            return -1;
        }
        attr->is_global = 1;
        std::memcpy(attr->grh.dgid.raw, area + 8, 16);
        attr->grh.sgid_index = proto::gid_index_ipv6;
        attr->grh.hop_limit = area[7];
        attr->grh.traffic_class = static_cast<uint8_t>((area[0] << 4) | (area[1] >> 4));
        attr->grh.flow_label = ((area[1] & 0x0Fu) << 16) | (uint32_t{area[2]} << 8) | area[3];
        return 0;
    }
    // RoCE v2 over IPv4: the IPv4 header sits in the GRH's last 20 bytes.
    iphdr ip;
    std::memcpy(&ip, reinterpret_cast<const uint8_t*>(grh) + 20, sizeof(ip));
    if (ip.version != 4 || ip.ihl != 5) {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    uint32_t own_ip_be = 0;
    std::memcpy(&own_ip_be, c->hello.ipv4, 4);
    if (ip.daddr != own_ip_be) {
        errno = ENOENT;  // not addressed to our only GID
        return -1;
    }
    attr->is_global = 1;
    map_ipv4(ip.saddr, attr->grh.dgid.raw);
    attr->grh.sgid_index = 0;
    attr->grh.hop_limit = ip.ttl;
    attr->grh.traffic_class = ip.tos;
    return 0;
}

ibv_ah* create_ah_from_wc(ibv_pd* pd, const ibv_wc* wc, const ibv_grh* grh, uint8_t port_num) {
    if (to_pd(pd) == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    ibv_ah_attr attr;
    if (init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) {
        return nullptr;
    }
    return create_ah(pd, &attr);
}

void write_ud_destination(verbs_proto::send_wqe& slot, const shim_ah& ah, uint32_t remote_qpn,
                          uint32_t remote_qkey) {
    slot.ud_remote_ip = ah.remote_ip_be;
    std::memcpy(slot.ud_remote_ip6, ah.remote_ip6, sizeof(slot.ud_remote_ip6));
    slot.ud_remote_qpn = remote_qpn & 0xFFFFFF;
    slot.ud_remote_qkey = remote_qkey;
}

}  // namespace jakiro::verbs_shim
