#pragma once
// A host with one of everything, for the tests of what renders a stats snapshot: ports, a vNIC
// with an RDMA face and a QP, a rule, two workers, a shaped vNIC, an engine, a sealed overlay
// peer, a take-over behind it. Every counter holds a number of its own (from 1000 up) before a
// few are set to the values the tests name.

#include <infiniband/verbs.h>

#include <cstdint>

#include "dataplane/control/stats_snapshot.hh"

namespace jakiro {

inline stats_snapshot full_snapshot() {
    uint64_t n = 1000;
    stats_snapshot s;
    s.host = "h1";
    s.uptime_s = 12.5;
    s.time_ns = 123456789;
    s.ready = true;
    s.vnics_configured = 1;
    s.neighbors = 3;
    s.neighbors_resolved = 2;
    s.ports.push_back({"uplink", true, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    s.ports.push_back({"t1", true, ++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n});
    vnic_snapshot v;
    v.slot = 0;
    v.name = "t1";
#define JAKIRO_VNIC_COUNTER(name, field) v.name = ++n;
#include "dataplane/control/vnic_counters.def"
#undef JAKIRO_VNIC_COUNTER
    v.bounds = {++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n, ++n};
    for (auto& q : v.qps) {
        q = ++n;
    }
    v.to_tenant_packets = 11;
    v.from_tenant_packets = 12;
    v.sg_allowed_ingress = 21;
    v.sg_allowed_egress = 22;
    v.sg_denied_ingress = 23;
    v.sg_denied_egress = 24;
    v.qps[qp_totals::naks_sent] = 31;
    v.qps[qp_totals::naks_received] = 32;
    verbs::memory_report m;
    m.mrs = ++n;
    m.mr_bytes = ++n;
    m.mrs_pinned = ++n;
    m.mr_bytes_pinned = ++n;
    m.held = {41, 42};
    m.share = {++n, ++n};
    m.refused = {++n, ++n};
    m.quota_refusals = ++n;
    m.cq_resizes = ++n;
    m.cq_entries_moved = ++n;
    m.cq_resizes_refused = ++n;
    v.rdma_memory = m;
    s.vnics.push_back(v);
    s.slot_names = {"t1"};
    s.slot_workers = {0};
    s.rules.push_back({"blue", "default", "egress", 0, 10, "tcp", "any", "0.0.0.0/0", 5});
    s.rules.push_back({"blue", "default", "ingress", 0, 7, "tcp", "8080", "198.19.0.0/16", ++n});
    for (unsigned id = 0; id < 2; ++id) {
        worker_snapshot w;
        w.id = id;
        if (id == 0) {
            w.vnics = {"t1"};
        }
        w.from_tenant_packets = ++n;
        w.to_tenant_packets = ++n;
#define JAKIRO_DATAPATH_COUNTER(name) w.counters.name = ++n;
#include "dataplane/control/datapath_counters.def"
#undef JAKIRO_DATAPATH_COUNTER
        s.workers.push_back(w);
    }
    s.workers[0].counters.busy_polls = 51;
#define JAKIRO_DATAPATH_COUNTER(name) \
    s.datapath.name = s.workers[0].counters.name + s.workers[1].counters.name;
#include "dataplane/control/datapath_counters.def"
#undef JAKIRO_DATAPATH_COUNTER
    for (auto& d : s.drops) {
        d = ++n;
    }
    s.conntrack = {++n, ++n, ++n, ++n, ++n, ++n};
    qos_vnic_snapshot q;
    q.name = "t1";
    q.rate_bps = 100000000;
    q.grants = ++n;
    q.rdma_waits = ++n;
    q.classes.resize(2);
    q.classes[1].cls = qos::traffic_class::tcp;
    for (auto& c : q.classes) {
        c.share_bps = ++n;
        c.min_bps = ++n;
        c.max_bps = ++n;
        c.sent = {++n, ++n};
        c.tail_drops = ++n;
        c.busy_grants = ++n;
        c.grants = q.grants;
        c.received.bytes = ++n;
        c.received.packets = ++n;
        c.received.ce_marked = ++n;
        c.received.dropped = ++n;
        c.received.cnps = ++n;
    }
    q.classes[0].weight = 3;
    q.classes[1].weight = 1;
    q.classes[0].rdma_waits = q.rdma_waits;
    q.classes[0].rdma_granted = ++n;
    s.qos.push_back(q);
    rnic::qp_report qp;
    qp.vnic = 0;
    qp.type = IBV_QPT_RC;
    qp.state = 3;
    qp.qpn = 17;
    qp.packets_sent = ++n;
    s.qps.push_back(qp);
    s.engine = engine_snapshot{2, ++n, ++n, ++n, ++n, ++n, {}};
    for (auto& d : s.engine->drops) {
        d = ++n;
    }
    verbs_snapshot rdma;
    rdma.clients = 1;
    rdma.stats.faces.accepted = ++n;
    rdma.stats.faces.refused = ++n;
    rdma.stats.faces.refused_foreign = ++n;
    rdma.stats.faces.hello_timeouts = ++n;
    rdma.stats.faces.requests = ++n;
    rdma.stats.faces.bad_requests = ++n;
    rdma.faces.push_back({});
    auto& face = rdma.faces[0];
    face.name = "t1";
    face.clients = 1;
    face.counters.accepted = ++n;
    face.counters.refused = ++n;
    face.counters.refused_foreign = ++n;
    face.counters.hello_timeouts = ++n;
    face.counters.requests = ++n;
    face.counters.bad_requests = ++n;
    face.cm.commands = ++n;
    face.cm.bad_commands = ++n;
    face.cm.mads_sent = ++n;
    face.cm.mads_received = ++n;
    face.cm.mads_dropped = ++n;
    face.cm.mads_forged = ++n;
    face.cm.rejected_by_policy = ++n;
    face.cm.rejected_no_listener = ++n;
    face.cm.events_dropped = ++n;
    face.cm.ids_refused = ++n;
    face.cm.requests_over_backlog = ++n;
    face.cm.held_reqs_refused = ++n;
    face.cm_ids = 2;
    face.qp1 = {++n, ++n, ++n, ++n};
    rdma.capacity = {++n, ++n};
    rdma.demand = {++n, ++n};
    rdma.held = {++n, ++n};
    s.rdma = rdma;
    s.control = {++n, ++n, ++n};
    s.restarts.last = restart_kind::upgrade;
    s.restarts.counts = {0, 2, 1, 0};
    s.restarts.carried = {{"flows", 7}};
    s.restarts.lost = {{"rdma_contexts", 1}};
    overlay_peer_snapshot peer;
    peer.host = "198.18.0.2";
    peer.policy = "required";
    peer.sealed = true;
    peer.tx_spi = 1800000000;
    peer.rx_spi = ++n;
    peer.frames_sealed = ++n;
    peer.auth_failed = 3;
    s.overlay_peers = std::vector<overlay_peer_snapshot>{peer};
    return s;
}

}  // namespace jakiro
