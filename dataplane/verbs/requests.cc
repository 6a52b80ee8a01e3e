#include "requests.hh"

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

}  // namespace

outcome handle_request(std::span<const std::byte> message, bool truncated, session& s,
                       const device_context& device) {
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
            put(out, reply);
            return out;
        }
        default:
            // check_request only lets served opcodes through; keep the switch honest anyway.
            put_status(out, hdr, EOPNOTSUPP);
            return out;
    }
}

}  // namespace jakiro::verbs
