#include "dataplane/shaping/ingress_policer.hh"

namespace jakiro {

void ingress_policer::sync(const datapath_tables& tables, uint8_t worker, uint64_t now_ns) {
    if (&tables == _seen) {
        return;
    }
    _seen = &tables;
    for (uint16_t slot = 0; slot < max_vnics; ++slot) {
        const bool shaped = slot < tables.qos.size() && tables.qos[slot].has_value() &&
                            slot < tables.vnics.size() && tables.vnics[slot].worker == worker;
        if (!shaped) {
            _meters[slot].reset();
        } else if (_meters[slot] == nullptr) {
            _meters[slot] = std::make_unique<qos::ingress_meter>(*tables.qos[slot], now_ns);
        } else {
            _meters[slot]->configure(*tables.qos[slot], now_ns);  // debt and counters kept
        }
        if (shaped && _carried[slot]) {
            _meters[slot]->resume(*_carried[slot], now_ns);
        }
    }
    _carried = {};
}

}  // namespace jakiro
