// libFuzzer target over the packet parser + security-group classifier: both pipelines of a
// host like h1 of the test bed (tables built from YAML with security groups, fake port ids, no
// devices), one NFT that lives across inputs (so flows accumulate, age and get evicted), and two
// policy generations the input switches between (so known flows are re-checked and revoked).
//
// Input layout:
//   byte 0   control: bits 0-1 tenant vNIC slot (3 = 0), bit 2 start with policy B instead of
//            A, bits 3-4 VNI of the wrapped copy (100, 200, 4242, 100), bit 5 wrapped copy
//            sent from 198.18.0.9 instead of h2, bit 6 burst mode
//   rest     one frame; or, in burst mode, up to 128 frames, each a 2-byte big-endian word and
//            that many bytes: bits 0-13 the length, bit 14 "a new burst starts here", bit 15
//            "a new burst starts here and the other policy is in force from now on" (a live
//            change between two bursts). Bursts hold at most 32 frames.
// Each burst goes through process_tenant_burst (as the chosen vNIC's frames), through
// process_uplink_burst as it is (underlay frames), and through process_uplink_burst again
// inside valid outer VXLAN headers (so the inner parser and the classifier see it). After each
// burst every queued mbuf is freed and the harness checks that no mbuf leaked and that the
// NFT's size is within its capacity; a violation aborts (a finding, like a crash). The NFT is
// emptied before every input, so each finding replays alone.

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_mbuf.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "config/config_loader.hh"
#include "control/table_builder.hh"
#include "overlay/vxlan.hh"
#include "pipeline/egress.hh"
#include "pipeline/ingress.hh"

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

// h1 of the test bed with groups using every rule form: CIDR and remote group, port ranges,
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
    egress:
      - {proto: tcp, to: 0.0.0.0/0}
      - {proto: udp, ports: 53, to: 198.19.1.2/32}
      - {proto: icmp, to: 198.19.1.0/24}
  - {name: default, vpc: blue, ingress: [{proto: any, from_group: default}]}
  - {name: closed, vpc: red, ingress: []}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "net_null1", security_groups: [web, default]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, port: "net_null2", security_groups: [web]}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, port: "net_null3", security_groups: [closed]}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2, security_groups: [web]}
  - {vpc: red, ip: 198.19.1.2, host: 198.18.0.2}
  - {vpc: blue, ip: 198.19.1.9, host: 198.18.0.9, mac: "02:00:c6:13:01:09", security_groups: [default]}
)";

// The same host after a live change: rules removed and changed, t5 in default too.
constexpr const char* policy_b = R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - name: web
    vpc: blue
    ingress:
      - {proto: udp, ports: 5050-5060, from_group: web}
    egress:
      - {proto: udp, ports: 53, to: 198.19.1.2/32}
  - {name: default, vpc: blue, ingress: [{proto: tcp, from_group: default}]}
  - {name: closed, vpc: red, ingress: [{proto: icmp, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "net_null1", security_groups: [web]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, port: "net_null2", security_groups: [web, default]}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, port: "net_null3", security_groups: [closed]}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2, security_groups: [default]}
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
        process_uplink_burst(*ctx, t, burst, static_cast<uint16_t>(n));
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
