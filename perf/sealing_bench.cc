// The sealed overlay's per-frame cost (overlay/sealing/gcm_burst.hh): AES-256-GCM seal and
// open of ESP payloads with IPSec-MB's job API, one frame per call and 32 per burst, at the
// sizes the overlay carries (64 B, a 1500-byte MTU frame, a 9000-byte jumbo). bytes_per_second
// is plaintext per core.

#include <benchmark/benchmark.h>

#include <vector>

#include "dataplane/overlay/sealing/gcm_burst.hh"

namespace jakiro::overlay::sealing {
namespace {

struct frames {
    std::vector<std::vector<uint8_t>> buffers;
    std::vector<seal_request> seals;
    std::vector<open_request> opens;
    std::vector<open_result> results;
};

frames make_frames(gcm_burst& gcm, const gcm_key& key, uint32_t len, unsigned n) {
    frames f;
    f.buffers.resize(n);
    for (unsigned i = 0; i < n; ++i) {
        auto& b = f.buffers[i];
        b.assign(esp_prefix_bytes + len + esp_trailer_bytes(len), static_cast<uint8_t>(i));
        f.seals.push_back({b.data(), len, &key, 1000, i + 1, 0x010012c6, 0x020012c6});
        f.opens.push_back(
            {b.data(), static_cast<uint32_t>(b.size()), &key, 0x010012c6, 0x020012c6});
    }
    f.results.resize(n);
    gcm.seal(f.seals.data(), n);
    return f;
}

gcm_key& bench_key(gcm_burst& gcm) {
    static gcm_key key;
    direction_key k;
    k.key.fill(7);
    gcm.expand(k, key);
    return key;
}

void seal(benchmark::State& state) {
    gcm_burst gcm;
    const auto len = static_cast<uint32_t>(state.range(0));
    const auto n = static_cast<unsigned>(state.range(1));
    frames f = make_frames(gcm, bench_key(gcm), len, n);
    for (auto _ : state) {
        gcm.seal(f.seals.data(), n);
        benchmark::DoNotOptimize(f.buffers[0].data());
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * len);
    state.SetLabel(gcm.arch());
}

// Opening in place decrypts, so the frames are sealed again outside the timing before each
// round: the benchmark times what a receiver does with frames that authenticate.
void open(benchmark::State& state) {
    gcm_burst gcm;
    const auto len = static_cast<uint32_t>(state.range(0));
    const auto n = static_cast<unsigned>(state.range(1));
    frames f = make_frames(gcm, bench_key(gcm), len, n);
    for (auto _ : state) {
        gcm.open(f.opens.data(), n, f.results.data());
        benchmark::DoNotOptimize(f.results.data());
        state.PauseTiming();
        if (!f.results[0].ok) {
            state.SkipWithError("a sealed frame did not open");
            break;
        }
        gcm.seal(f.seals.data(), n);
        state.ResumeTiming();
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * len);
    state.SetLabel(gcm.arch());
}

// {frame bytes (VXLAN header + inner frame), frames per call}
BENCHMARK(seal)->ArgsProduct({{64, 1500, 9000}, {1, 32}});
BENCHMARK(open)->ArgsProduct({{64, 1500, 9000}, {1, 32}});

}  // namespace
}  // namespace jakiro::overlay::sealing

BENCHMARK_MAIN();
