#include "tests/rdma/rc_link.hh"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "tests/rdma/deadline.hh"
#include "tests/rdma/tcp_line.hh"

namespace jakiro::rdma_test {

namespace {

// Spin this many empty polls before yielding, then sleep between polls: on a shared machine a
// spinning test program would take the core the software RNIC needs.
constexpr int spins_before_yield = 64;
constexpr int yields_before_sleep = 256;
constexpr auto idle_sleep = std::chrono::microseconds(50);

int mtu_bytes(int mtu) {
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0;
}

[[noreturn]] void verb_failed(const std::string& verb) {
    throw test_error(errno_text(verb));
}

// Verbs that return an errno value (not -1 and errno).
void check_rc(int rc, const std::string& verb) {
    if (rc != 0) {
        errno = rc > 0 ? rc : (errno != 0 ? errno : EINVAL);
        verb_failed(verb);
    }
}

}  // namespace

// ---------------------------------------------------------------- qp_info

std::string qp_info::to_line() const {
    char gid_hex[33];
    for (int i = 0; i < 16; ++i) {
        std::snprintf(gid_hex + 2 * i, 3, "%02x", gid.raw[i]);
    }
    char line[128];
    std::snprintf(line, sizeof(line), "QP %u %u %u %d %s", qpn, psn, lid, mtu, gid_hex);
    return line;
}

qp_info qp_info::from_words(const std::vector<std::string>& words) {
    if (words.size() != 6 || words[0] != "QP" || words[5].size() != 32) {
        throw test_error("malformed QP line from the peer");
    }
    qp_info info;
    info.qpn = static_cast<uint32_t>(parse_u64(words[1]));
    info.psn = static_cast<uint32_t>(parse_u64(words[2]));
    info.lid = static_cast<uint16_t>(parse_u64(words[3]));
    info.mtu = static_cast<int>(parse_u64(words[4]));
    for (int i = 0; i < 16; ++i) {
        info.gid.raw[i] = static_cast<uint8_t>(parse_u64(words[5].substr(2 * i, 2), 16));
    }
    return info;
}

// ---------------------------------------------------------------- device

device::device(const link_options& options) {
    set_phase("opening the RDMA device");
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (list == nullptr) {
        verb_failed(
            "ibv_get_device_list (no RDMA devices here? run the program with "
            "jakiro-run in a tenant namespace)");
    }
    ibv_device* chosen = nullptr;
    for (int i = 0; i < count && chosen == nullptr; ++i) {
        if (options.device.empty() || options.device == ibv_get_device_name(list[i])) {
            chosen = list[i];
        }
    }
    if (chosen == nullptr) {
        ibv_free_device_list(list);
        throw test_error(options.device.empty()
                             ? "no RDMA device found (run under jakiro-run in a tenant namespace)"
                             : "no RDMA device named " + options.device);
    }
    name = ibv_get_device_name(chosen);
    context = ibv_open_device(chosen);
    const int saved = errno;
    ibv_free_device_list(list);
    if (context == nullptr) {
        errno = saved;
        verb_failed("ibv_open_device " + name);
    }
    check_rc(ibv_query_device(context, &attr), "ibv_query_device");
    check_rc(ibv_query_port(context, options.ib_port, &port), "ibv_query_port");
    if (port.state != IBV_PORT_ACTIVE) {
        throw test_error(name + " port " + std::to_string(options.ib_port) + " is not active");
    }
    check_rc(ibv_query_gid(context, options.ib_port, options.gid_index, &gid),
             "ibv_query_gid index " + std::to_string(options.gid_index));
    pd = ibv_alloc_pd(context);
    if (pd == nullptr) {
        verb_failed("ibv_alloc_pd");
    }
}

device::~device() {
    report_unwinding_error();
    set_phase("releasing the PD and closing the device");
    if (pd != nullptr) {
        ibv_dealloc_pd(pd);
    }
    if (context != nullptr) {
        ibv_close_device(context);
    }
}

std::string device::mapped_ipv4(const ibv_gid& gid) {
    static constexpr uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(gid.raw, prefix, sizeof(prefix)) != 0) {
        return "";
    }
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, gid.raw + 12, text, sizeof(text));
    return text;
}

// ---------------------------------------------------------------- region

region::region(std::size_t size, int access) : _size(size), _access(access) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        throw test_error(errno_text("mmap " + std::to_string(size) + " bytes"));
    }
    _data = static_cast<uint8_t*>(p);
}

void region::register_with(device& dev) {
    _mr = ibv_reg_mr(dev.pd, _data, _size, _access);
    if (_mr == nullptr) {
        verb_failed("ibv_reg_mr of " + std::to_string(_size) + " bytes");
    }
}

region::~region() {
    report_unwinding_error();
    set_phase("deregistering memory (ibv_dereg_mr)");
    if (_mr != nullptr) {
        ibv_dereg_mr(_mr);
    }
    munmap(_data, _size);
}

// ---------------------------------------------------------------- rc_link

rc_link::rc_link(device& dev, const link_options& options, uint32_t psn_seed)
    : _dev(dev), _options(options), _psn(psn_seed & 0xffffff) {
    set_phase("creating the QP");
    if (options.events) {
        _channel = ibv_create_comp_channel(dev.context);
        if (_channel == nullptr) {
            verb_failed("ibv_create_comp_channel");
        }
    }
    send_cq =
        ibv_create_cq(dev.context, static_cast<int>(options.send_depth), nullptr, _channel, 0);
    if (send_cq == nullptr) {
        verb_failed("ibv_create_cq (send)");
    }
    recv_cq =
        ibv_create_cq(dev.context, static_cast<int>(options.recv_depth), nullptr, _channel, 0);
    if (recv_cq == nullptr) {
        verb_failed("ibv_create_cq (receive)");
    }
    ibv_qp_init_attr init{};
    init.send_cq = send_cq;
    init.recv_cq = recv_cq;
    init.qp_type = options.qp_type;
    init.srq = options.srq;
    init.sq_sig_all = 0;
    init.cap.max_send_wr = options.send_depth;
    init.cap.max_recv_wr = options.recv_depth;
    init.cap.max_send_sge = options.send_sge;
    init.cap.max_recv_sge = options.recv_sge;
    init.cap.max_inline_data = options.inline_bytes;
    if (options.send_ops_flags != 0) {
        ibv_qp_init_attr_ex ex{};
        ex.send_cq = init.send_cq;
        ex.recv_cq = init.recv_cq;
        ex.srq = init.srq;
        ex.qp_type = init.qp_type;
        ex.cap = init.cap;
        ex.pd = dev.pd;
        ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        ex.send_ops_flags = options.send_ops_flags;
        qp = ibv_create_qp_ex(dev.context, &ex);
        if (qp == nullptr) {
            verb_failed("ibv_create_qp_ex");
        }
        init.cap = ex.cap;
    } else {
        qp = ibv_create_qp(dev.pd, &init);
        if (qp == nullptr) {
            verb_failed(options.qp_type == IBV_QPT_UC ? "ibv_create_qp (UC)"
                                                      : "ibv_create_qp (RC)");
        }
    }
    _max_inline = init.cap.max_inline_data;

    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = options.ib_port;
    attr.qp_access_flags =
        options.qp_type == IBV_QPT_UC ? (options.access & IBV_ACCESS_REMOTE_WRITE) : options.access;
    check_rc(ibv_modify_qp(qp, &attr,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
             "ibv_modify_qp to INIT");
    _mtu = dev.port.active_mtu;
}

rc_link::~rc_link() {
    report_unwinding_error();
    set_phase("destroying the QP, its CQs and completion channel");
    if (qp != nullptr) {
        ibv_destroy_qp(qp);
    }
    if (send_cq != nullptr) {
        ibv_destroy_cq(send_cq);
    }
    if (recv_cq != nullptr) {
        ibv_destroy_cq(recv_cq);
    }
    if (_channel != nullptr) {
        ibv_destroy_comp_channel(_channel);
    }
}

qp_info rc_link::local_info() const {
    qp_info info;
    info.qpn = qp->qp_num;
    info.psn = _psn;
    info.lid = _dev.port.lid;
    info.mtu = _mtu;
    info.gid = _dev.gid;
    return info;
}

void rc_link::connect(const qp_info& remote) {
    set_phase("connecting the QP (RTR, RTS)");
    const auto path_mtu = static_cast<ibv_mtu>(std::min(_mtu, remote.mtu));
    if (mtu_bytes(path_mtu) == 0) {
        throw test_error("bad path MTU " + std::to_string(path_mtu));
    }
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = path_mtu;
    attr.dest_qp_num = remote.qpn;
    attr.rq_psn = remote.psn;
    attr.max_dest_rd_atomic = static_cast<uint8_t>(std::clamp(_dev.attr.max_qp_rd_atom, 1, 16));
    attr.min_rnr_timer = _options.min_rnr_timer;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.dlid = remote.lid;
    attr.ah_attr.sl = 0;
    attr.ah_attr.port_num = _options.ib_port;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(_options.gid_index);
    attr.ah_attr.grh.hop_limit = 64;
    const bool uc = _options.qp_type == IBV_QPT_UC;
    check_rc(
        ibv_modify_qp(qp, &attr,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          (uc ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)),
        "ibv_modify_qp to RTR");
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = _psn;
    attr.timeout = _options.timeout;
    attr.retry_cnt = _options.retry_cnt;
    attr.rnr_retry = _options.rnr_retry;
    attr.max_rd_atomic = static_cast<uint8_t>(std::clamp(_dev.attr.max_qp_init_rd_atom, 1, 16));
    check_rc(ibv_modify_qp(qp, &attr,
                           IBV_QP_STATE | IBV_QP_SQ_PSN |
                               (uc ? 0
                                   : IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                         IBV_QP_MAX_QP_RD_ATOMIC)),
             "ibv_modify_qp to RTS");
}

std::string rc_link::state_text() {
    static const char* names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    const int rc = ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
    if (rc != 0) {
        errno = rc > 0 ? rc : errno;
        return errno_text("ibv_query_qp");
    }
    return attr.qp_state <= IBV_QPS_ERR ? names[attr.qp_state] : "?";
}

std::vector<ibv_wc> rc_link::poll(ibv_cq* cq, std::size_t n,
                                  std::chrono::steady_clock::time_point until) {
    std::vector<ibv_wc> got;
    got.reserve(n);
    int idle = 0;
    while (got.size() < n) {
        ibv_wc wc[16];
        const int want = static_cast<int>(std::min<std::size_t>(16, n - got.size()));
        const int k = ibv_poll_cq(cq, want, wc);
        if (k < 0) {
            throw test_error("ibv_poll_cq failed (" + std::to_string(k) + ")");
        }
        if (k > 0) {
            got.insert(got.end(), wc, wc + k);
            idle = 0;
            continue;
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= until) {
            break;
        }
        if (_channel != nullptr) {
            // Arm, then poll once more: a completion that arrived before arming raises no event.
            check_rc(ibv_req_notify_cq(cq, 0), "ibv_req_notify_cq");
            const int again = ibv_poll_cq(cq, want, wc);
            if (again > 0) {
                got.insert(got.end(), wc, wc + again);
                continue;
            }
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
            pollfd p{_channel->fd, POLLIN, 0};
            const int ready = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
            if (ready < 0 && errno != EINTR) {
                verb_failed("poll on the completion channel");
            }
            if (ready > 0) {
                ibv_cq* event_cq = nullptr;
                void* event_context = nullptr;
                if (ibv_get_cq_event(_channel, &event_cq, &event_context) != 0) {
                    verb_failed("ibv_get_cq_event");
                }
                ibv_ack_cq_events(event_cq, 1);
            }
            continue;
        }
        ++idle;
        if (idle > spins_before_yield + yields_before_sleep) {
            std::this_thread::sleep_for(idle_sleep);
        } else if (idle > spins_before_yield) {
            std::this_thread::yield();
        }
    }
    return got;
}

// ---------------------------------------------------------------- completions

const char* wc_opcode_name(int opcode) {
    switch (opcode) {
        case IBV_WC_SEND:
            return "SEND";
        case IBV_WC_RDMA_WRITE:
            return "RDMA_WRITE";
        case IBV_WC_RDMA_READ:
            return "RDMA_READ";
        case IBV_WC_COMP_SWAP:
            return "COMP_SWAP";
        case IBV_WC_FETCH_ADD:
            return "FETCH_ADD";
        case IBV_WC_BIND_MW:
            return "BIND_MW";
        case IBV_WC_LOCAL_INV:
            return "LOCAL_INV";
        case IBV_WC_RECV:
            return "RECV";
        case IBV_WC_RECV_RDMA_WITH_IMM:
            return "RECV_RDMA_WITH_IMM";
        default:
            return "?";
    }
}

std::string describe(const ibv_wc& wc) {
    char text[256];
    std::snprintf(text, sizeof(text),
                  "wr_id %llu opcode %s (%d) status \"%s\" (%d) vendor_err %#x byte_len %u "
                  "qp_num %#x wc_flags %#x imm %#x",
                  static_cast<unsigned long long>(wc.wr_id), wc_opcode_name(wc.opcode), wc.opcode,
                  ibv_wc_status_str(wc.status), wc.status, wc.vendor_err, wc.byte_len, wc.qp_num,
                  wc.wc_flags, ntohl(wc.imm_data));
    return text;
}

}  // namespace jakiro::rdma_test
