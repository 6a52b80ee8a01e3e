#include "dataplane/control/rdma_endpoints.hh"

namespace jakiro {

verbs::vnic_quota quota_of(const rdma_config& rdma) {
    verbs::vnic_quota q;
    q.max_qps = rdma.max_qps;
    q.max_pds = rdma.max_pds;
    q.max_mrs = rdma.max_mrs;
    q.max_mws = rdma.max_mws;
    q.max_mr_bytes = rdma.max_mr_bytes;
    q.max_cqs = rdma.max_cqs;
    q.max_cqes = rdma.max_cqes;
    q.max_srqs = rdma.max_srqs;
    q.max_wqes = rdma.max_wqes;
    q.max_contexts = rdma.max_contexts;
    q.max_cm_ids = rdma.max_cm_ids;
    q.max_cm_backlog = rdma.max_cm_backlog;
    q.max_cm_held_reqs = rdma.max_cm_held_reqs;
    q.max_qp1_queue = rdma.max_qp1_queue;
    return q;
}

verbs::endpoint_config endpoint_of(const vnic_config& vnic, uint16_t slot, uint8_t worker) {
    verbs::endpoint_config e;
    e.identity = {vnic.name, vnic.mac, vnic.ip.address, slot, quota_of(vnic.rdma), worker};
    if (vnic.ip6) {
        e.identity.ip6 = vnic.ip6->address;  // GID 1
    }
    e.netns = vnic.netns;
    e.port = vnic.port;
    return e;
}

std::vector<verbs::endpoint_config> endpoints_of(const host_config& config,
                                                 const std::vector<uint16_t>& slots) {
    std::vector<verbs::endpoint_config> out;
    for (std::size_t i = 0; i < config.vnics.size() && i < slots.size(); ++i) {
        out.push_back(endpoint_of(config.vnics[i], slots[i]));
    }
    return out;
}

verbs::channel_config make_channel_config(const host_config& config) {
    verbs::channel_config out;
    out.host_name = config.name;
    out.tenant_mtu = config.tenant_mtu();
    std::vector<uint16_t> slots;
    for (std::size_t i = 0; i < config.vnics.size(); ++i) {
        slots.push_back(static_cast<uint16_t>(i));
    }
    out.vnics = endpoints_of(config, slots);
    return out;
}

}  // namespace jakiro
