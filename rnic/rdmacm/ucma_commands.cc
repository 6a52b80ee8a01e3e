// The ucma ABI v4 commands (rdma/rdma_user_cm.h) the shim forwards from a tenant's writes to
// its emulated /dev/infiniband/rdma_cm, as the kernel's ucma.c + cma.c execute them: one
// function each, reached through one table.
#include "rnic/rdmacm/cm_agent.hh"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "rnic/rdmacm/agent_support.hh"
#include "verbs_abi/cm_protocol.hh"

namespace jakiro::rdmacm {

using namespace detail;

// ---- commands ------------------------------------------------------------------------------

int cm_agent::command(uint64_t client, std::span<const uint8_t> cmd,
                      std::span<const uint8_t> option, std::vector<uint8_t>& response,
                      uint64_t held_channel) {
    ++_stats.commands;
    response.clear();
    rdma_ucm_cmd_hdr hdr;
    if (cmd.size() < sizeof(hdr) || _channels.count(client) == 0) {
        ++_stats.bad_commands;
        return EINVAL;
    }
    std::memcpy(&hdr, cmd.data(), sizeof(hdr));
    if (sizeof(hdr) + hdr.in > cmd.size()) {
        ++_stats.bad_commands;
        return EINVAL;
    }
    const auto in = cmd.subspan(sizeof(hdr), hdr.in);
    // One row per command: what the kernel's ucma_cmd_table holds, plus the answers for the
    // commands this agent refuses on purpose.
    using bytes = std::span<const uint8_t>;
    using out_t = std::vector<uint8_t>;
    // `held`: the channel the caller proved it holds (MIGRATE_ID's source), 0 if none.
    struct caller {
        uint64_t client;
        uint64_t held;
    };
    using handler = int (*)(cm_agent&, caller, bytes in, bytes option, out_t & out);
    struct row {
        uint32_t cmd;
        handler run;
    };
    static constexpr row table[] = {
        {RDMA_USER_CM_CMD_CREATE_ID, [](cm_agent& a, caller c, bytes in, bytes,
                                        out_t& out) { return a.create_id(c.client, in, out); }},
        {RDMA_USER_CM_CMD_DESTROY_ID, [](cm_agent& a, caller c, bytes in, bytes,
                                         out_t& out) { return a.destroy_id(c.client, in, out); }},
        {RDMA_USER_CM_CMD_BIND_IP, [](cm_agent& a, caller c, bytes in, bytes,
                                      out_t&) { return a.bind_ip(c.client, in, false); }},
        {RDMA_USER_CM_CMD_BIND, [](cm_agent& a, caller c, bytes in, bytes,
                                   out_t&) { return a.bind_ip(c.client, in, true); }},
        {RDMA_USER_CM_CMD_RESOLVE_IP, [](cm_agent& a, caller c, bytes in, bytes,
                                         out_t&) { return a.resolve_ip(c.client, in, false); }},
        {RDMA_USER_CM_CMD_RESOLVE_ADDR, [](cm_agent& a, caller c, bytes in, bytes,
                                           out_t&) { return a.resolve_ip(c.client, in, true); }},
        {RDMA_USER_CM_CMD_RESOLVE_ROUTE, [](cm_agent& a, caller c, bytes in, bytes,
                                            out_t&) { return a.resolve_route(c.client, in); }},
        {RDMA_USER_CM_CMD_QUERY_ROUTE, [](cm_agent& a, caller c, bytes in, bytes,
                                          out_t& out) { return a.query_route(c.client, in, out); }},
        {RDMA_USER_CM_CMD_QUERY, [](cm_agent& a, caller c, bytes in, bytes,
                                    out_t& out) { return a.query(c.client, in, out); }},
        {RDMA_USER_CM_CMD_CONNECT,
         [](cm_agent& a, caller c, bytes in, bytes, out_t&) { return a.connect(c.client, in); }},
        {RDMA_USER_CM_CMD_LISTEN,
         [](cm_agent& a, caller c, bytes in, bytes, out_t&) { return a.listen(c.client, in); }},
        {RDMA_USER_CM_CMD_ACCEPT,
         [](cm_agent& a, caller c, bytes in, bytes, out_t&) { return a.accept(c.client, in); }},
        {RDMA_USER_CM_CMD_REJECT,
         [](cm_agent& a, caller c, bytes in, bytes, out_t&) { return a.reject(c.client, in); }},
        {RDMA_USER_CM_CMD_DISCONNECT,
         [](cm_agent& a, caller c, bytes in, bytes, out_t&) { return a.disconnect(c.client, in); }},
        {RDMA_USER_CM_CMD_INIT_QP_ATTR,
         [](cm_agent& a, caller c, bytes in, bytes, out_t& out) {
             return a.init_qp_attr(c.client, in, out);
         }},
        {RDMA_USER_CM_CMD_SET_OPTION, [](cm_agent& a, caller c, bytes in, bytes option,
                                         out_t&) { return a.set_option(c.client, in, option); }},
        {RDMA_USER_CM_CMD_NOTIFY,
         [](cm_agent& a, caller c, bytes in, bytes, out_t&) { return a.notify(c.client, in); }},
        {RDMA_USER_CM_CMD_MIGRATE_ID,
         [](cm_agent& a, caller c, bytes in, bytes, out_t& out) {
             return a.migrate_id(c.client, c.held, in, out);
         }},
        // The overlay carries no multicast: refused cleanly.
        {RDMA_USER_CM_CMD_JOIN_IP_MCAST,
         [](cm_agent&, caller, bytes, bytes, out_t&) { return EOPNOTSUPP; }},
        {RDMA_USER_CM_CMD_JOIN_MCAST,
         [](cm_agent&, caller, bytes, bytes, out_t&) { return EOPNOTSUPP; }},
        // Nothing was ever joined.
        {RDMA_USER_CM_CMD_LEAVE_MCAST,
         [](cm_agent&, caller, bytes, bytes, out_t&) { return ENOENT; }},
        // The shim serves it from the event socket.
        {RDMA_USER_CM_CMD_GET_EVENT,
         [](cm_agent&, caller, bytes, bytes, out_t&) { return EINVAL; }},
    };
    const auto* found = std::find_if(std::begin(table), std::end(table),
                                     [&](const row& r) { return r.cmd == hdr.cmd; });
    int rc = found != std::end(table)
                 ? found->run(*this, {client, held_channel}, in, option, response)
                 : (hdr.cmd > RDMA_USER_CM_CMD_JOIN_MCAST ? EINVAL : ENOSYS);
    if (rc == 0 && response.size() > hdr.out) {
        // The kernel answers ENOSPC when the caller's buffer cannot hold the response.
        response.clear();
        rc = ENOSPC;
    }
    if (rc != 0) {
        ++_stats.bad_commands;
    }
    return rc;
}

template <typename Command>
int cm_agent::read_for_id(uint64_t client, std::span<const uint8_t> in, Command& c, cm_id*& id) {
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    id = find(client, c.id);
    return id == nullptr ? ENOENT : 0;
}

int cm_agent::create_id(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out) {
    rdma_ucm_create_id c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    if (c.ps != port_space_tcp && c.ps != port_space_udp && c.ps != port_space_ib &&
        c.ps != 0x0002 /* IPOIB */) {
        return EINVAL;
    }
    if (c.qp_type != IBV_QPT_RC && c.qp_type != IBV_QPT_UD && c.qp_type != IBV_QPT_UC) {
        return EINVAL;
    }
    cm_id* id = new_id(client, c.ps, c.qp_type);
    if (id == nullptr) {
        ++_stats.ids_refused;
        return EDQUOT;
    }
    id->uid = c.uid;
    rdma_ucm_create_id_resp r{};
    r.id = id->handle;
    put_response(out, r);
    return 0;
}

int cm_agent::destroy_id(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out) {
    rdma_ucm_destroy_id c;
    cm_id* id = nullptr;
    if (const int error = read_for_id(client, in, c, id); error != 0) {
        return error;
    }
    if (!release(*id)) {
        erase_id(c.id);
    }
    rdma_ucm_destroy_id_resp r{};
    r.events_reported = 0;  // the shim counts what it delivered and fills this in
    put_response(out, r);
    return 0;
}

int cm_agent::bind_ip(uint64_t client, std::span<const uint8_t> in, bool sockaddr_storage) {
    uint32_t handle;
    std::optional<ip_sockaddr> a;
    if (sockaddr_storage) {
        rdma_ucm_bind c;
        if (!read_cmd(in, c)) {
            return EINVAL;
        }
        handle = c.id;
        a = address_of(&c.addr);
    } else {
        rdma_ucm_bind_ip c;
        if (!read_cmd(in, c)) {
            return EINVAL;
        }
        handle = c.id;
        a = address_of(&c.addr);
    }
    cm_id* id = find(client, handle);
    if (id == nullptr) {
        return ENOENT;
    }
    if (!a) {
        return EAFNOSUPPORT;  // AF_IB: librdmacm falls back to the IP commands
    }
    if (id->bound || id->st != state::idle) {
        return EINVAL;
    }
    // One of the vNIC's addresses, any, or loopback: the kernel binds a loopback address to the
    // first device (cma_bind_loopback), and libfabric binds 127.0.0.1 when given no address.
    const bool loopback6 = is_ipv6_loopback(a->ip) && !is_any(_self.ip6);
    const bool loopback = is_ipv4_loopback(a->ip) || loopback6;
    if (!is_any(a->ip) && !is_own(a->ip) && !loopback) {
        return EADDRNOTAVAIL;
    }
    uint16_t port = a->port;
    if (port == 0) {
        port = ephemeral_port(id->ps);
        if (port == 0) {
            return EADDRINUSE;
        }
    } else if (port_in_use(id->ps, port, id)) {
        return EADDRINUSE;
    }
    id->bound = true;
    // A loopback bind is reported as the vNIC's address: the vNIC is the namespace's only RDMA
    // device, and a peer must be able to reach what a program learns from
    // rdma_get_local_addr (libfabric's verbs provider advertises it).
    id->src_ip = loopback6 ? _self.ip6 : loopback ? ipv4_gid(_self.ip_be) : a->ip;
    id->src_port = port;
    id->inet6 = a->inet6;
    return 0;
}

int cm_agent::resolve_ip(uint64_t client, std::span<const uint8_t> in, bool sockaddr_storage) {
    uint32_t handle;
    std::optional<ip_sockaddr> src, dst;
    bool have_src = false;
    if (sockaddr_storage) {
        rdma_ucm_resolve_addr c;
        if (!read_cmd(in, c)) {
            return EINVAL;
        }
        handle = c.id;
        have_src = c.src_size != 0;
        src = address_of(&c.src_addr);
        dst = address_of(&c.dst_addr);
    } else {
        rdma_ucm_resolve_ip c;
        if (!read_cmd(in, c)) {
            return EINVAL;
        }
        handle = c.id;
        have_src = c.src_addr.sin6_family != 0;
        src = address_of(&c.src_addr);
        dst = address_of(&c.dst_addr);
    }
    cm_id* id = find(client, handle);
    if (id == nullptr) {
        return ENOENT;
    }
    if (!dst || (have_src && !src)) {
        return EAFNOSUPPORT;
    }
    if (id->st != state::idle && id->st != state::addr_resolved) {
        return EINVAL;
    }
    if (!id->bound) {
        if (have_src && !is_any(src->ip) && !is_own(src->ip)) {
            return EADDRNOTAVAIL;
        }
        const uint16_t port = ephemeral_port(id->ps);
        if (port == 0) {
            return EADDRINUSE;
        }
        id->bound = true;
        id->src_port = port;
    }
    // The source is the vNIC's address of the destination's family: over IPv6 only when the
    // vNIC has an IPv6 address (otherwise there is no route, as on a host without one).
    id->src_ip = own_towards(dst->ip);
    id->dst_ip = dst->ip;
    id->dst_port = dst->port;
    id->inet6 = dst->inet6;
    if ((!unicast(id->dst_ip) && !is_multicast(id->dst_ip)) || is_any(id->src_ip)) {
        raise(*id, ev_addr_error, -EHOSTUNREACH);
        return 0;
    }
    // No ARP on the fabric: any unicast address is resolved; the overlay's VLT of this vNIC's
    // VPC is where its MADs go (an address nobody holds times out as UNREACHABLE).
    id->st = state::addr_resolved;
    raise(*id, ev_addr_resolved, 0);
    return 0;
}

int cm_agent::resolve_route(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_resolve_route c;
    cm_id* id = nullptr;
    if (const int error = read_for_id(client, in, c, id); error != 0) {
        return error;
    }
    if (id->st != state::addr_resolved && id->st != state::route_resolved) {
        return EINVAL;
    }
    id->st = state::route_resolved;
    id->have_route = true;
    raise(*id, ev_route_resolved, 0);
    return 0;
}

int cm_agent::query_route(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out) {
    rdma_ucm_query c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    const cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    rdma_ucm_query_route_resp r{};
    // The device: librdmacm matches it by node GUID against ibv_get_device_guid() (index -1:
    // match the GUID alone).
    r.node_guid = _self.node_guid_be;
    r.port_num = 1;
    r.ibdev_index = 0xFFFF'FFFFu;
    const gid src = !is_any(id->src_ip)               ? id->src_ip
                    : id->inet6 && !is_any(_self.ip6) ? _self.ip6
                                                      : ipv4_gid(_self.ip_be);
    write_sockaddr(&r.src_addr, sizeof(r.src_addr), id->bound ? id->src_ip : gid{}, id->src_port,
                   id->inet6);
    write_sockaddr(&r.dst_addr, sizeof(r.dst_addr), id->dst_ip, id->dst_port, id->inet6);
    auto& p = r.ib_route[0];
    std::memcpy(p.sgid, src.data(), 16);
    if (!is_any(id->dst_ip)) {
        std::memcpy(p.dgid, id->dst_ip.data(), 16);
    }
    p.pkey = htons(0xFFFF);
    p.mtu = id->path_mtu;
    p.mtu_selector = 2;
    p.hop_limit = 64;
    p.traffic_class = id->tos;
    p.numb_path = 1;
    p.rate = 3;  // 10 Gb/s, informational
    p.rate_selector = 2;
    p.packet_life_time = path_packet_life_time;
    p.packet_life_time_selector = 2;
    r.num_paths = id->have_route ? 1 : 0;
    put_response(out, r);
    return 0;
}

int cm_agent::query(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out) {
    rdma_ucm_query c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    const cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    if (c.option != RDMA_USER_CM_QUERY_ADDR) {
        return ENOSYS;  // PATH and GID belong to AF_IB, which this device does not offer
    }
    rdma_ucm_query_addr_resp r{};
    r.node_guid = _self.node_guid_be;
    r.port_num = 1;
    r.pkey = 0xFFFF;
    const bool inet6 = id->inet6 || (!is_any(id->dst_ip) && !is_ipv4_gid(id->dst_ip));
    r.src_size = inet6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    r.dst_size = r.src_size;
    write_sockaddr(&r.src_addr, sizeof(r.src_addr), id->src_ip, id->src_port, id->inet6);
    write_sockaddr(&r.dst_addr, sizeof(r.dst_addr), id->dst_ip, id->dst_port, id->inet6);
    r.ibdev_index = 0xFFFF'FFFFu;
    put_response(out, r);
    return 0;
}

int cm_agent::connect(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_connect c;
    cm_id* id = nullptr;
    if (const int error = read_for_id(client, in, c, id); error != 0) {
        return error;
    }
    if (id->st != state::route_resolved || !c.conn_param.valid) {
        return EINVAL;
    }
    const auto& p = c.conn_param;
    if (!unicast(id->dst_ip)) {
        return EINVAL;  // a multicast group is joined, not connected to
    }
    if (_admit && _admit(id->dst_ip) != 0) {
        // This vNIC's own security groups refuse the peer: nothing goes on the wire, and the
        // connection is rejected as the peer's agent would reject it (reason 28), through an
        // event: programs (rping among them) handle a REJECTED event, not a failed connect.
        ++_stats.rejected_by_policy;
        id->st = state::disconnected;
        raise(*id, ev_rejected, static_cast<int32_t>(rej_reason::consumer_defined));
        return 0;
    }
    if (id->qp_type == IBV_QPT_UD) {
        if (p.private_data_len > sidr_user_private) {
            return EINVAL;
        }
        cm_sidr_req r;
        r.request_id = new_comm_id();
        r.service_id = service_id(id->ps, id->dst_port);
        write_cma_header(r.private_data, {id->src_port, id->src_ip, id->dst_ip});
        std::memcpy(r.private_data.data() + cma_header_bytes, p.private_data, p.private_data_len);
        id->local_comm_id = r.request_id;
        _by_comm_id[r.request_id] = id->handle;
        id->transaction_id = _next_tid++;
        id->st = state::sidr_req_sent;
        send_tracked(*id, cm_message{id->transaction_id, r});
        return 0;
    }
    if (p.private_data_len > req_user_private || p.qp_num == 0 || p.qp_num > 0xFF'FFFF) {
        return EINVAL;
    }
    std::random_device rd;
    cm_req r;
    r.local_comm_id = new_comm_id();
    r.service_id = service_id(id->ps, id->dst_port);
    r.local_ca_guid = be64toh(_self.node_guid_be);
    r.local_qpn = p.qp_num;
    r.responder_resources = p.responder_resources;
    r.initiator_depth = p.initiator_depth;
    r.remote_cm_response_timeout = cm_response_timeout;
    r.transport = id->qp_type == IBV_QPT_UC ? cm_transport::uc : cm_transport::rc;
    r.end_to_end_flow_control = p.flow_control != 0;
    r.starting_psn = rd() & 0xFF'FFFF;
    r.local_cm_response_timeout = cm_response_timeout;
    r.retry_count = p.retry_count & 7;
    r.pkey = 0xFFFF;
    r.path_mtu = id->path_mtu;
    r.rnr_retry_count = p.rnr_retry_count & 7;
    r.max_cm_retries = max_cm_retries;
    r.srq = p.srq != 0;
    r.primary_local_lid = 0xFFFF;  // permissive: RoCE routes by GID
    r.primary_remote_lid = 0xFFFF;
    r.primary_local_gid = id->src_ip;
    r.primary_remote_gid = id->dst_ip;
    r.primary_packet_rate = 3;
    r.primary_traffic_class = id->tos;
    r.primary_hop_limit = 64;
    r.primary_local_ack_timeout = id->ack_timeout;
    write_cma_header(r.private_data, {id->src_port, id->src_ip, id->dst_ip});
    std::memcpy(r.private_data.data() + cma_header_bytes, p.private_data, p.private_data_len);
    id->local_comm_id = r.local_comm_id;
    _by_comm_id[r.local_comm_id] = id->handle;
    id->local_qpn = p.qp_num;
    id->sq_psn = r.starting_psn;
    id->responder_resources = p.responder_resources;
    id->initiator_depth = p.initiator_depth;
    id->retry_count = r.retry_count;
    id->rnr_retry_count = r.rnr_retry_count;
    id->srq = r.srq;
    id->transaction_id = _next_tid++;
    id->st = state::req_sent;
    send_tracked(*id, cm_message{id->transaction_id, r});
    return 0;
}

int cm_agent::listen(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_listen c;
    cm_id* id = nullptr;
    if (const int error = read_for_id(client, in, c, id); error != 0) {
        return error;
    }
    if (id->st == state::listening) {
        id->backlog = c.backlog > 0 ? static_cast<int>(c.backlog) : 128;
        return 0;
    }
    if (id->st != state::idle) {
        return EINVAL;
    }
    if (!id->bound) {
        const uint16_t port = ephemeral_port(id->ps);
        if (port == 0) {
            return EADDRINUSE;
        }
        id->bound = true;
        id->src_port = port;
    }
    id->backlog = c.backlog > 0 ? std::min<int>(static_cast<int>(c.backlog), 1024) : 128;
    id->st = state::listening;
    take_held(id->ps, id->src_port);
    return 0;
}

int cm_agent::accept(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_accept c;
    cm_id* id = nullptr;
    if (const int error = read_for_id(client, in, c, id); error != 0) {
        return error;
    }
    const auto& p = c.conn_param;
    if (id->st == state::rep_rcvd && !p.valid) {
        // The active side after CONNECT_RESPONSE: its QP is ready, the RTU completes it.
        send(id->dst_ip,
             cm_message{id->transaction_id, cm_rtu{id->local_comm_id, id->remote_comm_id}});
        id->st = state::established;
        return 0;
    }
    if (id->st == state::sidr_req_rcvd) {
        if (!p.valid || p.private_data_len > sidr_rep_private_bytes || p.qp_num > 0xFF'FFFF) {
            return EINVAL;
        }
        cm_sidr_rep r;
        r.request_id = id->remote_comm_id;
        r.status = sidr_status::valid;
        r.qpn = p.qp_num;
        r.service_id = service_id(id->ps, id->src_port);
        r.qkey = p.qkey != 0 ? p.qkey : udp_qkey;
        std::memcpy(r.private_data.data(), p.private_data, p.private_data_len);
        id->sidr_reply = encode(cm_message{id->transaction_id, r});
        ++_stats.mads_sent;
        _send(id->dst_ip, *id->sidr_reply);
        id->uid = c.uid;
        id->st = state::sidr_done;
        return 0;
    }
    if (id->st != state::req_rcvd || !p.valid) {
        return EINVAL;
    }
    if (p.private_data_len > rep_private_bytes || p.qp_num == 0 || p.qp_num > 0xFF'FFFF) {
        return EINVAL;
    }
    cm_rep r;
    r.local_comm_id = id->local_comm_id;
    r.remote_comm_id = id->remote_comm_id;
    r.local_qpn = p.qp_num;
    r.starting_psn = id->sq_psn;
    r.responder_resources = p.responder_resources;
    r.initiator_depth = p.initiator_depth;
    r.target_ack_delay = 15;
    r.end_to_end_flow_control = p.flow_control != 0;
    r.rnr_retry_count = p.rnr_retry_count & 7;
    r.srq = p.srq != 0;
    r.local_ca_guid = be64toh(_self.node_guid_be);
    std::memcpy(r.private_data.data(), p.private_data, p.private_data_len);
    id->uid = c.uid;
    id->local_qpn = p.qp_num;
    id->responder_resources = p.responder_resources;
    id->initiator_depth = p.initiator_depth;
    id->st = state::rep_sent;
    send_tracked(*id, cm_message{id->transaction_id, r});
    return 0;
}

int cm_agent::reject(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_reject c;
    cm_id* id = nullptr;
    if (const int error = read_for_id(client, in, c, id); error != 0) {
        return error;
    }
    if (id->st == state::sidr_req_rcvd) {
        release(*id);  // a SIDR_REP saying "rejected"
        id->st = state::sidr_done;
        return 0;
    }
    if (id->st != state::req_rcvd && id->st != state::rep_rcvd) {
        return EINVAL;
    }
    cm_rej r;
    r.local_comm_id = id->local_comm_id;
    r.remote_comm_id = id->remote_comm_id;
    r.message_rejected = id->st == state::req_rcvd ? message_kind::req : message_kind::rep;
    r.reason = static_cast<uint16_t>(rej_reason::consumer_defined);
    std::memcpy(r.private_data.data(), c.private_data,
                std::min<std::size_t>(c.private_data_len, rej_private_bytes));
    send(id->dst_ip, cm_message{id->transaction_id, r});
    settle(*id);
    id->st = state::disconnected;
    return 0;
}

int cm_agent::disconnect(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_disconnect c;
    cm_id* id = nullptr;
    if (const int error = read_for_id(client, in, c, id); error != 0) {
        return error;
    }
    switch (id->st) {
        case state::established:
        case state::rep_sent:  // RTU lost but the peer is talking: as IBTA's COMM_EST
        {
            settle(*id);
            id->transaction_id = _next_tid++;
            id->st = state::dreq_sent;
            send_tracked(
                *id, cm_message{id->transaction_id,
                                cm_dreq{id->local_comm_id, id->remote_comm_id, id->remote_qpn}});
            return 0;
        }
        case state::dreq_rcvd:
            send(id->dst_ip,
                 cm_message{id->transaction_id, cm_drep{id->local_comm_id, id->remote_comm_id}});
            id->st = state::disconnected;
            return 0;
        default:
            return EINVAL;
    }
}

int cm_agent::init_qp_attr(uint64_t client, std::span<const uint8_t> in,
                           std::vector<uint8_t>& out) {
    rdma_ucm_init_qp_attr c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    const cm_id* id = find(client, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    ib_uverbs_qp_attr r{};
    r.qp_state = c.qp_state;
    uint32_t mask = IBV_QP_STATE;
    switch (c.qp_state) {
        case IBV_QPS_INIT:
            r.pkey_index = 0;
            r.port_num = 1;
            mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
            if (id->qp_type == IBV_QPT_UD) {
                r.qkey = udp_qkey;
                mask |= IBV_QP_QKEY;
            } else {
                r.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
                if (id->responder_resources != 0) {
                    r.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
                }
                mask |= IBV_QP_ACCESS_FLAGS;
            }
            break;
        case IBV_QPS_RTR:
            if (id->qp_type == IBV_QPT_UD) {
                break;
            }
            if (id->st != state::req_rcvd && id->st != state::rep_rcvd &&
                id->st != state::rep_sent && id->st != state::established) {
                return EINVAL;
            }
            fill_ah(r.ah_attr, id->dst_ip, id->tos);
            r.path_mtu = id->path_mtu;
            r.dest_qp_num = id->remote_qpn;
            r.rq_psn = id->rq_psn;
            r.max_dest_rd_atomic = id->responder_resources;
            r.min_rnr_timer = 12;  // 0.64 ms
            mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
            break;
        case IBV_QPS_RTS:
            r.sq_psn = id->qp_type == IBV_QPT_UD ? 0 : id->sq_psn;
            mask |= IBV_QP_SQ_PSN;
            if (id->qp_type == IBV_QPT_UD) {
                break;
            }
            if (id->st != state::req_rcvd && id->st != state::rep_rcvd &&
                id->st != state::rep_sent && id->st != state::established) {
                return EINVAL;
            }
            r.timeout = id->ack_timeout;
            r.retry_cnt = id->retry_count;
            r.rnr_retry = id->rnr_retry_count;
            r.max_rd_atomic = id->initiator_depth;
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
            break;
        default:
            return EINVAL;
    }
    r.qp_attr_mask = mask;
    put_response(out, r);
    return 0;
}

int cm_agent::set_option(uint64_t client, std::span<const uint8_t> in,
                         std::span<const uint8_t> option) {
    rdma_ucm_set_option c;
    cm_id* id = nullptr;
    if (const int error = read_for_id(client, in, c, id); error != 0) {
        return error;
    }
    if (c.optlen != option.size()) {
        return EINVAL;  // the shim copies exactly optlen bytes
    }
    if (c.level == RDMA_OPTION_ID) {
        switch (c.optname) {
            case RDMA_OPTION_ID_TOS:
                if (option.size() != 1) {
                    return EINVAL;
                }
                id->tos = option[0];
                return 0;
            case RDMA_OPTION_ID_REUSEADDR:
            case RDMA_OPTION_ID_AFONLY:
                return option.size() == sizeof(int) ? 0 : EINVAL;
            case RDMA_OPTION_ID_ACK_TIMEOUT:
                if (option.size() != 1) {
                    return EINVAL;
                }
                id->ack_timeout = std::min<uint8_t>(option[0], 31);
                return 0;
            default:
                return ENOSYS;
        }
    }
    return ENOSYS;  // RDMA_OPTION_IB_PATH: paths are the overlay's business
}

int cm_agent::notify(uint64_t client, std::span<const uint8_t> in) {
    rdma_ucm_notify c;
    cm_id* id = nullptr;
    if (const int error = read_for_id(client, in, c, id); error != 0) {
        return error;
    }
    if (c.event == IBV_EVENT_COMM_EST && id->st == state::rep_sent) {
        settle(*id);
        id->st = state::established;
        raise(*id, ev_established, 0);
    }
    return 0;
}

int cm_agent::migrate_id(uint64_t client, uint64_t held_channel, std::span<const uint8_t> in,
                         std::vector<uint8_t>& out) {
    rdma_ucm_migrate_id c;
    if (!read_cmd(in, c)) {
        return EINVAL;
    }
    // The source is the channel the caller proved it holds (its descriptor came with the
    // command), never what `fd` says: a number can be guessed, and Linux too takes the source
    // channel from the caller's own descriptor table. ENOENT, as the kernel answers a
    // descriptor that is not open, and for an id that is not that channel's.
    if (held_channel == 0 || _channels.count(held_channel) == 0) {
        return ENOENT;
    }
    cm_id* id = find(held_channel, c.id);
    if (id == nullptr) {
        return ENOENT;
    }
    id->client = client;
    rdma_ucm_migrate_resp r{};
    r.events_reported = 0;  // the shim fills in what it delivered
    put_response(out, r);
    return 0;
}

}  // namespace jakiro::rdmacm
