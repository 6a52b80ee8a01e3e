#include "dataplane/control/rdma_memory_report.hh"

#include "rnic/verbs/channel_server.hh"

namespace jakiro {

std::optional<verbs::memory_report> rdma_memory_of(const daemon_state& state, uint16_t slot) {
    if (state.verbs == nullptr || !state.verbs->serves(slot)) {
        return std::nullopt;
    }
    return state.verbs->resources(slot).memory();
}

void write_rdma_memory(json_writer& out, const std::optional<verbs::memory_report>& m) {
    if (!m) {
        return;
    }
    out.begin_object("rdma_memory")
        .value("mrs", m->mrs)
        .value("mr_bytes", m->mr_bytes)
        .value("mrs_pinned_after_dereg", m->mrs_pinned)
        .value("mr_bytes_pinned_after_dereg", m->mr_bytes_pinned)
        .value("mappings", m->held.mappings)
        .value("descriptors", m->held.descriptors)
        .value("mappings_share", m->share.mappings)
        .value("descriptors_share", m->share.descriptors)
        .value("refused_mappings", m->refused.mappings)
        .value("refused_descriptors", m->refused.descriptors)
        .value("quota_refusals", m->quota_refusals)
        .value("cq_resizes", m->cq_resizes)
        .value("cq_entries_moved", m->cq_entries_moved)
        .value("cq_resizes_refused", m->cq_resizes_refused)
        .end_object();
}

void write_rdma_reserve(json_writer& out, const std::optional<verbs_snapshot>& rdma) {
    if (!rdma) {
        return;
    }
    const verbs::host_amounts &capacity = rdma->capacity, &demand = rdma->demand,
                              &held = rdma->held;
    out.begin_object("rdma_reserve");
    for (const auto res : {verbs::host_resource::mappings, verbs::host_resource::descriptors}) {
        out.begin_object(res == verbs::host_resource::mappings ? "mappings" : "descriptors")
            .value("capacity", capacity[res])
            .value("demand", demand[res])
            .value("held", held[res])
            .value("overcommitted", demand[res] > capacity[res])
            .end_object();
    }
    out.end_object();
}

}  // namespace jakiro
