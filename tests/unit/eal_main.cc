// GoogleTest main for tests that need DPDK (rte_hash, mbufs): EAL with no hugepages, no PCI and
// a file prefix of its own, so it runs beside jakirods and other test binaries.

#include <gtest/gtest.h>
#include <rte_eal.h>
#include <unistd.h>

#include <string>
#include <vector>

int main(int argc, char** argv) {
    testing::InitGoogleTest(&argc, argv);
    std::string prefix = "--file-prefix=jakiro-unit-" + std::to_string(getpid());
    std::vector<std::string> args = {
        "unit",          "--no-huge", "-m", "128", "--no-pci", prefix, "--log-level=*:error",
        "--no-telemetry"};
    std::vector<char*> eal_argv;
    for (auto& arg : args) {
        eal_argv.push_back(arg.data());
    }
    if (rte_eal_init(static_cast<int>(eal_argv.size()), eal_argv.data()) < 0) {
        fprintf(stderr, "EAL init failed\n");
        return 1;
    }
    const int rc = RUN_ALL_TESTS();
    rte_eal_cleanup();
    return rc;
}
