// ICRC throughput: IPSec-MB CRC32 (with the masked-header copy and crc32_combine the ICRC needs)
// against the portable slice-by-8 CRC, on packets of 64 B, 1 KiB and 4 KiB counted from the
// inner IPv4 header to the end of the payload. The raw CRC32 rows show what the masking and
// combining cost on top of the bare checksum. Plain C++: no EAL, Google Benchmark's own main.

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "rnic/engine.hh"
#include "rnic/wire/crc32.hh"
#include "rnic/wire/headers.hh"
#include "rnic/wire/icrc.hh"

namespace jakiro::rnic {
namespace {

// IPv4 (20) + UDP (8) + BTH (12) + random payload, `size` bytes in all, ICRC room after it.
std::vector<uint8_t> packet(size_t size) {
    std::vector<uint8_t> p(size + icrc_bytes);
    std::mt19937 rng(static_cast<uint32_t>(size));
    for (auto& b : p) {
        b = static_cast<uint8_t>(rng());
    }
    p[0] = 0x45;
    bth_fields f;
    f.opcode = opcode::rc_send_only;
    build_roce_headers(p.data() + 28, 12, f, {});
    return p;
}

void set_counters(benchmark::State& state) {
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_IcrcIpsecMb(benchmark::State& state) {
    const auto p = packet(static_cast<size_t>(state.range(0)));
    for (auto _ : state) {
        benchmark::DoNotOptimize(compute_icrc(p.data(), static_cast<size_t>(state.range(0))));
    }
    set_counters(state);
    state.SetLabel(crc32_ipsec_mb_arch());
}
BENCHMARK(BM_IcrcIpsecMb)->Arg(64)->Arg(1024)->Arg(4096);

void BM_IcrcSlice8(benchmark::State& state) {
    const auto p = packet(static_cast<size_t>(state.range(0)));
    for (auto _ : state) {
        benchmark::DoNotOptimize(
            compute_icrc_slice8(p.data(), static_cast<size_t>(state.range(0))));
    }
    set_counters(state);
}
BENCHMARK(BM_IcrcSlice8)->Arg(64)->Arg(1024)->Arg(4096);

void BM_Crc32IpsecMbRaw(benchmark::State& state) {
    const auto p = packet(static_cast<size_t>(state.range(0)));
    for (auto _ : state) {
        benchmark::DoNotOptimize(crc32_ipsec_mb(p.data(), static_cast<size_t>(state.range(0))));
    }
    set_counters(state);
    state.SetLabel(crc32_ipsec_mb_arch());
}
BENCHMARK(BM_Crc32IpsecMbRaw)->Arg(64)->Arg(1024)->Arg(4096);

void BM_Crc32Slice8Raw(benchmark::State& state) {
    const auto p = packet(static_cast<size_t>(state.range(0)));
    for (auto _ : state) {
        benchmark::DoNotOptimize(crc32_slice8(0, p.data(), static_cast<size_t>(state.range(0))));
    }
    set_counters(state);
}
BENCHMARK(BM_Crc32Slice8Raw)->Arg(64)->Arg(1024)->Arg(4096);

// What joining two CRCs costs (IPSec-MB has no seed, so every ICRC pays this once or twice).
void BM_Crc32Combine(benchmark::State& state) {
    uint32_t crc = 0x12345678;
    const auto len = static_cast<size_t>(state.range(0));
    for (auto _ : state) {
        crc = crc32_combine(crc, 0x9ABCDEF0, len);
        benchmark::DoNotOptimize(crc);
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_Crc32Combine)->Arg(24)->Arg(984)->Arg(4056);

// The rest of the receive check: parsing BTH and extension headers of the same packet.
void BM_ParseRoce(benchmark::State& state) {
    auto p = packet(static_cast<size_t>(state.range(0)));
    const size_t udp_len = static_cast<size_t>(state.range(0)) - 28 + icrc_bytes;
    for (auto _ : state) {
        benchmark::DoNotOptimize(parse_roce(p.data() + 28, udp_len));
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_ParseRoce)->Arg(64)->Arg(1024);

// The engine's receive checks around them (lengths, headers, ICRC, P_Key, QP1, the RCFT
// look-up) for a packet that finds no QP: what every inbound packet pays before its QP runs.
void BM_EngineReceiveChecks(benchmark::State& state) {
    const auto size = static_cast<uint32_t>(state.range(0));
    auto p = packet(size);
    p[2] = static_cast<uint8_t>((size + icrc_bytes) >> 8);  // IPv4 total length
    p[3] = static_cast<uint8_t>(size + icrc_bytes);
    const uint32_t udp_len = size + icrc_bytes - 20;
    p[24] = static_cast<uint8_t>(udp_len >> 8);
    p[25] = static_cast<uint8_t>(udp_len);
    bth_fields f;
    f.opcode = opcode::rc_send_only;
    f.dest_qp = 0x100;
    build_roce_headers(p.data() + 28, 12, f, {});
    store_icrc(p.data() + size, compute_icrc(p.data(), size).value());
    engine e(1, 16);
    struct no_port final : packet_port {
        uint8_t* begin_frame(uint32_t) override { return nullptr; }
        void end_frame(uint16_t, uint32_t, uint32_t) override {}
    } port;
    for (auto _ : state) {
        e.receive(0, p.data(), size + icrc_bytes, port, 0);
    }
    if (e.counters().drops[static_cast<std::size_t>(engine_drop::unknown_qp)].read() !=
        static_cast<uint64_t>(state.iterations())) {
        state.SkipWithError("the packet did not reach the RCFT look-up");
    }
    set_counters(state);
}
BENCHMARK(BM_EngineReceiveChecks)->Arg(64)->Arg(1024);

// The baseline RDMA is measured against: one core copying memory (64 KiB stays in cache,
// as perftest's buffers do; 64 MiB goes to DRAM).
void BM_memcpy(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    std::vector<uint8_t> from(n, 0x5A), to(n);
    for (auto _ : state) {
        std::memcpy(to.data(), from.data(), n);
        benchmark::DoNotOptimize(to.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_memcpy)->Arg(65536)->Arg(64 << 20);

}  // namespace
}  // namespace jakiro::rnic

BENCHMARK_MAIN();
