#include "qos/config.hh"

namespace jakiro::qos {

namespace {

std::string check_rate_and_burst(uint64_t rate_bps, uint64_t burst_bytes) {
    if (rate_bps == 0 || rate_bps > max_rate_bps) {
        return "rate: " + std::to_string(rate_bps) + " bit/s is not in 1..2000000000000";
    }
    if (burst_bytes == 0 || burst_bytes > max_burst_bytes) {
        return "burst: " + std::to_string(burst_bytes) + " bytes is not in 1.." +
               std::to_string(max_burst_bytes);
    }
    return {};
}

}  // namespace

std::string validate(const vnic_qos& q) {
    if (auto e = check_rate_and_burst(q.rate_bps, q.burst_bytes); !e.empty()) {
        return e;
    }
    uint64_t min_sum = 0;
    for (traffic_class c : all_classes) {
        const class_qos& k = q.classes[index_of(c)];
        const std::string where = std::string("classes.") + class_name(c) + ".";
        if (k.weight == 0 || k.weight > max_weight) {
            return where + "weight: " + std::to_string(k.weight) + " is not in 1..1000";
        }
        if (k.min_bps > max_rate_bps || k.max_bps > max_rate_bps) {
            return where + "min/max: above 2000000000000 bit/s";
        }
        if (k.max_bps != 0 && k.max_bps < k.min_bps) {
            return where + "max: " + std::to_string(k.max_bps) + " bit/s is below its min " +
                   std::to_string(k.min_bps);
        }
        min_sum += k.min_bps;
    }
    if (min_sum > q.rate_bps) {
        return "classes: the mins add up to " + std::to_string(min_sum) +
               " bit/s, more than the vNIC rate " + std::to_string(q.rate_bps);
    }
    return {};
}

std::string validate(const uplink_qos& q) {
    return check_rate_and_burst(q.rate_bps, q.burst_bytes);
}

}  // namespace jakiro::qos
