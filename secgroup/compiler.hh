#pragma once
// Compiles the security groups of one vNIC and direction into an rte_acl context.
//
// Expansion (plain C++): every rule of every group the vNIC carries becomes one or more flat
// rules; a remote-group rule becomes one /32 per member. Each flat rule keeps the id of the
// rule it came from, so a match can be counted against the rule the operator wrote.
// The ACL context is built on the control thread and only read afterwards (classify is safe
// from any number of workers).

#include <rte_acl.h>
#include <rte_byteorder.h>

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "secgroup/rule.hh"

namespace jakiro::secgroup {

struct flat_rule {
    uint32_t rule_id;
    bool any_proto;
    uint8_t ip_proto;
    cidr remote;
    port_range ports;  // destination port
};

// Ids of rules: group g's ingress rules, then its egress rules, for g in order.
class rule_catalog {
  public:
    explicit rule_catalog(const std::vector<group>& groups);
    uint32_t id(std::size_t group_index, direction dir, std::size_t rule_index) const {
        return _first[group_index][static_cast<int>(dir)] + static_cast<uint32_t>(rule_index);
    }
    uint32_t size() const { return _size; }
    // The group, direction and rule behind an id.
    struct location {
        std::size_t group_index;
        direction dir;
        std::size_t rule_index;
    };
    location locate(uint32_t rule_id) const;

  private:
    std::vector<std::array<uint32_t, 2>> _first;
    uint32_t _size = 0;
};

// For each rule id of `after`'s catalog: whether `before`'s catalog gave that id to the same
// rule (the same place in a group of the same name and VPC, the same match, the same line). An
// id given to another rule (rules added, removed or changed before it, or at it) is not kept:
// what was counted under it belongs to the rule that had it, and the new one starts at zero.
std::vector<bool> rule_ids_kept(const std::vector<group>& before, const std::vector<group>& after);

std::vector<flat_rule> expand_rules(const std::vector<group>& groups,
                                    std::span<const std::size_t> vnic_groups, direction dir,
                                    const membership& members, const rule_catalog& catalog);

// The packet fields the ACL reads, in network byte order as rte_acl expects. The first field
// must be one byte and fields are grouped in 4-byte words (rte_acl's input_index).
struct acl_key {
    uint8_t ip_proto;
    uint8_t pad[3];
    rte_be32_t remote_ip;
    rte_be16_t dst_port;
    rte_be16_t src_port;  // unused by rules; completes the 4-byte word
};
static_assert(sizeof(acl_key) == 12);

class acl_table {
  public:
    static constexpr uint32_t no_match = 0;
    static constexpr unsigned max_bulk = 64;

    // Builds the context; an empty rule list makes a table that matches nothing.
    static std::unique_ptr<acl_table> build(std::span<const flat_rule> rules, std::string& error);
    ~acl_table();
    acl_table(const acl_table&) = delete;
    acl_table& operator=(const acl_table&) = delete;

    // For each key, the matching rule's id + 1, or no_match. n <= max_bulk.
    void classify(const acl_key* const* keys, uint32_t* results, unsigned n) const;
    std::size_t rule_count() const { return _rule_count; }

  private:
    acl_table(rte_acl_ctx* ctx, std::size_t rule_count) : _ctx(ctx), _rule_count(rule_count) {}
    rte_acl_ctx* _ctx;
    std::size_t _rule_count;
};

}  // namespace jakiro::secgroup
