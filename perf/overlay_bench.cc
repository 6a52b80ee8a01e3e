// Per-packet cost of the overlay: VXLAN encap and outer-header validation alone, and the whole
// egress and ingress pipelines on 32-packet bursts (parse, VLT bulk lookup, encap/decap).

#include <benchmark/benchmark.h>
#include <rte_cycles.h>

#include <memory>
#include <vector>

#include "dataplane/config/config_loader.hh"
#include "dataplane/control/table_builder.hh"
#include "dataplane/internet_checksum.hh"
#include "dataplane/pipeline/egress.hh"
#include "dataplane/pipeline/ingress.hh"
#include "tests/unit/frames.hh"

namespace jakiro {
namespace {

using test::ip;
using test::mac;

constexpr uint16_t burst = 32;

rte_mempool* pool() {
    static rte_mempool* p =
        rte_pktmbuf_pool_create("bench", 4095, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    return p;
}

const overlay::tunnel_endpoints h1_to_h2{mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"),
                                         ip("198.18.0.1"), ip("198.18.0.2")};

test::ipv4_frame_spec inner_spec(uint16_t payload) {
    test::ipv4_frame_spec spec{mac("02:00:c6:13:01:01"),
                               mac("02:6a:6b:00:00:01"),
                               ip("198.19.1.1"),
                               ip("198.19.1.2"),
                               IPPROTO_TCP,
                               40000,
                               5201};
    spec.payload = payload;
    return spec;
}

void BM_VxlanEncap(benchmark::State& state) {
    rte_mbuf* m = test::ipv4_mbuf(pool(), inner_spec(static_cast<uint16_t>(state.range(0))));
    const auto* iph = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, 14);
    for (auto _ : state) {
        const uint16_t port = overlay::flow_entropy_port(iph, rte_pktmbuf_data_len(m) - 14);
        overlay::encapsulate(m, h1_to_h2, 100, 0, port);
        benchmark::DoNotOptimize(rte_pktmbuf_mtod(m, uint8_t*));
        rte_pktmbuf_adj(m, overlay::outer_header_bytes);
    }
    rte_pktmbuf_free(m);
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_VxlanEncap)->Arg(64)->Arg(1400);

void BM_VxlanDecapCheck(benchmark::State& state) {
    uint8_t frame[2048];
    const uint32_t inner =
        test::write_ipv4_frame(frame + overlay::outer_header_bytes, inner_spec(64));
    overlay::write_outer_headers(frame, h1_to_h2, 100, static_cast<uint16_t>(inner), 0, 50000);
    const uint32_t len = overlay::outer_header_bytes + inner;
    for (auto _ : state) {
        auto result = overlay::check_outer(frame, len, ip("198.18.0.2"));
        benchmark::DoNotOptimize(result);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_VxlanDecapCheck);

// The inner TCP checksum of every frame cut from a super-frame: one MSS of payload.
void BM_ChecksumDpdk(benchmark::State& state) {
    const std::vector<uint8_t> payload(static_cast<std::size_t>(state.range(0)), 0xa5);
    for (auto _ : state) {
        benchmark::DoNotOptimize(rte_raw_cksum(payload.data(), payload.size()));
    }
    state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_ChecksumDpdk)->Arg(1448)->Arg(8948);

void BM_ChecksumJakiro(benchmark::State& state) {
    const std::vector<uint8_t> payload(static_cast<std::size_t>(state.range(0)), 0xa5);
    for (auto _ : state) {
        benchmark::DoNotOptimize(
            jakiro::fold_sum(jakiro::ones_sum(payload.data(), payload.size())));
    }
    state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_ChecksumJakiro)->Arg(1448)->Arg(8948);

// h1 with the test-bed vNICs, and h2 resolved on the underlay.
struct host_fixture {
    overlay::underlay_neighbors neighbors;
    std::unique_ptr<datapath_tables> tables;
    std::unique_ptr<worker_context> ctx = std::make_unique<worker_context>();

    host_fixture() {
        const auto loaded = load_host_config_text(R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}]
security_groups:
  - {name: open, vpc: blue, ingress: [{proto: any, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "net_null1", security_groups: [open]}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2}
)",
                                                  "bench.yaml");
        std::string error;
        tables = build_tables(loaded.config, {0, mac("02:00:00:00:00:01"), {1}, {}}, neighbors, 1,
                              error);
        neighbors.learn(ip("198.18.0.2"), mac("02:00:00:00:00:02"));
        ctx->neighbors = &neighbors;
        ctx->pool = pool();
        ctx->flows = secgroup::flow_table::create(65536, {}, rte_get_tsc_hz(), error);
    }
};

void BM_EgressPipelineBurst(benchmark::State& state) {
    host_fixture host;
    rte_mbuf* pkts[burst];
    uint8_t frame[2048];
    const uint32_t len = test::write_ipv4_frame(frame, inner_spec(64));
    for (auto _ : state) {
        // Allocating and filling the mbufs stays in the timed loop (PauseTiming costs more than
        // the work); BM_MbufRefill measures that part alone to subtract.
        for (auto& m : pkts) {
            m = test::mbuf_from(pool(), frame, len);
        }
        process_tenant_burst(*host.ctx, *host.tables, 0, pkts, burst);
        const auto sent = host.ctx->tx.queued(0);
        rte_pktmbuf_free_bulk(const_cast<rte_mbuf**>(sent.data()), sent.size());
        host.ctx->tx.discard_all();
    }
    state.SetItemsProcessed(state.iterations() * burst);
}
BENCHMARK(BM_EgressPipelineBurst);

void BM_MbufRefill(benchmark::State& state) {
    rte_mbuf* pkts[burst];
    uint8_t frame[2048];
    const uint32_t len = test::write_ipv4_frame(frame, inner_spec(64));
    for (auto _ : state) {
        for (auto& m : pkts) {
            m = test::mbuf_from(pool(), frame, len);
        }
        rte_pktmbuf_free_bulk(pkts, burst);
    }
    state.SetItemsProcessed(state.iterations() * burst);
}
BENCHMARK(BM_MbufRefill);

void BM_IngressPipelineBurst(benchmark::State& state) {
    host_fixture host;
    rte_mbuf* pkts[burst];
    uint8_t frame[2048];
    auto spec = inner_spec(64);
    spec.src_ip = ip("198.19.1.2");
    spec.dst_ip = ip("198.19.1.1");
    const uint32_t inner = test::write_ipv4_frame(frame + overlay::outer_header_bytes, spec);
    const overlay::tunnel_endpoints h2_to_h1{mac("02:00:00:00:00:02"), mac("02:00:00:00:00:01"),
                                             ip("198.18.0.2"), ip("198.18.0.1")};
    overlay::write_outer_headers(frame, h2_to_h1, 100, static_cast<uint16_t>(inner), 0, 50000);
    const uint32_t len = overlay::outer_header_bytes + inner;
    for (auto _ : state) {
        // Allocating and filling the mbufs stays in the timed loop (PauseTiming costs more than
        // the work); BM_MbufRefill measures that part alone to subtract.
        for (auto& m : pkts) {
            m = test::mbuf_from(pool(), frame, len);
        }
        process_uplink_burst(*host.ctx, *host.tables, pkts, burst);
        const auto sent = host.ctx->tx.queued(1);
        rte_pktmbuf_free_bulk(const_cast<rte_mbuf**>(sent.data()), sent.size());
        host.ctx->tx.discard_all();
    }
    state.SetItemsProcessed(state.iterations() * burst);
}
BENCHMARK(BM_IngressPipelineBurst);

}  // namespace
}  // namespace jakiro
