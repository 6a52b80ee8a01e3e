// Google Benchmark main for benchmarks that need DPDK objects: EAL with --no-huge and a file
// prefix of its own.

#include <benchmark/benchmark.h>
#include <rte_eal.h>
#include <unistd.h>

#include <string>
#include <vector>

int main(int argc, char** argv) {
    std::string prefix = "--file-prefix=jakiro-bench-" + std::to_string(getpid());
    std::vector<std::string> args = {
        "bench",         "--no-huge", "-m", "256", "--no-pci", prefix, "--log-level=*:error",
        "--no-telemetry"};
    std::vector<char*> eal_argv;
    for (auto& arg : args) {
        eal_argv.push_back(arg.data());
    }
    if (rte_eal_init(static_cast<int>(eal_argv.size()), eal_argv.data()) < 0) {
        return 1;
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    rte_eal_cleanup();
    return 0;
}
