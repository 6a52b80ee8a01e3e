// libFuzzer target over the packet parser + security-group classifier: both pipelines of a
// host like h1 of the test bed (tables built from YAML with security groups, fake port ids, no
// devices), one NFT that lives across inputs (so flows accumulate, age and get evicted), and two
// policy generations the input switches between (so known flows are re-checked and revoked).
//
// The RoCE engine is in the loop too: t1 has an RC and a UC QP in RTS connected to 198.19.1.2
// (t2 on h2), an RC QP connected to t2's IPv6 address 2001:2::1:2 (GID index 1: RoCE v2 over
// IPv6) and a UD QP in RTS (Q_Key 0x11111111), with receive buffers posted, so RoCEv2 frames
// inside the wrapped copy reach the responders and requesters, behind an IPv4 header or an IPv6
// one (pipeline/roce_ipv6_ingress). Bit 7 makes them get that far: the BTH's destination QP
// becomes t1's QP of the packet's transport (RC, UC or UD; RC over IPv6: the IPv6 one) and the
// ICRC is recomputed, so the fuzzer explores the transports, not the CRC.
//
// Input layout:
//   byte 0   control: bits 0-1 tenant vNIC slot (3 = 0), bit 2 start with policy B instead of
//            A, bits 3-4 VNI of the wrapped copy (100, 200, 4242, 100), bit 5 wrapped copy
//            sent from 198.18.0.9 instead of h2, bit 6 burst mode, bit 7 aim RoCE at t1's QPs
//   rest     one frame; or, in burst mode, up to 128 frames, each a 2-byte big-endian word and
//            that many bytes: bits 0-13 the length, bit 14 "a new burst starts here", bit 15
//            "a new burst starts here and the other policy is in force from now on" (a live
//            change between two bursts). Bursts hold at most 32 frames.
// Each burst goes through process_tenant_burst (as the chosen vNIC's frames), through
// process_uplink_burst as it is (underlay frames), and through merge_burst (rte_gro) and
// process_uplink_burst again inside valid outer VXLAN headers (so GRO, the inner parser and
// the classifier see it). After each
// burst every queued mbuf is freed and the harness checks that no mbuf leaked and that the
// NFT's size is within its capacity; a violation aborts (a finding, like a crash). The NFT is
// emptied before every input, so each finding replays alone.

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_mbuf.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/config/config_loader.hh"
#include "dataplane/control/table_builder.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/vxlan.hh"
#include "dataplane/pipeline/egress.hh"
#include "dataplane/pipeline/ingress.hh"
#include "dataplane/rnic_glue/roce_port.hh"
#include "rnic/engine.hh"
#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/resources.hh"
#include "rnic/wire/icrc.hh"
#include "verbs_abi/qp_attr_wire.hh"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace {

using namespace jakiro;

constexpr uint16_t uplink = 0;
constexpr uint16_t port_count = 4;    // uplink + t1, t5, t3
constexpr unsigned max_frames = 128;  // per input: enough to fill the NFT below
constexpr unsigned max_burst = 32;
// Small on purpose: a long run fills it, so eviction runs too.
constexpr uint32_t nft_capacity = 64;
// The mbuf data room less the outer headers the wrapped copy needs.
constexpr uint32_t max_frame = RTE_MBUF_DEFAULT_DATAROOM - overlay::outer_header_bytes;

// h1 of the test bed, dual-stack (so tenant IPv6 reaches neighbour discovery and every IPv6
// check), with groups using every rule form: CIDR of either family and remote group, port ranges,
// icmp, rdma, any; a group without egress rules (implicit allow-all) and one with none at all.
constexpr const char* policy_a = R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - name: web
    vpc: blue
    ingress:
      - {proto: tcp, ports: 8080, from: 198.19.0.0/16}
      - {proto: udp, ports: 5000-5100, from_group: web}
      - {proto: rdma, from_group: web}
      - {proto: icmp, from: 198.19.1.0/24}
      - {proto: tcp, ports: 8080, from: "2001:2::/64"}
      - {proto: icmp, from: "2001:2::1:2/128"}
    egress:
      - {proto: tcp, to: 0.0.0.0/0}
      - {proto: udp, ports: 53, to: 198.19.1.2/32}
      - {proto: icmp, to: 198.19.1.0/24}
      - {proto: udp, ports: 53, to: "2001:2::1:2/128"}
  - {name: default, vpc: blue, ingress: [{proto: any, from_group: default}]}
  - {name: closed, vpc: red, ingress: []}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null1", security_groups: [web, default]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, ip6: 2001:2::1:3/64, port: "net_null2", security_groups: [web]}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null3", security_groups: [closed]}
peers:
  - {vpc: blue, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2, security_groups: [web]}
  - {vpc: red, ip: 198.19.1.2, host: 198.18.0.2}
  - {vpc: blue, ip: 198.19.1.9, host: 198.18.0.9, mac: "02:00:c6:13:01:09", security_groups: [default]}
)";

// The same host after a live change: rules removed and changed, t5 in default too and held to
// 8 flows (its others refused, counted; policy_a shares the table out equally, more than it
// holds, so it fills and each vNIC's own flows make room).
constexpr const char* policy_b = R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - name: web
    vpc: blue
    ingress:
      - {proto: udp, ports: 5050-5060, from_group: web}
      - {proto: rdma, from: "2001:2::/64"}
    egress:
      - {proto: udp, ports: 53, to: 198.19.1.2/32}
      - {proto: any, to: "::/0"}
  - {name: default, vpc: blue, ingress: [{proto: tcp, from_group: default}]}
  - {name: closed, vpc: red, ingress: [{proto: icmp, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null1", security_groups: [web]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, ip6: 2001:2::1:3/64, port: "net_null2", security_groups: [web, default], limits: {max_flows: 8}}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null3", security_groups: [closed]}
peers:
  - {vpc: blue, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2, security_groups: [default]}
  - {vpc: red, ip: 198.19.1.2, host: 198.18.0.2}
  - {vpc: blue, ip: 198.19.1.9, host: 198.18.0.9, mac: "02:00:c6:13:01:09", security_groups: [web]}
)";

rte_ether_addr mac_of(const uint8_t last) {
    return rte_ether_addr{{0x02, 0x00, 0xc6, 0x12, 0x00, last}};
}

rte_be32_t ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return rte_cpu_to_be_32(RTE_IPV4(a, b, c, d));
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "packet_fuzzer: %s\n", what);
    std::abort();
}

struct harness {
    rte_mempool* pool = nullptr;
    overlay::underlay_neighbors neighbors;
    std::unique_ptr<datapath_tables> tables[2];
    std::unique_ptr<worker_context> ctx = std::make_unique<worker_context>();
    rnic::engine engine{4, 16};
    std::unique_ptr<roce_port> rdma_port;
    std::unique_ptr<verbs::vnic_resources> res;
    // t1's QPs, one per transport (RC, UC, UD) and an RC one over IPv6: a fuzzed packet is
    // aimed at the one of its BTH opcode's transport and its IP version.
    struct fuzz_qp {
        uint8_t type = 0;  // verbs_proto::qp_type_wire
        uint32_t qpn = 0;
        verbs_proto::qp_ring_header* ring = nullptr;
        uint32_t recvs_posted = 0;
        bool over_ipv6 = false;
    };
    std::array<fuzz_qp, 4> qps{};
    uint32_t mr_key = 0;
    uint64_t now_ns = 1'000'000'000;

    // t1's RDMA side: a PD, a 64 KiB MR, CQs and one RC QP in RTS towards t2 (198.19.1.2).
    void init_rdma() {
        namespace proto = verbs_proto;
        constexpr uint64_t client = 1;
        verbs::vnic_quota quota;
        quota.max_qps = 8;
        res = std::make_unique<verbs::vnic_resources>(verbs::engine_limits(),
                                                      verbs::cq_error_sink{}, quota);
        verbs::qp_support support;
        support.engine = &engine;
        support.local.vnic = 0;
        support.local.mac = {0x02, 0x00, 0xc6, 0x13, 0x01, 0x01};
        support.local.ip_be = htonl(0xC6130101);
        support.local.ip6 = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1};  // 2001:2::1:1
        support.limits.gid_table_len = 2;  // GID 1: the IPv6 address
        res->enable_qps(support);
        uint32_t pd = 0;
        res->alloc_pd(client, pd);
        const int fd = memfd_create("fuzz-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, 65536) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
            fail("cannot make the MR memfd");
        }
        auto mr = proto::make_message<proto::reg_mr_request>(
            static_cast<uint16_t>(proto::opcode::reg_mr), 1);
        mr.pd_handle = pd;
        mr.access = proto::mr_access_all;
        mr.addr = mr.iova = 0x10000;
        mr.length = 65536;
        if (res->reg_mr(client, mr, fd, mr_key) != 0) {
            fail("reg_mr");
        }
        close(fd);
        auto cq = proto::make_message<proto::create_cq_request>(
            static_cast<uint16_t>(proto::opcode::create_cq), 1);
        cq.cqe = 65536;  // never overflows within a run of inputs that matter
        int no_channel = -1;
        verbs::cq_created scq, rcq;
        if (res->create_cq(client, cq, no_channel, scq) != 0 ||
            res->create_cq(client, cq, no_channel, rcq) != 0) {
            fail("create_cq");
        }
        close(scq.ring_fd);
        close(rcq.ring_fd);
        auto q = proto::make_message<proto::create_qp_request>(
            static_cast<uint16_t>(proto::opcode::create_qp), 1);
        q.pd_handle = pd;
        q.send_cq = scq.handle;
        q.recv_cq = rcq.handle;
        q.max_send_wr = q.max_recv_wr = 64;
        q.max_send_sge = q.max_recv_sge = 1;
        const uint8_t types[] = {proto::qpt_rc, proto::qpt_uc, proto::qpt_ud, proto::qpt_rc};
        for (std::size_t i = 0; i < qps.size(); ++i) {
            q.qp_type = types[i];
            qps[i].over_ipv6 = i == 3;
            verbs::qp_created made;
            if (res->create_qp(client, q, made) != 0) {
                fail("create_qp");
            }
            qps[i].type = types[i];
            qps[i].qpn = made.handle;
            qps[i].ring = static_cast<proto::qp_ring_header*>(mmap(
                nullptr, made.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, made.ring_fd, 0));
            close(made.ring_fd);
            close(made.doorbell_fd);
        }
        rdma_port = std::make_unique<roce_port>(*ctx);
        ctx->engine = &engine;
        ctx->rdma_port = rdma_port.get();
        connect_qp();
    }

    // RESET -> INIT -> RTR -> RTS: every input starts from a fresh connection (PSN 0), so a
    // finding replays alone and an input that broke the QP does not blind the next ones.
    void connect_qp() {
        for (const fuzz_qp& q : qps) {
            if (q.type == verbs_proto::qpt_ud) {
                ready_ud(q.qpn);
            } else {
                connect_qp(q.qpn, q.type == verbs_proto::qpt_rc, q.over_ipv6);
            }
        }
    }

    void ready_ud(uint32_t qpn) {
        constexpr uint64_t client = 1;
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_RESET;
        int e = res->modify_qp(client, qpn, verbs_proto::to_wire(a), IBV_QP_STATE);
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qkey = 0x11111111;  // ibv_ud_pingpong's, which the seeds carry
        e |= res->modify_qp(client, qpn, verbs_proto::to_wire(a),
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
        a = {};
        a.qp_state = IBV_QPS_RTR;
        e |= res->modify_qp(client, qpn, verbs_proto::to_wire(a), IBV_QP_STATE);
        a.qp_state = IBV_QPS_RTS;
        e |= res->modify_qp(client, qpn, verbs_proto::to_wire(a), IBV_QP_STATE | IBV_QP_SQ_PSN);
        if (e != 0) {
            fail("modify_qp (UD)");
        }
    }

    void connect_qp(uint32_t qpn, bool rc, bool over_ipv6) {
        constexpr uint64_t client = 1;
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_RESET;
        int e = res->modify_qp(client, qpn, verbs_proto::to_wire(a), IBV_QP_STATE);
        a = {};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        e |= res->modify_qp(client, qpn, verbs_proto::to_wire(a),
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = 0x777;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 1;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        if (over_ipv6) {
            // t2's IPv6 address, from t1's (GID index 1).
            const uint8_t t2[16] = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2};
            std::memcpy(a.ah_attr.grh.dgid.raw, t2, sizeof(t2));
            a.ah_attr.grh.sgid_index = 1;
        } else {
            a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
            const uint32_t t2 = htonl(0xC6130102);
            std::memcpy(a.ah_attr.grh.dgid.raw + 12, &t2, 4);
        }
        const int rc_rtr = rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0;
        e |= res->modify_qp(
            client, qpn, verbs_proto::to_wire(a),
            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | rc_rtr);
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 16;
        const int rc_rts =
            rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC : 0;
        e |= res->modify_qp(client, qpn, verbs_proto::to_wire(a),
                            IBV_QP_STATE | IBV_QP_SQ_PSN | rc_rts);
        if (e != 0) {
            fail("modify_qp");
        }
    }

    // Keeps the receive queue full, as a program re-posting its receives would.
    void post_receives() {
        namespace proto = verbs_proto;
        for (fuzz_qp& q : qps) {
            const uint32_t consumed = proto::load_retired_acquire(q.ring->rq_consumer);
            while (q.recvs_posted - consumed < q.ring->rq_capacity) {
                proto::recv_wqe& w = proto::rq_slots(
                    q.ring, q.ring->sq_capacity)[q.recvs_posted & (q.ring->rq_capacity - 1)];
                std::memset(&w, 0, sizeof(w));
                w.wr_id = q.recvs_posted;
                w.num_sge = 1;
                w.sg[0] = {0x10000 + (q.recvs_posted % 16) * 4096, 4096, mr_key};
                proto::publish_wqes(q.ring->rq_producer, ++q.recvs_posted);
            }
        }
    }

    // Bit 7: a UDP/4791 inner packet (behind IPv4 or IPv6) for t1 is pointed at t1's QP of its
    // transport and gets a valid ICRC.
    void aim_at_qp(rte_mbuf* m) {
        const uint32_t len = rte_pktmbuf_data_len(m);
        auto* f = rte_pktmbuf_mtod(m, uint8_t*);
        const bool v6 = len >= 14 && f[12] == 0x86 && f[13] == 0xDD;
        if (len < 14 + 20 + 8 + 12 + 4 || (!v6 && (f[12] != 0x08 || f[13] != 0x00))) {
            return;
        }
        uint8_t* ip = f + 14;
        uint32_t ihl = (ip[0] & 0x0F) * 4u;
        uint32_t ip_len = (uint32_t{ip[2]} << 8) | ip[3];
        uint8_t next = ip[9];
        if (v6) {
            ihl = 40;
            ip_len = 40 + ((uint32_t{ip[4]} << 8) | ip[5]);
            next = ip[6];
        }
        if (ihl < 20 || next != 17 || ip_len > len - 14 || ip_len < ihl + 8 + 12 + 4) {
            return;
        }
        uint8_t* bth = ip + ihl + 8;
        if (((uint32_t{ip[ihl + 2]} << 8) | ip[ihl + 3]) != 4791) {
            return;
        }
        // The QP of the opcode's transport (IB spec 9.2.1: its top three bits), over IPv6 the
        // RC QP connected by IPv6 for RC.
        const uint8_t transport = bth[0] >> 5;
        const uint32_t qpn = transport == 3   ? qps[2].qpn
                             : transport == 1 ? qps[1].qpn
                             : v6             ? qps[3].qpn
                                              : qps[0].qpn;
        bth[5] = static_cast<uint8_t>(qpn >> 16);
        bth[6] = static_cast<uint8_t>(qpn >> 8);
        bth[7] = static_cast<uint8_t>(qpn);
        if (const auto crc = rnic::compute_icrc(ip, ip_len - 4)) {
            rnic::store_icrc(ip + ip_len - 4, *crc);
        }
    }

    void build(int which, const char* yaml, uint32_t generation) {
        const auto loaded = load_host_config_text(yaml, which == 0 ? "a.yaml" : "b.yaml");
        if (!loaded.ok()) {
            fail(loaded.errors[0].to_string().c_str());
        }
        std::string error;
        const port_assignment ports{uplink, mac_of(1), {1, 2, 3}, {}};
        tables[which] = build_tables(loaded.config, ports, neighbors, generation, error);
        if (!tables[which]) {
            fail(error.c_str());
        }
    }

    void init() {
        pool =
            rte_pktmbuf_pool_create("fuzz", 2047, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
        if (pool == nullptr) {
            fail("cannot create the mbuf pool");
        }
        build(0, policy_a, 1);
        build(1, policy_b, 2);
        neighbors.learn(ipv4(198, 18, 0, 2), mac_of(2));  // 198.18.0.9 stays unresolved
        ctx->neighbors = &neighbors;
        ctx->pool = pool;
        std::string error;
        ctx->flows = secgroup::flow_table::create(nft_capacity, {}, rte_get_tsc_hz(), error);
        if (!ctx->flows) {
            fail(error.c_str());
        }
        init_rdma();
    }

    rte_mbuf* mbuf(const uint8_t* bytes, uint32_t len, uint32_t headroom_needed) {
        rte_mbuf* m = rte_pktmbuf_alloc(pool);
        if (m == nullptr) {
            fail("mbuf pool empty: an earlier input leaked");
        }
        char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(len));
        if (data == nullptr || rte_pktmbuf_headroom(m) < headroom_needed) {
            fail("frame does not fit an mbuf");
        }
        std::memcpy(data, bytes, len);
        return m;
    }

    // The frame inside outer headers that pass check_outer, from h2 (or from 198.18.0.9).
    rte_mbuf* wrapped(const uint8_t* bytes, uint32_t len, uint8_t control) {
        static constexpr uint32_t vnis[] = {100, 200, 4242, 100};
        rte_mbuf* m = mbuf(bytes, len, overlay::outer_header_bytes);
        if (control & 0x80) {
            aim_at_qp(m);
        }
        const bool from_h9 = control & 0x20;
        const overlay::tunnel_endpoints from{mac_of(from_h9 ? 9 : 2), tables[0]->underlay_mac,
                                             ipv4(198, 18, 0, from_h9 ? 9 : 2),
                                             tables[0]->underlay_ip};
        uint8_t tos = 0;
        if (len >= sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr)) {
            tos = bytes[sizeof(rte_ether_hdr) + 1];
        }
        if (!overlay::encapsulate(m, from, vnis[(control >> 3) & 3], tos, 50000)) {
            fail("no headroom for the outer headers");
        }
        return m;
    }

    void flush() {
        // What the engine owes (ACKs, NAKs, READ responses) goes out like everything else.
        rdma_port->use(tables[0].get());
        now_ns += 50'000;
        engine.poll(*rdma_port, now_ns);
        rdma_port->deliver_loopback(engine, now_ns);
        for (uint16_t port = 0; port < port_count; ++port) {
            const auto queued = ctx->tx.queued(port);
            rte_pktmbuf_free_bulk(const_cast<rte_mbuf**>(queued.data()),
                                  static_cast<unsigned>(queued.size()));
        }
        ctx->tx.discard_all();
        if (rte_mempool_in_use_count(pool) != 0) {
            fail("mbuf leak: a pipeline neither freed nor queued a packet");
        }
    }

    // One burst through the three feeds.
    void process(const datapath_tables& t, uint8_t control, const uint8_t* const* frames,
                 const uint32_t* lengths, unsigned n) {
        const uint16_t slot = (control & 3) == 3 ? 0 : control & 3;
        rdma_port->use(&t);
        rte_mbuf* burst[max_burst];
        for (unsigned i = 0; i < n; ++i) {
            burst[i] = mbuf(frames[i], lengths[i], 0);
        }
        process_tenant_burst(*ctx, t, slot, burst, static_cast<uint16_t>(n));
        flush();
        for (unsigned i = 0; i < n; ++i) {
            burst[i] = mbuf(frames[i], lengths[i], 0);
        }
        process_uplink_burst(*ctx, t, burst, static_cast<uint16_t>(n));
        flush();
        for (unsigned i = 0; i < n; ++i) {
            burst[i] = wrapped(frames[i], lengths[i], control);
        }
        // As the worker takes fabric frames: merged per flow by rte_gro first.
        const uint16_t left = overlay::merge_burst(burst, static_cast<uint16_t>(n));
        process_uplink_burst(*ctx, t, burst, left);
        flush();
        ctx->flows->expire(rte_get_tsc_cycles(), 16);  // the worker's aging sweep, a slice of it
        if (ctx->flows->size() > ctx->flows->capacity()) {
            fail("NFT size beyond its capacity (an entry was erased twice?)");
        }
    }

    void run(const uint8_t* data, size_t size) {
        if (size < 1) {
            return;
        }
        ctx->flows->expire(UINT64_MAX, nft_capacity);  // forget every flow of earlier inputs
        connect_qp();
        post_receives();
        const uint8_t control = data[0];
        int policy = (control >> 2) & 1;
        const uint8_t* frames[max_burst];
        uint32_t lengths[max_burst];
        if ((control & 0x40) == 0) {
            frames[0] = data + 1;
            lengths[0] = static_cast<uint32_t>(std::min<size_t>(size - 1, max_frame));
            process(*tables[policy], control, frames, lengths, 1);
            return;
        }
        unsigned n = 0;
        size_t at = 1;
        for (unsigned total = 0; total < max_frames && at + 2 <= size; ++total) {
            const uint16_t word = static_cast<uint16_t>((data[at] << 8) | data[at + 1]);
            at += 2;
            const uint32_t len = std::min<uint32_t>(word & 0x3fff, max_frame);
            const bool boundary = (word & 0xc000) != 0 || n == max_burst;
            if (boundary && n > 0) {
                process(*tables[policy], control, frames, lengths, n);
                n = 0;
            }
            if (word & 0x8000) {
                policy ^= 1;
            }
            frames[n] = data + at;
            lengths[n++] = static_cast<uint32_t>(std::min<size_t>(len, size - at));
            at += lengths[n - 1];
        }
        if (n > 0) {
            process(*tables[policy], control, frames, lengths, n);
        }
    }
};

harness* the_harness = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
    // EAL without hugepages, devices, shared files (so no IPC either) or telemetry: runs
    // anywhere, beside jakirods and other fuzzer processes (-jobs/-fork) with one prefix.
    std::vector<std::string> args = {"fuzz",
                                     "--no-huge",
                                     "-m",
                                     "256",
                                     "--no-pci",
                                     "--no-shconf",
                                     "--file-prefix=jakiro-fuzz",
                                     "--log-level=*:error",
                                     "--no-telemetry"};
    std::vector<char*> eal_argv;
    for (auto& arg : args) {
        eal_argv.push_back(arg.data());
    }
    if (rte_eal_init(static_cast<int>(eal_argv.size()), eal_argv.data()) < 0) {
        fail("EAL init failed");
    }
    the_harness = new harness;
    the_harness->init();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    the_harness->run(data, size);
    return 0;
}
