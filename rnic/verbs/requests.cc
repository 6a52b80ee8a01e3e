#include "rnic/verbs/requests.hh"

#include <cerrno>
#include <cstring>

namespace jakiro::verbs {

namespace {

namespace proto = verbs_proto;

template <typename Msg>
void put(outcome& out, const Msg& m) {
    static_assert(sizeof(Msg) <= proto::max_message_size);
    std::memcpy(out.reply.data(), &m, sizeof(Msg));
    out.reply_size = sizeof(Msg);
}

// A short reply: the request's header turned around, with a status. For a version mismatch
// it carries our version, which is how the shim learns what it talks to.
void put_status(outcome& out, const proto::header& request, int status) {
    auto r = proto::make_message<proto::reply_header>(
        static_cast<uint16_t>(request.opcode | proto::reply_flag), request.request_id);
    r.status = status;
    put(out, r);
}

// The one descriptor a request must bring, or -1 (none, or more than one).
int single_fd(std::span<int> fds) {
    return fds.size() == 1 ? fds[0] : -1;
}

}  // namespace

outcome handle_request(std::span<const std::byte> message, bool truncated, std::span<int> fds,
                       session& s, const device_context& device) {
    outcome out;
    proto::header hdr{};
    out.error = proto::check_request(message, truncated, hdr);
    switch (out.error) {
        case proto::parse_error::none:
            break;
        case proto::parse_error::truncated:
        case proto::parse_error::bad_magic:
            out.what = outcome::action::drop;
            return out;
        case proto::parse_error::bad_version:
            out.what = outcome::action::reply_close;
            put_status(out, hdr, proto::errno_for(out.error));
            return out;
        default:
            out.what = outcome::action::reply;
            put_status(out, hdr, proto::errno_for(out.error));
            return out;
    }

    out.what = outcome::action::reply;
    switch (static_cast<proto::opcode>(hdr.opcode)) {
        case proto::opcode::hello: {
            proto::hello_request req;
            proto::decode(message, req);
            if (s.hello_done) {
                put_status(out, hdr, EALREADY);  // one session per connection
                return out;
            }
            if (req.flags != 0) {
                put_status(out, hdr, EINVAL);
                return out;
            }
            auto reply = proto::make_message<proto::hello_reply>(
                proto::reply_opcode(proto::opcode::hello), hdr.request_id);
            fill_hello(reply, *device.vnic, device.host_name, device.tenant_mtu);
            if (device.resources != nullptr) {
                clamp_to_quota(reply.lim, device.resources->quota());  // as changed live
            }
            reply.client_id = s.client_id;
            put(out, reply);
            out.with_async_channel = true;
            s.hello_done = true;
            return out;
        }
        case proto::opcode::query: {
            proto::query_request req;
            proto::decode(message, req);
            if (!s.hello_done) {
                put_status(out, hdr, EPROTO);  // HELLO first: it is the version handshake
                return out;
            }
            if (req.port_num != 1 || req.flags != 0) {
                put_status(out, hdr, EINVAL);
                return out;
            }
            auto reply = proto::make_message<proto::query_reply>(
                proto::reply_opcode(proto::opcode::query), hdr.request_id);
            fill_query(reply, *device.vnic, device.tenant_mtu);
            if (device.resources != nullptr) {
                clamp_to_quota(reply.device.lim, device.resources->quota());
                reply.device.max_mw = clamp_max_mw(reply.device.max_mw, device.resources->quota());
            }
            put(out, reply);
            return out;
        }
        default:
            break;
    }

    // Resource verbs: after HELLO, on a device that has resources.
    if (!s.hello_done) {
        put_status(out, hdr, EPROTO);
        return out;
    }
    if (device.resources == nullptr) {
        put_status(out, hdr, EOPNOTSUPP);
        return out;
    }
    vnic_resources& res = *device.resources;
    switch (static_cast<proto::opcode>(hdr.opcode)) {
        case proto::opcode::alloc_pd: {
            proto::alloc_pd_request req;
            proto::decode(message, req);
            if (req.flags != 0 || req.reserved != 0) {
                put_status(out, hdr, EINVAL);
                return out;
            }
            auto reply = proto::make_message<proto::alloc_pd_reply>(
                proto::reply_opcode(proto::opcode::alloc_pd), hdr.request_id);
            if (const int error = res.alloc_pd(s.client_id, reply.pd_handle); error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            put(out, reply);
            return out;
        }
        case proto::opcode::alloc_mw: {
            proto::alloc_mw_request req;
            proto::decode(message, req);
            auto reply = proto::make_message<proto::alloc_mw_reply>(
                proto::reply_opcode(proto::opcode::alloc_mw), hdr.request_id);
            if (const int error =
                    res.alloc_mw(s.client_id, req.pd_handle, req.type, reply.mw_handle);
                error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            put(out, reply);
            return out;
        }
        case proto::opcode::dealloc_pd:
        case proto::opcode::dereg_mr:
        case proto::opcode::dealloc_mw:
        case proto::opcode::destroy_cq: {
            proto::destroy_request req;
            proto::decode(message, req);
            int error = EINVAL;
            if (req.flags == 0) {
                switch (static_cast<proto::opcode>(hdr.opcode)) {
                    case proto::opcode::dealloc_pd:
                        error = res.dealloc_pd(s.client_id, req.handle);
                        break;
                    case proto::opcode::dereg_mr:
                        error = res.dereg_mr(s.client_id, req.handle);
                        break;
                    case proto::opcode::dealloc_mw:
                        error = res.dealloc_mw(s.client_id, req.handle);
                        break;
                    default:
                        error = res.destroy_cq(s.client_id, req.handle);
                        break;
                }
            }
            put_status(out, hdr, error);
            return out;
        }
        case proto::opcode::reg_mr: {
            proto::reg_mr_request req;
            proto::decode(message, req);
            const int memfd = single_fd(fds);
            if (memfd < 0) {
                put_status(out, hdr, EBADF);  // the region's memfd must come with it, alone
                return out;
            }
            auto reply = proto::make_message<proto::reg_mr_reply>(
                proto::reply_opcode(proto::opcode::reg_mr), hdr.request_id);
            uint32_t key = 0;
            if (const int error = res.reg_mr(s.client_id, req, memfd, key); error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            reply.mr_handle = key;
            reply.lkey = key;
            reply.rkey = key;
            put(out, reply);
            return out;
        }
        case proto::opcode::rereg_mr: {
            proto::rereg_mr_request req;
            proto::decode(message, req);
            const int memfd = single_fd(fds);
            if (memfd < 0) {
                put_status(out, hdr, EBADF);  // the region's memfd must come with it, alone
                return out;
            }
            if (const int error = res.rereg_mr(s.client_id, req, memfd); error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            auto reply = proto::make_message<proto::reg_mr_reply>(
                proto::reply_opcode(proto::opcode::rereg_mr), hdr.request_id);
            reply.mr_handle = req.mr_handle;
            reply.lkey = req.mr_handle;
            reply.rkey = req.mr_handle;
            put(out, reply);
            return out;
        }
        case proto::opcode::create_cq: {
            proto::create_cq_request req;
            proto::decode(message, req);
            const bool with_channel = (req.flags & proto::cq_with_channel) != 0;
            if (fds.size() != (with_channel ? 1u : 0u)) {
                put_status(out, hdr, EBADF);
                return out;
            }
            int channel_fd = with_channel ? fds[0] : -1;
            cq_created created;
            if (const int error = res.create_cq(s.client_id, req, channel_fd, created);
                error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            if (with_channel) {
                fds[0] = -1;  // the CQ keeps it
            }
            auto reply = proto::make_message<proto::create_cq_reply>(
                proto::reply_opcode(proto::opcode::create_cq), hdr.request_id);
            reply.cq_handle = created.handle;
            reply.capacity = created.capacity;
            reply.ring_bytes = created.ring_bytes;
            put(out, reply);
            out.reply_fd = created.ring_fd;
            return out;
        }
        case proto::opcode::resize_cq: {
            proto::resize_cq_request req;
            proto::decode(message, req);
            if (req.flags != 0 || req.reserved != 0) {
                put_status(out, hdr, EINVAL);
                return out;
            }
            cq_created resized;
            uint32_t moved = 0;
            if (const int error =
                    res.resize_cq(s.client_id, req.cq_handle, req.cqe, resized, moved);
                error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            auto reply = proto::make_message<proto::resize_cq_reply>(
                proto::reply_opcode(proto::opcode::resize_cq), hdr.request_id);
            reply.capacity = resized.capacity;
            reply.outstanding = moved;
            reply.ring_bytes = resized.ring_bytes;
            put(out, reply);
            out.reply_fd = resized.ring_fd;
            return out;
        }
        case proto::opcode::create_qp: {
            proto::create_qp_request req;
            proto::decode(message, req);
            qp_created created;
            if (const int error = res.create_qp(s.client_id, req, created); error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            auto reply = proto::make_message<proto::create_qp_reply>(
                proto::reply_opcode(proto::opcode::create_qp), hdr.request_id);
            reply.qp_handle = created.handle;
            reply.qp_num = created.handle;
            reply.sq_capacity = created.sq_capacity;
            reply.rq_capacity = created.rq_capacity;
            reply.max_send_sge = created.max_send_sge;
            reply.max_recv_sge = created.max_recv_sge;
            reply.max_inline_data = created.max_inline;
            reply.ring_bytes = created.ring_bytes;
            put(out, reply);
            out.reply_fd = created.ring_fd;
            out.reply_fd2 = created.doorbell_fd;
            return out;
        }
        case proto::opcode::modify_qp: {
            proto::modify_qp_request req;
            proto::decode(message, req);
            put_status(out, hdr,
                       res.modify_qp(s.client_id, req.qp_handle, req.attr, req.attr_mask));
            return out;
        }
        case proto::opcode::query_qp: {
            proto::query_qp_request req;
            proto::decode(message, req);
            auto reply = proto::make_message<proto::query_qp_reply>(
                proto::reply_opcode(proto::opcode::query_qp), hdr.request_id);
            if (const int error = res.query_qp(s.client_id, req.qp_handle, reply); error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            put(out, reply);
            return out;
        }
        case proto::opcode::destroy_qp: {
            proto::destroy_request req;
            proto::decode(message, req);
            put_status(out, hdr, req.flags != 0 ? EINVAL : res.destroy_qp(s.client_id, req.handle));
            return out;
        }
        case proto::opcode::create_srq: {
            proto::create_srq_request req;
            proto::decode(message, req);
            srq_created created;
            if (const int error = res.create_srq(s.client_id, req, created); error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            auto reply = proto::make_message<proto::create_srq_reply>(
                proto::reply_opcode(proto::opcode::create_srq), hdr.request_id);
            reply.srq_handle = created.handle;
            reply.capacity = created.capacity;
            reply.max_sge = created.max_sge;
            reply.ring_bytes = created.ring_bytes;
            put(out, reply);
            out.reply_fd = created.ring_fd;
            return out;
        }
        case proto::opcode::modify_srq: {
            proto::modify_srq_request req;
            proto::decode(message, req);
            put_status(out, hdr, res.modify_srq(s.client_id, req));
            return out;
        }
        case proto::opcode::query_srq: {
            proto::query_srq_request req;
            proto::decode(message, req);
            auto reply = proto::make_message<proto::query_srq_reply>(
                proto::reply_opcode(proto::opcode::query_srq), hdr.request_id);
            const int error =
                req.flags != 0 ? EINVAL : res.query_srq(s.client_id, req.srq_handle, reply);
            if (error != 0) {
                put_status(out, hdr, error);
                return out;
            }
            put(out, reply);
            return out;
        }
        case proto::opcode::destroy_srq: {
            proto::destroy_request req;
            proto::decode(message, req);
            put_status(out, hdr,
                       req.flags != 0 ? EINVAL : res.destroy_srq(s.client_id, req.handle));
            return out;
        }
        default:
            // check_request only lets served opcodes through; keep the switch honest anyway.
            put_status(out, hdr, EOPNOTSUPP);
            return out;
    }
}

}  // namespace jakiro::verbs
