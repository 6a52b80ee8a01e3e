#pragma once
// The hits of each security-group rule as `jakiroctl stats` and /metrics show them. Workers
// count packets under the rule's id (lcore_counters::rule_hits), and ids are places in the
// configuration's list of rules (secgroup::rule_catalog): a policy that adds, removes or changes
// a rule gives the ids after it to other rules. What was counted under an id belongs to the rule
// that had it, so a rule that takes an id starts at zero: the control thread keeps, per id, what
// the workers had counted when its rule took it, and shows the hits above that. The workers'
// counters are never written by anyone else.
//
// Thread-safety: control thread only.

#include <cstdint>
#include <functional>
#include <vector>

#include "secgroup/rule.hh"

namespace jakiro {

class rule_hit_counts {
  public:
    // What the workers have counted under `id` in all.
    using counted_fn = std::function<uint64_t(uint32_t id)>;

    // The hits of the rule that has `id` now, the workers having counted `counted` under it.
    uint64_t hits(uint32_t id, uint64_t counted) const {
        const uint64_t base = id < _base.size() ? _base[id] : 0;
        return counted > base ? counted - base : 0;
    }
    // The policy `after` is in force (every worker has left the snapshot of `before`): each id
    // that names another rule now starts at zero.
    void renumber(const std::vector<secgroup::group>& before,
                  const std::vector<secgroup::group>& after, const counted_fn& counted);

  private:
    std::vector<uint64_t> _base;  // by rule id
};

}  // namespace jakiro
