#include "secgroup/compiler.hh"

#include <rte_errno.h>

#include <atomic>
#include <cstddef>
#include <cstring>

namespace jakiro::secgroup {

rule_catalog::rule_catalog(const std::vector<group>& groups) {
    for (const auto& g : groups) {
        _first.push_back({_size, _size + static_cast<uint32_t>(g.ingress.size())});
        _size += static_cast<uint32_t>(g.ingress.size() + g.egress.size());
    }
}

rule_catalog::location rule_catalog::locate(uint32_t rule_id) const {
    for (std::size_t g = _first.size(); g-- > 0;) {
        if (rule_id >= _first[g][1]) {
            return {g, direction::egress, rule_id - _first[g][1]};
        }
        if (rule_id >= _first[g][0]) {
            return {g, direction::ingress, rule_id - _first[g][0]};
        }
    }
    return {0, direction::ingress, 0};
}

namespace {

// The remote group is compared by name: its index moves with groups added before it.
bool same_rule(const rule& a, const rule& b) {
    return a.proto == b.proto && a.ports == b.ports && a.remote == b.remote &&
           a.remote6 == b.remote6 && a.remote_group == b.remote_group && a.line == b.line;
}

const std::vector<rule>& rules_of(const group& g, direction dir) {
    return dir == direction::ingress ? g.ingress : g.egress;
}

}  // namespace

std::vector<bool> rule_ids_kept(const std::vector<group>& before, const std::vector<group>& after) {
    const rule_catalog was(before);
    const rule_catalog now(after);
    std::vector<bool> kept(now.size(), false);
    for (std::size_t g = 0; g < after.size(); ++g) {
        for (const auto dir : {direction::ingress, direction::egress}) {
            const auto& rules = rules_of(after[g], dir);
            for (std::size_t r = 0; r < rules.size(); ++r) {
                const uint32_t id = now.id(g, dir, r);
                if (id >= was.size()) {
                    continue;
                }
                const auto at = was.locate(id);
                const group& old_group = before[at.group_index];
                const auto& old_rules = rules_of(old_group, at.dir);
                kept[id] = at.dir == dir && at.rule_index == r &&
                           at.rule_index < old_rules.size() && old_group.name == after[g].name &&
                           old_group.vpc == after[g].vpc &&
                           same_rule(old_rules[at.rule_index], rules[r]);
            }
        }
    }
    return kept;
}

std::vector<flat_rule> expand_rules(const std::vector<group>& groups,
                                    std::span<const std::size_t> vnic_groups, direction dir,
                                    const membership& members, const rule_catalog& catalog) {
    std::vector<flat_rule> out;
    for (const std::size_t g : vnic_groups) {
        const auto& rules = dir == direction::ingress ? groups[g].ingress : groups[g].egress;
        for (std::size_t i = 0; i < rules.size(); ++i) {
            const rule& r = rules[i];
            if (r.remote6 && !r.remote) {
                continue;  // an IPv6 CIDR: nothing of IPv4 (ipv6_rules.hh)
            }
            flat_rule flat{};
            flat.rule_id = catalog.id(g, dir, i);
            switch (r.proto) {
                case protocol::any:
                    flat.any_proto = true;
                    break;
                case protocol::tcp:
                    flat.ip_proto = ip_proto_tcp;
                    flat.ports = r.ports;
                    break;
                case protocol::udp:
                    flat.ip_proto = ip_proto_udp;
                    flat.ports = r.ports;
                    break;
                case protocol::icmp:
                    flat.ip_proto = ip_proto_icmp;
                    break;
                case protocol::rdma:
                    flat.ip_proto = ip_proto_udp;
                    flat.ports = {rocev2_udp_port, rocev2_udp_port};
                    break;
            }
            if (r.remote) {
                flat.remote = *r.remote;
                out.push_back(flat);
                continue;
            }
            if (const auto* ips = members.of(r.remote_group_index)) {
                for (const uint32_t ip : *ips) {
                    flat.remote = {ip, 32};
                    out.push_back(flat);
                }
            }
        }
    }
    return out;
}

namespace {

constexpr unsigned acl_fields = 4;
RTE_ACL_RULE_DEF(acl_rule, acl_fields);

rte_acl_config acl_layout() {
    rte_acl_config config{};
    config.num_categories = 1;
    config.num_fields = acl_fields;
    config.defs[0] = {RTE_ACL_FIELD_TYPE_BITMASK, sizeof(uint8_t), 0, 0,
                      static_cast<uint32_t>(offsetof(acl_key, ip_proto))};
    config.defs[1] = {RTE_ACL_FIELD_TYPE_MASK, sizeof(uint32_t), 1, 1,
                      static_cast<uint32_t>(offsetof(acl_key, remote_ip))};
    config.defs[2] = {RTE_ACL_FIELD_TYPE_RANGE, sizeof(uint16_t), 2, 2,
                      static_cast<uint32_t>(offsetof(acl_key, dst_port))};
    config.defs[3] = {RTE_ACL_FIELD_TYPE_RANGE, sizeof(uint16_t), 3, 2,
                      static_cast<uint32_t>(offsetof(acl_key, src_port))};
    return config;
}

std::string next_context_name() {
    static std::atomic<unsigned> counter{0};
    return "sg_acl_" + std::to_string(counter.fetch_add(1));
}

}  // namespace

std::unique_ptr<acl_table> acl_table::build(std::span<const flat_rule> rules, std::string& error) {
    if (rules.empty()) {
        return std::unique_ptr<acl_table>(new acl_table(nullptr, 0));
    }
    const auto name = next_context_name();
    rte_acl_param param{};
    param.name = name.c_str();
    param.socket_id = SOCKET_ID_ANY;
    param.rule_size = RTE_ACL_RULE_SZ(acl_fields);
    param.max_rule_num = static_cast<uint32_t>(rules.size());
    rte_acl_ctx* ctx = rte_acl_create(&param);
    if (ctx == nullptr) {
        error = std::string("cannot create ACL context: ") + rte_strerror(rte_errno);
        return nullptr;
    }
    std::vector<acl_rule> acl(rules.size());
    for (std::size_t i = 0; i < rules.size(); ++i) {
        const flat_rule& r = rules[i];
        acl_rule& a = acl[i];
        a.data.category_mask = 1;
        // Earlier rules win, so hit counters credit the first rule that allows a packet.
        a.data.priority = RTE_ACL_MAX_PRIORITY -
                          static_cast<int32_t>(std::min<std::size_t>(i, RTE_ACL_MAX_PRIORITY - 1));
        a.data.userdata = r.rule_id + 1;  // 0 is rte_acl's "no match"
        a.field[0].value.u8 = r.any_proto ? 0 : r.ip_proto;
        a.field[0].mask_range.u8 = r.any_proto ? 0 : 0xff;
        a.field[1].value.u32 = r.remote.address;
        a.field[1].mask_range.u32 = r.remote.length;
        a.field[2].value.u16 = r.ports.low;
        a.field[2].mask_range.u16 = r.ports.high;
        a.field[3].value.u16 = 0;
        a.field[3].mask_range.u16 = 0xffff;
    }
    int rc = rte_acl_add_rules(ctx, reinterpret_cast<const rte_acl_rule*>(acl.data()),
                               static_cast<uint32_t>(acl.size()));
    if (rc == 0) {
        const rte_acl_config config = acl_layout();
        rc = rte_acl_build(ctx, &config);
    }
    if (rc != 0) {
        error = std::string("cannot build ACL context: ") + rte_strerror(-rc);
        rte_acl_free(ctx);
        return nullptr;
    }
    return std::unique_ptr<acl_table>(new acl_table(ctx, rules.size()));
}

acl_table::~acl_table() {
    rte_acl_free(_ctx);
}

void acl_table::classify(const acl_key* const* keys, uint32_t* results, unsigned n) const {
    if (_ctx == nullptr) {
        std::memset(results, 0, n * sizeof(*results));
        return;
    }
    rte_acl_classify(_ctx, reinterpret_cast<const uint8_t**>(const_cast<const acl_key**>(keys)),
                     results, n, 1);
}

}  // namespace jakiro::secgroup
