// The rdma_cm agent in a state image (cm_agent.hh, save and restore): what a successor needs to
// go on where this agent stands, so that a program's ids, listeners and connections (and the
// peers' view of them: communication IDs, transaction IDs, retransmission timers) carry over.
// Deadlines are steady_clock time points: CLOCK_MONOTONIC, the same in every process of the
// host, so a timer due in 100 ms is due in 100 ms in the successor too.

#include <cstddef>
#include <type_traits>

#include "rnic/rdmacm/cm_agent.hh"

namespace jakiro::rdmacm {

namespace {

// Upper bounds of what an agent's image lists, so that a corrupt count fails at once.
constexpr uint32_t max_listed_ids = 1u << 24;
constexpr uint32_t max_listed_events = 1u << 20;
constexpr uint32_t max_event_bytes = 4096;

static_assert(std::is_trivially_copyable_v<mad_buffer>);
static_assert(std::is_trivially_copyable_v<cm_req>);
static_assert(std::is_trivially_copyable_v<agent_stats>);

void write_time(handover::image_writer& w, cm_agent::clock::time_point t) {
    w.i64(t.time_since_epoch().count());
}

cm_agent::clock::time_point read_time(handover::section_reader& r) {
    return cm_agent::clock::time_point(cm_agent::clock::duration(r.i64()));
}

void write_mad(handover::image_writer& w, const std::optional<mad_buffer>& mad) {
    w.boolean(mad.has_value());
    if (mad) {
        w.pod(*mad);
    }
}

std::optional<mad_buffer> read_mad(handover::section_reader& r) {
    if (!r.boolean()) {
        return std::nullopt;
    }
    return r.pod<mad_buffer>();
}

}  // namespace

void cm_agent::save(handover::image_writer& w) const {
    w.pod(_stats);
    w.u32(_next_handle);
    w.u64(_next_tid);
    w.u32(_comm_id_seed);
    w.u32(static_cast<uint32_t>(_ids.size()));
    for (const auto& [handle, id] : _ids) {
        w.u32(id.handle);
        w.u64(id.client);
        w.u64(id.uid);
        w.u16(id.ps);
        w.u8(id.qp_type);
        w.u8(static_cast<uint8_t>(id.st));
        w.boolean(id.bound);
        w.boolean(id.inet6);
        w.pod(id.src_ip);
        w.u16(id.src_port);
        w.pod(id.dst_ip);
        w.u16(id.dst_port);
        w.i64(id.backlog);
        w.u32(id.listener);
        w.boolean(id.have_route);
        w.u32(id.local_comm_id);
        w.u32(id.remote_comm_id);
        w.u64(id.transaction_id);
        w.u32(id.local_qpn);
        w.u32(id.remote_qpn);
        w.u32(id.sq_psn);
        w.u32(id.rq_psn);
        w.u32(id.remote_qkey);
        w.u8(id.responder_resources);
        w.u8(id.initiator_depth);
        w.u8(id.retry_count);
        w.u8(id.rnr_retry_count);
        w.u8(id.path_mtu);
        w.boolean(id.srq);
        w.u8(id.tos);
        w.u8(id.ack_timeout);
        write_mad(w, id.outstanding);
        write_time(w, id.deadline);
        w.i64(id.retries_left);
        write_mad(w, id.sidr_reply);
    }
    w.u32(static_cast<uint32_t>(_by_comm_id.size()));
    for (const auto& [comm_id, handle] : _by_comm_id) {
        w.u32(comm_id);
        w.u32(handle);
    }
    w.u32(static_cast<uint32_t>(_held.size()));
    for (const auto& h : _held) {
        w.pod(h.src);
        w.u64(h.tid);
        w.pod(h.req);
        write_time(w, h.until);
    }
    w.u32(static_cast<uint32_t>(_channels.size()));
    for (const auto& [client, ch] : _channels) {
        w.u64(client);
        w.u32(static_cast<uint32_t>(ch.queued.size()));
        for (const auto& event : ch.queued) {
            w.bytes(std::as_bytes(std::span(event)));
        }
    }
}

namespace {

// An address as the section's version keeps it: version 1 (before IPv6) as 32 bits of IPv4
// (0: any), version 2 as its GID.
gid read_address(handover::section_reader& r) {
    if (r.version() >= 2) {
        return r.pod<gid>();
    }
    const uint32_t ip_be = r.u32();
    return ip_be == 0 ? gid{} : ipv4_gid(ip_be);
}

}  // namespace

bool cm_agent::restore(handover::section_reader& r,
                       const std::function<int(uint64_t)>& event_fd_of) {
    if (!_ids.empty() || !_channels.empty()) {
        r.fail("state section 'rdma_faces': rdma_cm restored into an agent in use");
        return false;
    }
    _stats = r.pod<agent_stats>();
    _next_handle = r.u32();
    _next_tid = r.u64();
    _comm_id_seed = r.u32();
    const uint32_t ids = r.count(max_listed_ids);
    for (uint32_t i = 0; i < ids && r.ok(); ++i) {
        cm_id id;
        id.handle = r.u32();
        id.client = r.u64();
        id.uid = r.u64();
        id.ps = r.u16();
        id.qp_type = r.u8();
        const uint8_t st = r.u8();
        id.bound = r.boolean();
        id.inet6 = r.version() >= 2 ? r.boolean() : false;
        id.src_ip = read_address(r);
        id.src_port = r.u16();
        id.dst_ip = read_address(r);
        id.dst_port = r.u16();
        id.backlog = static_cast<int>(r.i64());
        id.listener = r.u32();
        id.have_route = r.boolean();
        id.local_comm_id = r.u32();
        id.remote_comm_id = r.u32();
        id.transaction_id = r.u64();
        id.local_qpn = r.u32();
        id.remote_qpn = r.u32();
        id.sq_psn = r.u32();
        id.rq_psn = r.u32();
        id.remote_qkey = r.u32();
        id.responder_resources = r.u8();
        id.initiator_depth = r.u8();
        id.retry_count = r.u8();
        id.rnr_retry_count = r.u8();
        id.path_mtu = r.u8();
        id.srq = r.boolean();
        id.tos = r.u8();
        id.ack_timeout = r.u8();
        id.outstanding = read_mad(r);
        id.deadline = read_time(r);
        id.retries_left = static_cast<int>(r.i64());
        id.sidr_reply = read_mad(r);
        if (!r.ok()) {
            break;
        }
        if (st > static_cast<uint8_t>(state::sidr_done) || id.handle == 0 ||
            id.handle >= _next_handle || _ids.contains(id.handle)) {
            r.fail("state section 'rdma_faces': rdma_cm id " + std::to_string(id.handle) +
                   " is not one this agent can hold");
            break;
        }
        id.st = static_cast<state>(st);
        _ids.emplace(id.handle, id);
    }
    const uint32_t comm_ids = r.count(max_listed_ids);
    for (uint32_t i = 0; i < comm_ids && r.ok(); ++i) {
        const uint32_t comm_id = r.u32();
        const uint32_t handle = r.u32();
        if (r.ok() && !_ids.contains(handle)) {
            r.fail("state section 'rdma_faces': a connection names no rdma_cm id");
            break;
        }
        _by_comm_id[comm_id] = handle;
    }
    const uint32_t held = r.count(max_listed_ids);
    for (uint32_t i = 0; i < held && r.ok(); ++i) {
        held_req h;
        h.src = read_address(r);
        h.tid = r.u64();
        h.req = r.pod<cm_req>();
        if (handover::raw_field<uint8_t>(h.req, offsetof(cm_req, end_to_end_flow_control)) > 1 ||
            handover::raw_field<uint8_t>(h.req, offsetof(cm_req, srq)) > 1) {
            r.fail("state section 'rdma_faces': a held REQ with a flag that is no bool");
            break;
        }
        h.until = read_time(r);
        _held.push_back(h);
    }
    const uint32_t channels = r.count(max_listed_ids);
    for (uint32_t i = 0; i < channels && r.ok(); ++i) {
        channel ch;
        ch.client = r.u64();
        const uint32_t queued = r.count(max_listed_events);
        for (uint32_t e = 0; e < queued && r.ok(); ++e) {
            const auto b = r.bytes();
            if (b.size() > max_event_bytes) {
                r.fail("state section 'rdma_faces': an rdma_cm event too large");
                break;
            }
            std::vector<uint8_t> event;
            event.reserve(b.size());
            for (const std::byte byte : b) {
                event.push_back(static_cast<uint8_t>(byte));
            }
            ch.queued.push_back(std::move(event));
        }
        if (!r.ok()) {
            break;
        }
        ch.event_fd = event_fd_of(ch.client);
        if (ch.event_fd < 0 || _channels.contains(ch.client)) {
            r.fail("state section 'rdma_faces': an rdma_cm channel of no connection");
            break;
        }
        _channels.emplace(ch.client, std::move(ch));
    }
    // Every id's owner has a channel (or it is an orphan, owned by none).
    for (const auto& [handle, id] : _ids) {
        if (r.ok() && id.client != 0 && !_channels.contains(id.client)) {
            r.fail("state section 'rdma_faces': rdma_cm id " + std::to_string(handle) +
                   " of a connection without a channel");
        }
    }
    if (!r.ok()) {
        _ids.clear();
        _by_comm_id.clear();
        _held.clear();
        _channels.clear();
    }
    return r.ok();
}

}  // namespace jakiro::rdmacm
