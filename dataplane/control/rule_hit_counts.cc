#include "dataplane/control/rule_hit_counts.hh"

#include "secgroup/compiler.hh"

namespace jakiro {

void rule_hit_counts::renumber(const std::vector<secgroup::group>& before,
                               const std::vector<secgroup::group>& after,
                               const counted_fn& counted) {
    const std::vector<bool> kept = secgroup::rule_ids_kept(before, after);
    if (_base.size() < kept.size()) {
        _base.resize(kept.size(), 0);
    }
    for (uint32_t id = 0; id < kept.size(); ++id) {
        if (!kept[id]) {
            _base[id] = counted(id);
        }
    }
}

}  // namespace jakiro
