// The vNIC's rdma_cm agent (rnic/rdmacm/cm_agent.hh) on the endpoint's thread: its clients'
// rdma_cm commands relayed to it (MIGRATE_ID with its proof of the source channel), its MADs
// out through QP1 (the engine's gsi_port) or straight back to itself, the MADs QP1 received
// for the vNIC, and its timers.

#include "rnic/verbs/vnic_endpoint.hh"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "rnic/engine.hh"
#include "rnic/verbs/vnic_endpoint_parts.hh"
#include "verbs_abi/cm_protocol.hh"

namespace jakiro::verbs {

namespace {

using vnic_endpoint_parts::cm_limits_of;
using vnic_endpoint_parts::send_with_fd;

// Replies to ourselves may queue more: this many rounds per turn, the rest on the next.
constexpr int local_mad_rounds = 8;

}  // namespace

void vnic_endpoint::make_cm_agent(std::function<int(uint32_t)> admit,
                                  std::function<int(const rnic::ipv6_address&)> admit_ipv6) {
    const vnic_identity& v = _spec.identity;
    rdmacm::agent_identity self;
    self.slot = v.slot;
    self.ip_be = htonl(v.ip);
    self.ip6 = v.ip6;
    self.node_guid_be = htobe64(node_guid_from_mac(v.mac));
    const uint32_t mtu = path_mtu_for(_settings.tenant_mtu);
    self.path_mtu = mtu >= 4096 ? 5 : mtu >= 2048 ? 4 : mtu >= 1024 ? 3 : mtu >= 512 ? 2 : 1;
    rnic::engine* engine = _engine;
    const uint16_t slot = v.slot;
    const auto mac = v.mac;
    const uint32_t ip_be = self.ip_be;
    const rnic::ipv6_address ip6 = self.ip6;
    auto send = [this, engine, slot, mac, ip_be, ip6](const rdmacm::gid& dst,
                                                      const rdmacm::mad_buffer& mad) {
        const bool ipv4 = rdmacm::is_ipv4_gid(dst);
        if (dst == rdmacm::ipv4_gid(ip_be) || (!ipv4 && dst == ip6)) {
            // To ourselves (a process dialling its own vNIC): no wire involved.
            _local_mads.push_back({dst, mad});
            return;
        }
        rnic::gsi_datagram d;
        d.vnic = slot;
        d.local_mac = mac;
        d.local_ip_be = ip_be;
        if (ipv4) {
            std::memcpy(&d.remote_ip_be, dst.data() + 12, 4);
        } else {
            d.remote_ip6 = dst;
            d.local_ip6 = ip6;
        }
        d.mad = mad;
        if (engine->gsi().push_tx(d)) {
            engine->wake();
        }
    };
    rdmacm::cm_agent::admission admission;
    if (admit) {
        admission = [admit = std::move(admit),
                     admit_ipv6 = std::move(admit_ipv6)](const rdmacm::gid& remote) {
            if (rdmacm::is_ipv4_gid(remote)) {
                uint32_t remote_ip_be = 0;
                std::memcpy(&remote_ip_be, remote.data() + 12, 4);
                return admit(remote_ip_be);
            }
            return admit_ipv6 ? admit_ipv6(remote) : ENETUNREACH;
        };
    }
    _cm = std::make_unique<rdmacm::cm_agent>(self, std::move(send), std::move(admission),
                                             cm_limits_of(v.quota));
}

uint64_t vnic_endpoint::channel_held_by(std::span<const int> fds) const {
    uint64_t cookie = 0;
    socklen_t len = sizeof(cookie);
    if (fds.size() != 1 || getsockopt(fds[0], SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0 ||
        len != sizeof(cookie) || cookie == 0) {
        return 0;
    }
    for (const auto& other : _clients) {
        if (other.cm_channel_cookie == cookie) {
            return other.s.client_id;
        }
    }
    return 0;
}

bool vnic_endpoint::serve_cm(client& c, std::span<const std::byte> message, bool truncated,
                             std::span<const int> fds) {
    cm_proto::header hdr;
    std::memcpy(&hdr, message.data(), sizeof(hdr));
    std::array<std::byte, cm_proto::max_message_size> reply{};
    cm_proto::ucma_reply r{};
    r.r.hdr = hdr;
    r.r.hdr.opcode = static_cast<uint16_t>(hdr.opcode | cm_proto::reply_flag);
    std::size_t reply_size = sizeof(cm_proto::reply_header);
    int passed = -1;
    auto fail = [&](int error) {
        _counters.bad_requests.fetch_add(1, std::memory_order_relaxed);
        r.r.status = error;
        reply_size = sizeof(cm_proto::reply_header);
    };
    rdmacm::cm_agent* cm = _cm.get();
    if (hdr.version != cm_proto::version) {
        fail(EPROTONOSUPPORT);
    } else if (truncated || message.size() > cm_proto::max_message_size) {
        fail(EMSGSIZE);
    } else if (hdr.length != message.size()) {
        fail(EBADMSG);
    } else if (cm == nullptr) {
        fail(EOPNOTSUPP);  // no engine: no QP1 to speak CM through
    } else if (hdr.opcode == static_cast<uint16_t>(cm_proto::opcode::open_channel)) {
        int pair[2];
        if (message.size() != sizeof(cm_proto::header)) {
            fail(EBADMSG);
        } else if (c.cm_event_fd >= 0) {
            fail(EBUSY);  // one channel per connection
        } else if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
            fail(errno);
        } else {
            fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK);
            // The tenant's end is the channel: whoever shows it later (MIGRATE_ID) holds it.
            uint64_t cookie = 0;
            socklen_t len = sizeof(cookie);
            if (getsockopt(pair[1], SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0 ||
                !cm->open_channel(c.s.client_id, pair[0])) {
                close(pair[0]);
                close(pair[1]);
                fail(EMFILE);
            } else {
                c.cm_event_fd = pair[0];
                c.cm_channel_cookie = cookie;
                passed = pair[1];
                cm_proto::open_channel_reply o{};
                o.r = r.r;
                std::memcpy(reply.data(), &o, sizeof(o));
                reply_size = sizeof(o);
            }
        }
    } else if (hdr.opcode == static_cast<uint16_t>(cm_proto::opcode::ucma)) {
        cm_proto::ucma_request q{};
        if (message.size() < sizeof(q)) {
            fail(EBADMSG);
        } else {
            std::memcpy(&q, message.data(), sizeof(q));
            const auto bytes = std::span<const uint8_t>(
                reinterpret_cast<const uint8_t*>(message.data()), message.size());
            if (q.command_bytes > cm_proto::max_command_bytes ||
                q.option_bytes > cm_proto::max_option_bytes ||
                sizeof(q) + q.command_bytes + q.option_bytes != message.size()) {
                fail(EBADMSG);
            } else if (!cm->has_channel(c.s.client_id)) {
                fail(EPROTO);  // open_channel first
            } else {
                std::vector<uint8_t> response;
                const int rc =
                    cm->command(c.s.client_id, bytes.subspan(sizeof(q), q.command_bytes),
                                bytes.subspan(sizeof(q) + q.command_bytes, q.option_bytes),
                                response, channel_held_by(fds));
                if (rc != 0 || sizeof(r) + response.size() > reply.size()) {
                    fail(rc != 0 ? rc : EMSGSIZE);
                } else {
                    r.response_bytes = static_cast<uint32_t>(response.size());
                    reply_size = sizeof(r) + response.size();
                    if (!response.empty()) {
                        std::memcpy(reply.data() + sizeof(r), response.data(), response.size());
                    }
                }
            }
        }
    } else {
        fail(EOPNOTSUPP);
    }
    if (passed < 0) {
        // Everything but a successful open_channel (already in place) replies with `r`: the
        // reply header alone on failure, the ucma response after it on success.
        r.r.hdr.length = static_cast<uint32_t>(reply_size);
        std::memcpy(reply.data(), &r, std::min(reply_size, sizeof(r)));
    } else {
        cm_proto::open_channel_reply o;
        std::memcpy(&o, reply.data(), sizeof(o));
        o.r.hdr.length = sizeof(o);
        std::memcpy(reply.data(), &o, sizeof(o));
    }
    publish();  // before the reply: what a client was answered, the report says already
    const bool sent = send_with_fd(c.fd, reply.data(), reply_size, passed);
    if (passed >= 0) {
        close(passed);
    }
    return sent;
}

void vnic_endpoint::serve_gsi() {
    if (_cm == nullptr) {
        return;
    }
    for (const auto& d : _engine->gsi().take_rx(_spec.identity.slot)) {
        _cm->on_mad(d.over_ipv6() ? d.remote_ip6 : rdmacm::ipv4_gid(d.remote_ip_be), d.mad);
    }
    for (int round = 0; round < local_mad_rounds && !_local_mads.empty(); ++round) {
        auto local = std::move(_local_mads);
        _local_mads.clear();
        for (const auto& m : local) {
            _cm->on_mad(m.from, m.mad);
        }
    }
    const auto now = std::chrono::steady_clock::now();
    if (_cm->next_deadline() <= now) {
        _cm->run_timers(now);
    }
}

}  // namespace jakiro::verbs
