#include "dataplane/control/vnic_limits.hh"

#include <algorithm>

namespace jakiro {

uint32_t flow_allowance(const vnic_limits& limits, uint32_t table_capacity,
                        uint32_t vnics_on_worker) {
    if (limits.max_flows) {
        return *limits.max_flows;
    }
    return table_capacity / std::max<uint32_t>(vnics_on_worker, 1);
}

uint32_t packet_buffer_allowance(const vnic_limits& limits, uint32_t pool_buffers,
                                 uint32_t vnics_on_host) {
    if (limits.max_packet_buffers) {
        return *limits.max_packet_buffers;
    }
    return std::max(pool_buffers / (vnics_on_host + 1), min_default_packet_buffers);
}

uint32_t packet_rate_allowance(const vnic_limits& limits) {
    return limits.max_packet_rate.value_or(vnic_limits::default_max_packet_rate);
}

}  // namespace jakiro
