// Per-packet cost of the security-group stage (firewall_burst: NFT bulk lookup, rte_acl
// classification of what misses, conntrack insert and accounting) on 32-packet bursts, for a
// vNIC whose groups hold 10, 1 000 or 10 000 rules: none of them match but the last.
//
//   BM_FirewallHit   the same 32 flows again and again: one NFT lookup per packet, no ACL
//   BM_FirewallMiss  32 new flows every burst (source address and port walk a 16 M key space
//                    in a 1 M-entry table): lookup miss, ACL classify, insert
//   BM_AclClassify   rte_acl alone on 32 keys, for reference
//
// Reported per packet: `per_pkt` (CPU time; and items/s = packets/s). The goal: hits
// cost the same whatever the rule count; a miss with 10 000 rules stays under 100 ns.

#include <benchmark/benchmark.h>
#include <rte_cycles.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "dataplane/config/config_loader.hh"
#include "dataplane/control/table_builder.hh"
#include "dataplane/pipeline/firewall.hh"

namespace jakiro {
namespace {

constexpr unsigned burst = 32;
constexpr uint32_t miss_table_capacity = 1u << 20;
// Emptied (outside the timed region) at half full, so inserts never take the eviction path.
constexpr uint32_t miss_table_refill_at = miss_table_capacity / 2;
constexpr uint16_t service_port = 5201;

rte_be32_t ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return rte_cpu_to_be_32(RTE_IPV4(a, b, c, d));
}

// h1 with vNIC t1 whose one group has `rules` ingress rules: rules-1 TCP rules from /32s in
// 10.0.0.0/8 that the traffic never matches, then the UDP rule that admits it.
std::string host_yaml(unsigned rules) {
    std::ostringstream y;
    y << "host:\n  name: h1\n  underlay: {port: \"net_null0\", ip: 198.18.0.1}\n"
         "vpcs: [{name: blue, vni: 100}]\nsecurity_groups:\n  - name: bench\n    vpc: blue\n"
         "    ingress:\n";
    for (unsigned i = 0; i + 1 < rules; ++i) {
        y << "      - {proto: tcp, ports: " << 1000 + i % 50000 << ", from: 10." << (i >> 16) << "."
          << ((i >> 8) & 255) << "." << (i & 255) << "/32}\n";
    }
    y << "      - {proto: udp, ports: " << service_port << ", from: 198.19.1.0/24}\n"
      << "vnics:\n  - {name: t1, vpc: blue, mac: \"02:00:c6:13:01:01\", ip: 198.19.1.1/24, "
         "port: \"net_null1\", security_groups: [bench]}\n"
         "peers:\n  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2}\n";
    return y.str();
}

struct policy_fixture {
    overlay::underlay_neighbors neighbors;
    std::unique_ptr<datapath_tables> tables;

    explicit policy_fixture(unsigned rules) {
        const auto loaded = load_host_config_text(host_yaml(rules), "bench.yaml");
        if (!loaded.ok()) {
            throw std::runtime_error(loaded.errors[0].to_string());
        }
        std::string error;
        const port_assignment ports{0, {}, {1}, {}};
        tables = build_tables(loaded.config, ports, neighbors, 1, error);
        if (!tables) {
            throw std::runtime_error(error);
        }
    }
};

// Tables are built once per rule count (10 000 rules take a moment to parse and compile).
const datapath_tables& tables_with(unsigned rules) {
    static std::map<unsigned, std::unique_ptr<policy_fixture>> built;
    auto& slot = built[rules];
    if (!slot) {
        slot = std::make_unique<policy_fixture>(rules);
    }
    return *slot->tables;
}

// 32 UDP packets 198.19.1.x:port -> 198.19.1.1:5201 as firewall requests into t1 (ingress).
struct packet_burst {
    struct packet {
        rte_ipv4_hdr ip;
        rte_udp_hdr udp;
        uint8_t payload[18];
    };
    packet packets[burst]{};
    firewall_request requests[burst];

    packet_burst() {
        for (unsigned i = 0; i < burst; ++i) {
            packet& p = packets[i];
            p.ip.version_ihl = RTE_IPV4_VHL_DEF;
            p.ip.total_length = rte_cpu_to_be_16(sizeof(packet));
            p.ip.time_to_live = 64;
            p.ip.next_proto_id = IPPROTO_UDP;
            p.ip.src_addr = ipv4(198, 19, 1, 2);
            p.ip.dst_addr = ipv4(198, 19, 1, 1);
            p.udp.src_port = rte_cpu_to_be_16(static_cast<uint16_t>(40000 + i));
            p.udp.dst_port = rte_cpu_to_be_16(service_port);
            p.udp.dgram_len = rte_cpu_to_be_16(sizeof(rte_udp_hdr) + sizeof(p.payload));
            requests[i] = {0, secgroup::direction::ingress, &p.ip, sizeof(packet)};
        }
    }

    // Flow number `n` (0 .. 16 M): source 198.19.1.2-255, port 1024-65535.
    void set_flow(unsigned i, uint32_t n) {
        packets[i].ip.src_addr = ipv4(198, 19, 1, static_cast<uint8_t>(2 + (n >> 16) % 250));
        packets[i].udp.src_port = rte_cpu_to_be_16(static_cast<uint16_t>(1024 + n % 64512));
    }
};

std::unique_ptr<worker_context> make_worker(uint32_t capacity) {
    auto ctx = std::make_unique<worker_context>();
    std::string error;
    ctx->flows = secgroup::flow_table::create(capacity, {}, rte_get_tsc_hz(), error);
    if (!ctx->flows) {
        throw std::runtime_error(error);
    }
    return ctx;
}

// CPU time per packet, printed with an SI prefix ("21.0n" is 21 ns).
void per_packet(benchmark::State& state) {
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * burst);
    state.counters["per_pkt"] =
        benchmark::Counter(static_cast<double>(state.iterations()) * burst,
                           benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void report(benchmark::State& state, const bool* pass) {
    unsigned passed = 0;
    for (unsigned i = 0; i < burst; ++i) {
        passed += pass[i];
    }
    if (passed != burst) {
        state.SkipWithError("a packet was refused: the policy or the harness is wrong");
    }
    per_packet(state);
}

void BM_FirewallHit(benchmark::State& state) {
    const auto& tables = tables_with(static_cast<unsigned>(state.range(0)));
    auto ctx = make_worker(65536);
    packet_burst packets;
    bool pass[burst];
    drop_reason reasons[burst];
    const uint64_t now = rte_get_tsc_cycles();
    firewall_burst(*ctx, tables, packets.requests, burst, now, pass, reasons);  // creates them
    for (auto _ : state) {
        firewall_burst(*ctx, tables, packets.requests, burst, now, pass, reasons);
        benchmark::DoNotOptimize(pass);
    }
    report(state, pass);
    state.counters["classified"] = static_cast<double>(ctx->counters.flow_misses.read());
}
BENCHMARK(BM_FirewallHit)->Arg(10)->Arg(1000)->Arg(10000);

void BM_FirewallMiss(benchmark::State& state) {
    const auto& tables = tables_with(static_cast<unsigned>(state.range(0)));
    auto ctx = make_worker(miss_table_capacity);
    packet_burst packets;
    bool pass[burst];
    drop_reason reasons[burst];
    uint32_t next_flow = 0;
    const uint64_t now = rte_get_tsc_cycles();
    for (auto _ : state) {
        if (ctx->flows->size() >= miss_table_refill_at) {
            state.PauseTiming();
            ctx->flows->expire(UINT64_MAX, miss_table_capacity);  // forget every flow
            state.ResumeTiming();
        }
        for (unsigned i = 0; i < burst; ++i) {
            packets.set_flow(i, next_flow++);
        }
        next_flow %= 250u << 16;
        firewall_burst(*ctx, tables, packets.requests, burst, now, pass, reasons);
        benchmark::DoNotOptimize(pass);
    }
    report(state, pass);
    state.counters["created"] = static_cast<double>(ctx->flows->inserts());
}
BENCHMARK(BM_FirewallMiss)->Arg(10)->Arg(1000)->Arg(10000);

void BM_AclClassify(benchmark::State& state) {
    const auto& tables = tables_with(static_cast<unsigned>(state.range(0)));
    const auto& acl = *tables.policies[0].acl[static_cast<int>(secgroup::direction::ingress)];
    secgroup::acl_key keys[burst];
    const secgroup::acl_key* key_ptrs[burst];
    for (unsigned i = 0; i < burst; ++i) {
        keys[i] = {IPPROTO_UDP,
                   {},
                   ipv4(198, 19, 1, 2),
                   rte_cpu_to_be_16(service_port),
                   rte_cpu_to_be_16(static_cast<uint16_t>(40000 + i))};
        key_ptrs[i] = &keys[i];
    }
    uint32_t results[burst];
    for (auto _ : state) {
        acl.classify(key_ptrs, results, burst);
        benchmark::DoNotOptimize(results);
    }
    if (results[0] == secgroup::acl_table::no_match) {
        state.SkipWithError("the allowing rule did not match");
    }
    per_packet(state);
}
BENCHMARK(BM_AclClassify)->Arg(10)->Arg(1000)->Arg(10000);

}  // namespace
}  // namespace jakiro
