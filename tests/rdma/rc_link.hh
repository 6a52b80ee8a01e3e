#pragma once

// One RC (or UC) connection over plain libibverbs: the device (context, PD, port, GID), registered
// memory, and one QP with its CQs brought through INIT → RTR → RTS with the peer's details.
// Failures throw test_error with the verb and errno.

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace jakiro::rdma_test {

struct link_options {
    std::string device;  // empty: the first device
    uint8_t ib_port = 1;
    int gid_index = 0;    // RoCE needs a GID; index 0 is the vNIC's RoCE v2 address on Jakiro
    bool events = false;  // wait for completions on a completion channel instead of polling
    uint32_t send_depth = 64;
    uint32_t recv_depth = 64;
    uint32_t send_sge = 4;
    uint32_t recv_sge = 1;
    uint32_t inline_bytes = 0;
    // RTS attributes the brief and perftest use: 4.096 µs × 2^14 ≈ 67 ms before a retry, up to
    // 7 retries, RNR retries forever.
    uint8_t timeout = 14;
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
    uint8_t min_rnr_timer = 12;  // 0.64 ms
    // IBV_QPT_UC: no READ or atomics, no ACKs; RTR/RTS take only the attributes UC has.
    ibv_qp_type qp_type = IBV_QPT_RC;
    ibv_srq* srq = nullptr;  // receives come from this SRQ instead of the QP's own queue
    int access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;  // qp_access_flags at INIT
    // Non-zero: the QP is made with ibv_create_qp_ex and these IBV_QP_EX_WITH_* operations, so
    // that ibv_qp_to_qp_ex gives the ibv_wr_* API for it.
    uint64_t send_ops_flags = 0;
};

// What the peer needs to reach a QP, sent as one line: "QP qpn psn lid mtu gid".
struct qp_info {
    uint32_t qpn = 0;
    uint32_t psn = 0;
    uint16_t lid = 0;
    int mtu = 0;  // enum ibv_mtu
    ibv_gid gid{};
    std::string to_line() const;
    static qp_info from_words(const std::vector<std::string>& words);  // words[0] == "QP"
};

class device {
  public:
    explicit device(const link_options& options);
    ~device();
    device(const device&) = delete;
    device& operator=(const device&) = delete;

    ibv_context* context = nullptr;
    ibv_pd* pd = nullptr;
    ibv_device_attr attr{};
    ibv_port_attr port{};
    ibv_gid gid{};
    std::string name;
    // The IPv4 address mapped in a GID (::ffff:a.b.c.d), or "" if it maps none.
    static std::string mapped_ipv4(const ibv_gid& gid);
};

// Page-aligned private anonymous memory (which any verbs provider can register), registered.
class region {
  public:
    region(std::size_t size, int access);
    ~region();
    region(const region&) = delete;
    region& operator=(const region&) = delete;

    uint8_t* data() const { return _data; }
    std::size_t size() const { return _size; }
    uint64_t addr() const { return reinterpret_cast<uint64_t>(_data); }
    uint32_t lkey() const { return _mr->lkey; }
    uint32_t rkey() const { return _mr->rkey; }
    ibv_mr* mr() const { return _mr; }
    // Registers the memory (after filling it, if the caller wants it filled first).
    void register_with(device& dev);

  private:
    uint8_t* _data = nullptr;
    std::size_t _size = 0;
    int _access = 0;
    ibv_mr* _mr = nullptr;
};

class rc_link {
  public:
    rc_link(device& dev, const link_options& options, uint32_t psn_seed);
    ~rc_link();
    rc_link(const rc_link&) = delete;
    rc_link& operator=(const rc_link&) = delete;

    qp_info local_info() const;
    // INIT → RTR → RTS towards `remote`.
    void connect(const qp_info& remote);
    uint32_t max_inline() const { return _max_inline; }
    // The QP's state as ibv_query_qp reports it ("RTS", "ERR", …) or the query's error.
    std::string state_text();

    // Polls `cq` until it yields `n` completions or `until` passes; returns what arrived.
    std::vector<ibv_wc> poll(ibv_cq* cq, std::size_t n,
                             std::chrono::steady_clock::time_point until);

    ibv_qp* qp = nullptr;
    ibv_cq* send_cq = nullptr;
    ibv_cq* recv_cq = nullptr;

  private:
    device& _dev;
    link_options _options;
    ibv_comp_channel* _channel = nullptr;
    uint32_t _psn = 0;
    uint32_t _max_inline = 0;
    int _mtu = 0;
};

const char* wc_opcode_name(int opcode);
// "wr_id 5 opcode RDMA_WRITE status remote access error (10) vendor_err 0x0 byte_len 0 …"
std::string describe(const ibv_wc& wc);

}  // namespace jakiro::rdma_test
