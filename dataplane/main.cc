// jakirod: the Jakiro vNIC dataplane daemon of one hypervisor host.

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "config/config_loader.hh"
#include "control/control_server.hh"
#include "control/host_manager.hh"
#include "control/rdma_admission.hh"
#include "eal_options.hh"
#include "roce/engine.hh"
#include "verbs/channel_server.hh"
#include "worker/clock.hh"
#include "worker/egress_shaper.hh"
#include "worker/ingress_policer.hh"
#include "worker/lcore_loop.hh"
#include "worker/roce_port.hh"

namespace {

std::atomic<bool> stop_requested{false};

void on_signal(int) {
    stop_requested = true;
}

const char* usage =
    "usage: jakirod --config HOST.yaml [--busy-poll] [--socket PATH] [--lcores EAL_LCORES]\n"
    "  --config     host configuration (DESIGN.md §8)\n"
    "  --busy-poll  never sleep when idle (dedicated cores); default is adaptive polling\n"
    "  --socket     control socket (default /run/jakiro/<host name>.sock)\n"
    "  --lcores     EAL --lcores mapping (default: lcore 0 floating over every CPU)\n";

struct options {
    std::string config;
    std::string socket;
    std::string lcores;
    bool busy_poll = false;
};

bool parse_options(int argc, char** argv, options& out) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&](std::string& target) {
            if (i + 1 >= argc) {
                std::cerr << "jakirod: " << arg << " needs a value\n" << usage;
                return false;
            }
            target = argv[++i];
            return true;
        };
        if (arg == "--config") {
            if (!value(out.config))
                return false;
        } else if (arg == "--socket") {
            if (!value(out.socket))
                return false;
        } else if (arg == "--lcores") {
            if (!value(out.lcores))
                return false;
        } else if (arg == "--busy-poll") {
            out.busy_poll = true;
        } else if (arg == "--help" || arg == "-h") {
            std::cout << usage;
            std::exit(0);
        } else {
            std::cerr << "jakirod: unknown argument '" << arg << "'\n" << usage;
            return false;
        }
    }
    if (out.config.empty()) {
        std::cerr << "jakirod: --config is required\n" << usage;
        return false;
    }
    return true;
}

std::string default_lcores() {
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    return "0@(0-" + std::to_string(cpus - 1) + ")";
}

int fail(const std::string& message) {
    std::cerr << "jakirod: " << message << "\n";
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace jakiro;
    options opts;
    if (!parse_options(argc, argv, opts)) {
        return 2;
    }
    auto loaded = load_host_config_file(opts.config);
    if (!loaded.ok()) {
        for (const auto& error : loaded.errors) {
            std::cerr << error.to_string() << "\n";
        }
        return 2;
    }
    daemon_state state;
    state.config = std::move(loaded.config);
    state.busy_poll = opts.busy_poll;
    const auto& config = state.config;
    if (opts.socket.empty()) {
        opts.socket = "/run/jakiro/" + config.name + ".sock";
    }

    auto eal =
        make_eal_args(config.name, free_hugepages_now(),
                      opts.lcores.empty() ? default_lcores() : opts.lcores, config.underlay.mtu);
    state.memory_mode = eal.memory_mode;
    std::vector<char*> eal_argv;
    for (auto& arg : eal.args) {
        eal_argv.push_back(arg.data());
    }
    if (rte_eal_init(static_cast<int>(eal_argv.size()), eal_argv.data()) < 0) {
        return fail(std::string("EAL initialisation failed: ") + rte_strerror(rte_errno));
    }
    // Declared first so it runs last: every DPDK object below is freed before EAL goes away.
    struct eal_cleanup {
        ~eal_cleanup() { rte_eal_cleanup(); }
    } eal_cleanup_at_exit;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);

    // Jumbo underlays need mbufs that hold a whole frame: the parsers expect contiguous headers
    // and the af_packet and memif PMDs copy each frame into one mbuf when it fits.
    // af_packet wants mbufs that hold a whole ring frame (framesz 10240 for jumbo underlays).
    const uint16_t data_room =
        config.underlay.mtu > 1500 ? 10240 + RTE_PKTMBUF_HEADROOM : RTE_MBUF_DEFAULT_BUF_SIZE;
    const unsigned mbufs = config.underlay.mtu > 1500 ? 8191 : 16383;
    rte_mempool* pool =
        rte_pktmbuf_pool_create("jakiro_mbufs", mbufs, 256, 0, data_room, rte_socket_id());
    if (pool == nullptr) {
        return fail(std::string("cannot create the mbuf pool: ") + rte_strerror(rte_errno));
    }

    std::string error;
    auto neighbors = std::make_unique<overlay::underlay_neighbors>();
    constexpr unsigned worker_count = 1;  // one poll loop on the main lcore; see README
    tables_publisher publisher(worker_count);
    state.neighbors = neighbors.get();
    state.publisher = &publisher;
    host_manager host(state, pool);
    if (!host.start(error)) {
        return fail(error);
    }
    // The RDMA face: one verbs socket per vNIC for libjakiro_verbs.so (control side thread),
    // whose QPs the worker's RoCE engine runs.
    auto worker = std::make_unique<worker_context>();
    roce::engine rdma_engine(static_cast<uint16_t>(config.vnics.size()),
                             rdma_config::max_qps_limit);
    roce_port rdma_port(*worker);
    egress_shaper shaper(now_ns());
    ingress_policer policer;
    worker->engine = &rdma_engine;
    worker->rdma_port = &rdma_port;
    worker->shaper = &shaper;
    worker->policer = &policer;
    verbs::channel_config verbs_config;
    verbs_config.host_name = config.name;
    verbs_config.tenant_mtu = config.tenant_mtu();
    verbs_config.vnics = verbs::endpoints_of(config, host.slots_of(config));
    verbs::channel_server verbs_channel(std::move(verbs_config));
    verbs_channel.enable_qps(&rdma_engine, [&publisher](uint16_t slot, uint32_t remote_ip_be) {
        return publisher.read_current([&](const datapath_tables& tables) {
            return admit_rdma_peer(tables, slot, remote_ip_be);
        });
    });
    std::string rdma_warnings;
    if (!verbs_channel.start(error, rdma_warnings)) {
        return fail(error);
    }
    if (!rdma_warnings.empty()) {
        std::cerr << "jakirod: " << rdma_warnings;
    }
    state.verbs = &verbs_channel;

    worker->neighbors = neighbors.get();
    worker->pool = pool;
    worker->flows = secgroup::flow_table::create(
        config.conntrack.max_flows, config.conntrack.timeouts, rte_get_tsc_hz(), error);
    if (!worker->flows) {
        return fail(error);
    }
    state.workers.push_back(worker.get());
    state.engine = &rdma_engine;
    state.shaper = &shaper;
    state.policer = &policer;

    control_server control(state, host, opts.socket);
    if (!control.start(error)) {
        return fail(error);
    }
    std::cout << "jakirod " << config.name << ": " << config.vnics.size() << " vNICs, underlay "
              << format_ipv4(config.underlay.ip) << ", memory " << state.memory_mode << ", control "
              << opts.socket << std::endl;

    loop_options loop;
    loop.busy_poll = opts.busy_poll;
    run_lcore_loop(publisher, 0, *worker, loop, stop_requested);

    std::cout << "jakirod " << config.name << ": stopping" << std::endl;
    control.stop();
    verbs_channel.stop();
    host.stop_ports();
    return 0;
}
