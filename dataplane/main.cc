// jakirod: the Jakiro vNIC dataplane daemon of one hypervisor host.

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "dataplane/config/config_loader.hh"
#include "dataplane/control/control_server.hh"
#include "dataplane/control/host_manager.hh"
#include "dataplane/control/overlay_sealing_setup.hh"
#include "dataplane/control/rdma_endpoints.hh"
#include "dataplane/control/restart_report.hh"
#include "dataplane/control/telemetry.hh"
#include "dataplane/control_plane/cluster_follower.hh"
#include "dataplane/control_plane/etcd_agent.hh"
#include "dataplane/eal_options.hh"
#include "dataplane/jakiro_version.hh"
#include "dataplane/log.hh"
#include "dataplane/poll_loop/lcore_loop.hh"
#include "dataplane/port_io.hh"
#include "dataplane/ports.hh"
#include "dataplane/restart/daemon_image.hh"
#include "dataplane/restart/fd_store_restart.hh"
#include "dataplane/restart/handover_server.hh"
#include "dataplane/restart/run_marker.hh"
#include "dataplane/restart/successor.hh"
#include "dataplane/restart/take_over.hh"
#include "dataplane/rnic_glue/rdma_admission.hh"
#include "dataplane/rnic_glue/roce_port.hh"
#include "dataplane/service/notify.hh"
#include "dataplane/shaping/egress_shaper.hh"
#include "dataplane/shaping/ingress_policer.hh"
#include "dataplane/startup_clock.hh"
#include "dataplane/vnet_face/face_registry.hh"
#include "dataplane/worker/clock.hh"
#include "dataplane/worker/handoff.hh"
#include "rnic/engine.hh"
#include "rnic/verbs/channel_server.hh"

namespace {

std::atomic<bool> stop_requested{false};  // the workers leave their loops
std::atomic<bool> reload_requested{false};
std::atomic<bool> termination_requested{false};  // ... and the daemon stops
// Under systemd with a file-descriptor store, SIGTERM parks the state there first
// (restart/fd_store_restart.hh): the store saver, not the signal, stops the workers.
std::atomic<bool> store_on_term{false};
std::atomic<bool> store_requested{false};
int store_wake = -1;  // eventfd the saver waits on

void on_signal(int signal) {
    if (signal == SIGHUP) {
        reload_requested = true;  // the control thread applies --config again
    } else if (signal == SIGTERM && store_on_term) {
        store_requested = true;
        const uint64_t one = 1;
        (void)!write(store_wake, &one, sizeof one);
    } else {
        termination_requested = true;
        stop_requested = true;
    }
}

// A take-over freezes the workers (they leave their loops, main waits) and either ends the
// process or lets them run again (restart/handover_server.hh).
struct worker_freeze {
    std::mutex mutex;
    std::condition_variable changed;
    bool requested = false;
    bool stopped = false;
    bool resumed = false;
};
worker_freeze freeze;

// The take-over this process is making, if any: a failure to start tells the predecessor, which
// then serves on.
jakiro::inheritance* pending_inheritance = nullptr;
// The state systemd's store passed, while this process restores it: a failure to start removes
// it from the store, so that the start systemd retries is a cold one.
const std::vector<std::string>* pending_store_names = nullptr;

// sysexits.h's EX_CONFIG: the unit's RestartPreventExitStatus, so systemd does not restart a
// daemon whose YAML is wrong until someone fixes it.
constexpr int exit_config = 78;
constexpr int exit_usage = 2;
constexpr int exit_failure = 1;

const char* usage =
    "usage: jakirod --config HOST.yaml [--busy-poll] [--socket PATH] [--lcores EAL_LCORES]\n"
    "               [--workers N] [--take-over] [--fd-store N]\n"
    "       jakirod --check-config HOST.yaml\n"
    "  --config FILE        host configuration (YAML; see jakirod(8))\n"
    "  --check-config FILE  validate FILE and exit: 0 if valid, 78 with file:line: field:\n"
    "                       errors if not; touches no device and starts no DPDK\n"
    "  --busy-poll          never sleep when idle (dedicated cores); default is adaptive polling\n"
    "  --socket PATH        control socket (default /run/jakiro/<host name>.sock)\n"
    "  --lcores LIST        EAL --lcores mapping (default: one lcore per worker, each\n"
    "                       floating over the CPUs jakirod was started on)\n"
    "  --workers N          poll loops sharing the vNICs (default: host.workers, else 1)\n"
    "  --take-over          take over from the running jakirod of this host with its state\n"
    "                       (docs/restart.md); it serves on if this one refuses or fails\n"
    "  --fd-store N         under systemd with FileDescriptorStoreMax=N: SIGTERM parks the\n"
    "                       state in the store and the next start restores from it\n"

    "  --version            print the version and exit\n"
    "  --help               print this and exit\n"
    "Signals: TERM and INT stop; HUP applies --config again (as jakiroctl apply).\n"
    "Under systemd (jakirod@.service) it reports READY=1, STATUS= and WATCHDOG=1.\n";

struct options {
    std::string config;
    std::string check_config;
    std::string socket;
    std::string lcores;
    unsigned workers = 0;  // 0: host.workers from the YAML
    bool busy_poll = false;
    bool take_over = false;
    unsigned fd_store = 0;  // FileDescriptorStoreMax= of the unit; 0: no store
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
        } else if (arg == "--check-config") {
            if (!value(out.check_config))
                return false;
        } else if (arg == "--socket") {
            if (!value(out.socket))
                return false;
        } else if (arg == "--lcores") {
            if (!value(out.lcores))
                return false;
        } else if (arg == "--workers") {
            std::string text;
            if (!value(text)) {
                return false;
            }
            char* end = nullptr;
            const unsigned long n = std::strtoul(text.c_str(), &end, 10);
            if (text.empty() || *end != '\0' || n < 1 || n > jakiro::max_workers) {
                std::cerr << "jakirod: --workers: '" << text << "' is not a number in 1.."
                          << jakiro::max_workers << "\n";
                return false;
            }
            out.workers = static_cast<unsigned>(n);
        } else if (arg == "--busy-poll") {
            out.busy_poll = true;
        } else if (arg == "--take-over") {
            out.take_over = true;
        } else if (arg == "--fd-store") {
            std::string text;
            if (!value(text)) {
                return false;
            }
            char* end = nullptr;
            const unsigned long n = std::strtoul(text.c_str(), &end, 10);
            if (text.empty() || *end != '\0' || n < 2 || n > 1u << 20) {
                std::cerr << "jakirod: --fd-store: '" << text
                          << "' is not a store size in 2..1048576 (FileDescriptorStoreMax=)\n";
                return false;
            }
            out.fd_store = static_cast<unsigned>(n);

        } else if (arg == "--help" || arg == "-h") {
            std::cout << usage;
            std::exit(0);
        } else if (arg == "--version") {
            std::cout << "jakirod " << JAKIRO_VERSION << "\n";
            std::exit(0);
        } else {
            std::cerr << "jakirod: unknown argument '" << arg << "'\n" << usage;
            return false;
        }
    }
    if (out.config.empty() && out.check_config.empty()) {
        std::cerr << "jakirod: --config or --check-config is required\n" << usage;
        return false;
    }
    if (!out.config.empty() && !out.check_config.empty()) {
        std::cerr << "jakirod: give --config or --check-config, not both\n" << usage;
        return false;
    }
    return true;
}

static_assert(jakiro::max_workers <= jakiro::worker_handoff::max_lanes);

struct worker_launch {
    jakiro::tables_publisher* publisher;
    unsigned id;
    jakiro::worker_context* ctx;
    jakiro::roce_port* rdma_port;
    const jakiro::loop_options* options;
};

int run_worker(void* arg) {
    const auto& w = *static_cast<const worker_launch*>(arg);
    jakiro::run_lcore_loop(*w.publisher, w.id, *w.ctx, w.rdma_port, *w.options, stop_requested);
    return 0;
}

int fail(const std::string& message) {
    if (pending_inheritance != nullptr) {
        jakiro::report_outcome(*pending_inheritance, message);
    }
    if (pending_store_names != nullptr) {
        jakiro::forget_stored_state(*pending_store_names);
    }
    jakiro::log::error("start_failed", message);
    jakiro::service::notify("STATUS=failed: " + message);
    return exit_failure;
}

// --check-config: the YAML alone, as --config would load it; nothing else is touched.
int check_config(const std::string& path) {
    const auto loaded = jakiro::load_host_config_file(path);
    if (!loaded.ok()) {
        for (const auto& error : loaded.errors) {
            std::cerr << error.to_string() << "\n";
        }
        std::cerr << path << ": " << loaded.errors.size() << " error"
                  << (loaded.errors.size() == 1 ? "" : "s") << "\n";
        return exit_config;
    }
    const auto& c = loaded.config;
    std::cout << path << ": valid: host " << c.name << ", underlay "
              << jakiro::format_ipv4(c.underlay.ip) << " mtu " << c.underlay.mtu << ", "
              << c.vpcs.size() << " VPCs, " << c.vnics.size() << " vNICs, " << c.peers.size()
              << " peers, " << c.security_groups.size() << " security groups"
              << (c.metrics ? ", metrics on " + c.metrics->text() : std::string()) << "\n";
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace jakiro;
    // First, before anything opens a descriptor: what a service manager passed (3, 4, ...).
    handover::listen_fds passed = handover::take_listen_fds();
    const auto process_started = std::chrono::steady_clock::now();
    startup_clock startup;
    options opts;
    const own_command own = read_own_command(argc, argv);
    if (!parse_options(argc, argv, opts)) {
        return exit_usage;
    }
    if (!opts.check_config.empty()) {
        return check_config(opts.check_config);
    }
    auto loaded = load_host_config_file(opts.config);
    if (!loaded.ok()) {
        for (const auto& error : loaded.errors) {
            std::cerr << error.to_string() << "\n";
        }
        service::notify("STATUS=configuration rejected: " + loaded.errors[0].to_string());
        return exit_config;
    }
    // SIGHUP re-reads the file: keep a path that survives a change of directory.
    if (char* full = realpath(opts.config.c_str(), nullptr)) {
        opts.config = full;
        std::free(full);
    }
    log::set_host(loaded.config.name);
    log::redirect_dpdk();
    daemon_state state;
    state.config = std::move(loaded.config);
    // control: etcd. The cluster's part of the configuration (VPCs, groups, vNICs) comes from
    // etcd: one read now, bounded, so the ports and tables start with it; the watch follows
    // once the control thread runs. Without an answer jakirod starts with the host alone and
    // converges when etcd answers. The read and the check of its records (seconds for a large
    // interest) run while the EAL comes up, which needs neither.
    std::unique_ptr<control_plane::etcd_agent> etcd;
    std::shared_ptr<const control_plane::cluster_view> first_view;
    std::string etcd_error;
    std::future<std::shared_ptr<const control_plane::cluster_view>> first_read;
    if (state.config.control) {
        etcd = std::make_unique<control_plane::etcd_agent>(*state.config.control, state.config.name,
                                                           state.config.underlay.ip);
        first_read = std::async(std::launch::async, [&etcd, &etcd_error] {
            return etcd->read_once(std::chrono::seconds(3), etcd_error);
        });
    }
    state.busy_poll = opts.busy_poll;
    const auto& config = state.config;
    // More workers than CPUs would only take turns on them: refused, naming where N came from.
    const unsigned workers = opts.workers != 0 ? opts.workers : config.workers;
    const std::string workers_from =
        opts.workers != 0 ? std::string("--workers") : opts.config + ": host.workers";
    const std::vector<unsigned> cpus = allowed_cpus();
    if (opts.lcores.empty() && workers > cpus.size()) {
        const std::string message = workers_from + ": " + std::to_string(workers) +
                                    " workers, but jakirod may run on " +
                                    std::to_string(cpus.size()) + " CPUs";
        std::cerr << message << "\n";
        service::notify("STATUS=configuration rejected: " + message);
        return exit_config;
    }
    state.worker_count = workers;
    if (opts.socket.empty()) {
        opts.socket = "/run/jakiro/" + config.name + ".sock";
    }

    startup.mark("config");
    auto eal = make_eal_args(config.name, free_hugepages_now(),
                             opts.lcores.empty() ? default_lcores(workers, cpus) : opts.lcores,
                             config.underlay.mtu);
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
    startup.mark("eal");
    if (rte_lcore_count() < workers) {
        return fail(workers_from + ": " + std::to_string(workers) + " workers, but --lcores gave " +
                    std::to_string(rte_lcore_count()) + " lcores");
    }
    const std::size_t fd_store = fd_store_capacity(opts.fd_store);
    store_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    store_on_term = fd_store != 0 && store_wake >= 0;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGHUP, on_signal);

    // Jumbo underlays need mbufs that hold a whole frame: the parsers expect contiguous headers
    // and the af_packet and memif PMDs copy each frame into one mbuf when it fits.
    // af_packet wants mbufs that hold a whole ring frame (framesz 10240 for jumbo underlays).
    const uint16_t data_room =
        config.underlay.mtu > 1500 ? 10240 + RTE_PKTMBUF_HEADROOM : RTE_MBUF_DEFAULT_BUF_SIZE;
    const unsigned mbufs = config.underlay.mtu > 1500 ? 8191 : 16383;
    // 64 KB buffers for the sealed overlay's super-datagrams (8 MB): a few bursts of them in
    // flight at once, and each worker's cache of 16.
    constexpr unsigned sealed_datagram_buffers = 127;
    rte_mempool* pool = rte_pktmbuf_pool_create("jakiro_mbufs", mbufs, 256, 0, data_room,
                                                static_cast<int>(rte_socket_id()));
    if (pool == nullptr) {
        return fail(std::string("cannot create the mbuf pool: ") + rte_strerror(rte_errno));
    }

    startup.mark("pool");

    // A take-over: the predecessor's state, before any port opens. Once take_over returns, the
    // predecessor's workers have stopped: from here to our own workers is the blackout.
    std::optional<inheritance> inherited;
    early_inheritance early;
    const std::string marker = run_marker_path(opts.socket);
    if (opts.take_over) {
        std::string why;
        inherited = take_over(handover_path(opts.socket), why);
        if (!inherited) {
            std::cerr << "jakirod: " << why << "\n";
            return fail(why);
        }
        pending_inheritance = &*inherited;
        if (!read_image_early(*inherited->image, state, early)) {
            return fail("the state image: " + inherited->image->error());
        }
        state.restarts.from_version = early.from_version;
        state.restarts.via = "take-over";
        state.restarts.last =
            early.from_version == writer_version() ? restart_kind::restart : restart_kind::upgrade;
    }
    // `systemctl restart`: systemd passes back what the predecessor stored.
    if (!passed.ignored.empty()) {
        log::warning("listen_fds", "descriptors passed at start not used: " + passed.ignored);
    }
    stored_inheritance stored;
    if (!inherited && !passed.fds.empty()) {
        stored = restore_from_store(passed);
    } else {
        for (const auto& p : passed.fds) {
            close(p.fd);  // a take-over brings the state itself
        }
    }
    if (stored.inherited) {
        inherited = std::move(stored.inherited);
        inherited->asked = process_started;  // the blackout includes this process's start-up
        pending_store_names = &stored.names;
        if (!read_image_early(*inherited->image, state, early)) {
            return fail("the stored state image: " + inherited->image->error());
        }
        state.restarts.from_version = early.from_version;
        state.restarts.via = "fd store";
        state.restarts.last =
            early.from_version == writer_version() ? restart_kind::restart : restart_kind::upgrade;
        if (stored.missing != 0) {
            state.restarts.lost["stored_descriptors"] = stored.missing;
        }
    } else if (!stored.refused.empty()) {
        // Never a half-restored state: cold, as after a crash (tenants' connections close with
        // the store's copies, so their programs fail fast).
        log::error("fd_store_refused",
                   "not restoring the state systemd stored: " + stored.refused + "; starting cold");
        forget_stored_state(stored.names);
        state.restarts.state_refused = stored.refused;
        state.restarts.last = restart_kind::crash;
        predecessor_crashed(marker, state.restarts);  // its counts, if it left them
    } else if (!inherited && predecessor_crashed(marker, state.restarts)) {
        state.restarts.last = restart_kind::crash;
    }
    if (state.restarts.last != restart_kind::none) {
        ++state.restarts.counts[static_cast<std::size_t>(state.restarts.last)];
    }
    state.restarts.at_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count();

    std::string error;
    auto neighbors = std::make_unique<overlay::underlay_neighbors>();
    tables_publisher publisher(workers);
    state.neighbors = neighbors.get();
    state.publisher = &publisher;
    host_manager host(state, pool);
    std::unique_ptr<control_plane::cluster_follower> follower;
    if (etcd) {
        first_view = first_read.get();
        if (!first_view) {
            log::warning("etcd_unreachable", etcd_error + "; starting with the host YAML alone");
        }
        follower = std::make_unique<control_plane::cluster_follower>(state, host, state.config);
        state.config = follower->initial_config(first_view);
        state.control_plane = follower.get();
    }
    startup.mark("take_over");
    if (!host.start(error)) {
        return fail(error);
    }
    startup.mark("ports");
    // One context per worker (worker/README: each owns its vNICs' ports, flows, shaper and
    // meters); with more than one, the hand-off rings between them.
    std::unique_ptr<worker_handoff> handoff;
    if (workers > 1) {
        handoff = worker_handoff::create(workers, "jk_handoff", error);
        if (!handoff) {
            return fail(error);
        }
    }
    std::vector<std::unique_ptr<worker_context>> contexts;
    std::vector<std::unique_ptr<egress_shaper>> shapers;
    std::vector<std::unique_ptr<ingress_policer>> policers;
    for (unsigned w = 0; w < workers; ++w) {
        contexts.push_back(std::make_unique<worker_context>());
        shapers.push_back(std::make_unique<egress_shaper>(now_ns()));
        policers.push_back(std::make_unique<ingress_policer>());
        contexts[w]->id = static_cast<uint8_t>(w);
        contexts[w]->handoff = handoff.get();
        contexts[w]->shaper = shapers[w].get();
        contexts[w]->policer = policers[w].get();
    }
    worker_context* worker = contexts[0].get();
    // The RDMA face: one verbs socket per vNIC for libjakiro_verbs.so (control side thread),
    // whose QPs the RoCE engine of the vNIC's worker runs, next to its shaper: both classes of
    // a vNIC are scheduled in one place (dataplane/README.md).
    std::vector<std::unique_ptr<rnic::engine>> engines;
    std::vector<std::unique_ptr<roce_port>> rdma_ports;
    std::vector<rnic::engine*> engine_of_worker;
    for (unsigned w = 0; w < workers; ++w) {
        engines.push_back(std::make_unique<rnic::engine>(static_cast<uint16_t>(config.vnics.size()),
                                                         rdma_config::max_qps_limit));
        rdma_ports.push_back(std::make_unique<roce_port>(*contexts[w]));
        contexts[w]->engine = engines[w].get();
        contexts[w]->rdma_port = rdma_ports[w].get();
        engine_of_worker.push_back(engines[w].get());
        if (handoff) {
            handoff->set_waker(w, [engine = engines[w].get()] { engine->wake(); });
        }
    }
    verbs::channel_config verbs_config;
    verbs_config.host_name = config.name;
    verbs_config.tenant_mtu = config.tenant_mtu();
    verbs::channel_server verbs_channel(std::move(verbs_config));
    verbs_channel.enable_qps(
        engine_of_worker,
        [&publisher](uint16_t slot, uint32_t remote_ip_be) {
            return publisher.read_current([&](const datapath_tables& tables) {
                return admit_rdma_peer(tables, slot, remote_ip_be);
            });
        },
        [&publisher](uint16_t slot, const rnic::ipv6_address& remote) {
            return publisher.read_current([&](const datapath_tables& tables) {
                return admit_rdma_peer_ipv6(tables, slot, remote);
            });
        });
    std::string rdma_warnings;
    if (!verbs_channel.start(error, rdma_warnings)) {
        return fail(error);
    }
    // A take-over: every vNIC's RDMA face as the predecessor left it (its tenants' connections,
    // objects, QPs and rdma_cm ids), once the server runs (its own configuration names no vNIC,
    // so starting withdraws none) and before the faces are served: serve_rdma keeps each.
    if (inherited && inherited->image->has(handover::section_kind::rdma_faces)) {
        if (!verbs_channel.restore(*inherited->image, error)) {
            return fail("the state image: " + error);
        }
        state.restarts.carried["rdma_clients"] = verbs_channel.client_count();
    }
    // Each vNIC opens its own RDMA face, now that the datapath knows its slot.
    host.serve_rdma(verbs_channel, rdma_warnings);
    if (!rdma_warnings.empty()) {
        log::warning("rdma_face",
                     rdma_warnings.substr(0, rdma_warnings.find_last_not_of('\n') + 1));
    }

    startup.mark("rdma");
    for (auto& ctx : contexts) {
        ctx->neighbors = neighbors.get();
        ctx->pool = pool;
        if (vnet_face::is_face_port(host.uplink_port())) {
            ctx->superframes = vnet_face::superframe_pool(error);  // the uplink face opened it
        }
        ctx->flows = secgroup::flow_table::create(
            config.conntrack.max_flows, config.conntrack.timeouts, rte_get_tsc_hz(), error);
        if (!ctx->flows) {
            return fail(error);
        }
        state.workers.push_back(ctx.get());
    }
    // The uplink's worker sends every fabric frame (other workers hand theirs to it).
    contexts[0]->tx.join_on_uplink(host.uplink_port());
    // The sealed overlay, on the uplink's worker (it receives and sends every fabric frame).
    std::string sealing_error;
    const std::unique_ptr<overlay::sealing::uplink_sealing> sealing =
        sealing_from_config(config, sealing_error);
    if (!sealing && !sealing_error.empty()) {
        return fail(sealing_error);
    }
    if (sealing) {
        contexts[0]->sealing = sealing.get();
        contexts[0]->tx.seal_uplink(sealing.get(), host.uplink_port(), pool);
        if (uplink_takes_udp_gso(host.uplink_port()) && contexts[0]->superframes != nullptr) {
            // Sealed super-datagrams and the super-frames opened from them have a pool of their
            // own with a per-lcore cache: the next buffer sealed into is one just written out,
            // still in the CPU's cache, not the least recently freed of the pool the vNICs
            // share (which has no cache: its buffers are charged to vNICs).
            rte_mempool* sealed =
                rte_pktmbuf_pool_create("jakiro_sealed", sealed_datagram_buffers, 16, 0, UINT16_MAX,
                                        static_cast<int>(rte_socket_id()));
            sealing->seal_into_datagrams(sealed != nullptr ? sealed : contexts[0]->superframes);
        }
        if (vnet_face::is_face_port(host.uplink_port())) {
            vnet_face::face_of(host.uplink_port())
                ->open_sealed_datagrams(sealing.get(), rte_cpu_to_be_32(config.underlay.ip),
                                        port_mac(host.uplink_port()));
        }
    }
    if (inherited) {
        std::vector<worker_context*> owners;
        owners.reserve(contexts.size());
        for (auto& ctx : contexts) {
            owners.push_back(ctx.get());
        }
        if (!read_image_late(*inherited->image, state, owners)) {
            return fail("the state image: " + inherited->image->error());
        }
        // The predecessor's counts of vNICs this configuration no longer has are nobody's now.
        std::set<std::string> names;
        for (const auto& v : config.vnics) {
            names.insert(v.name);
        }
        keep_counter_bases_of_vnics(state.counter_bases, names);
    }

    startup.mark("flows");
    const std::size_t vnic_count = config.vnics.size();
    const std::string metrics_at = config.metrics ? config.metrics->text() : "off";
    control_server control(state, host, opts.socket);
    control.reload_on(&reload_requested, opts.config);
    if (early.metrics_listener >= 0) {
        control.inherit_metrics_listener(early.metrics_listener);
    }
    if (inherited) {
        control.replace_predecessor();
    }
    if (!control.start(error)) {
        return fail(error);
    }
    startup.mark("control");
    // The old side of a future take-over (restart/handover_server.hh).
    std::chrono::steady_clock::time_point frozen_at;
    handover_server::hooks hooks;
    hooks.freeze = [&](const handover::offer&) {
        // The RDMA faces freeze while the workers still run (a face's thread may be waiting for
        // its engine): their threads stop, telling the tenants nothing, holding everything.
        const bool frozen = control.run_on_control_thread(
            [&] {
                state.handing_over = true;
                verbs_channel.freeze();
            },
            std::chrono::seconds(20));
        if (!frozen) {
            return false;
        }
        {
            std::lock_guard lock(freeze.mutex);
            freeze.requested = true;
            freeze.stopped = false;
            freeze.resumed = false;
        }
        stop_requested = true;
        for (auto& e : engines) {
            e->wake();
        }
        std::unique_lock lock(freeze.mutex);
        if (!freeze.changed.wait_for(lock, std::chrono::seconds(5),
                                     [] { return freeze.stopped; })) {
            return false;
        }
        frozen_at = std::chrono::steady_clock::now();
        return true;
    };
    hooks.write = [&](handover::image_writer& w, std::string& why) {
        bool written = false;
        control.run_on_control_thread(
            [&] {
                image_sources sources;
                sources.frozen = frozen_at;
                sources.metrics_listener = control.metrics_listener();
                if (vnet_face::is_face_port(host.uplink_port())) {
                    if (vnet_face::face* uplink = vnet_face::face_of(host.uplink_port());
                        uplink->is_tap()) {
                        sources.tap_iface = uplink->iface();
                        sources.tap_fd = uplink->fd();
                    }
                }
                sources.counters = counter_values(control.collect());
                write_image(w, state, sources);
                // The workers are stopped: the QPs' state is read where it lies.
                written = verbs_channel.save(w, why);
            },
            std::chrono::seconds(20));
        if (!written && why.empty()) {
            why = "the control thread did not write the image in time";
        }
        return written;
    };
    hooks.resume = [&](const std::string& why) {
        log::warning("handover_failed", why + "; serving on");
        {
            std::lock_guard lock(freeze.mutex);
            freeze.resumed = true;
            freeze.changed.notify_all();
        }
        // With the workers back: the faces' threads may wait for their engines.
        control.run_on_control_thread(
            [&] {
                std::string thaw_error;
                if (!verbs_channel.thaw(thaw_error)) {
                    log::error("rdma_face", "after a failed take-over: " + thaw_error);
                }
            },
            std::chrono::seconds(20));
        // A successor that failed late had bound our control socket's path (and the hand-over
        // socket's, which handover_server takes back itself).
        control.reclaim_socket();
        control.post([&] { state.handing_over = false; });
    };
    hooks.exit = [] {
        std::fflush(nullptr);
        _exit(0);  // tear nothing down: the successor holds the same devices and sockets
    };
    handover_server handover(handover_path(opts.socket), hooks);
    if (!handover.start(error)) {
        return fail(error);
    }
    // A successor failing this late holds every path its predecessor had bound (tests of the
    // predecessor taking them back, which otherwise need a successor killed at the right
    // microsecond).
    if (inherited && std::getenv("JAKIRO_TAKE_OVER_FAIL_LATE") != nullptr) {
        return fail("told to fail after binding its sockets (JAKIRO_TAKE_OVER_FAIL_LATE)");
    }
    control.on_restart([&](const std::vector<std::string>& args) -> std::string {
        std::string binary = own.binary;
        for (std::size_t i = 0; i < args.size(); ++i) {
            if (args[i] == "--binary" && i + 1 < args.size()) {
                binary = args[++i];
            } else {
                return "ERR usage: restart [--binary PATH]\n";
            }
        }
        if (handover.busy() || state.handing_over) {
            return "ERR a take-over is under way\n";
        }
        auto successor_args = own.args;
        successor_args.push_back("--take-over");
        std::string why;
        const pid_t pid = start_successor(binary, successor_args, why);
        if (pid < 0) {
            return "ERR " + why + "\n";
        }
        log::info("restarting",
                  "successor " + std::to_string(pid) + " (" + binary + ") takes over");
        return "OK\nsuccessor " + std::to_string(pid) + " (" + binary +
               ") is taking over; `jakiroctl status` names the last restart once it runs\n";
    });
    register_telemetry(&control);
    if (follower) {
        follower->set_poster([&control](std::function<void()> fn) { control.post(std::move(fn)); });
        control.on_second([&follower] { follower->tick(); });
        follower->set_whole_view_request([&etcd] { etcd->request_whole_view(); });
        // The local vNICs of the first view, before READY=1 (a port that cannot open waits).
        control.run_on_control_thread([&] { follower->apply_pending(); }, std::chrono::seconds(30));
        if (sealing) {
            etcd->set_overlay_key(overlay::sealing::format_key(sealing->public_key()));
        }
        etcd->start(
            [&follower](auto view, auto received) { follower->offer(std::move(view), received); },
            [&follower](const auto& event) { follower->offer_connection(event); });
    }
    // Ports are started, the control socket and the metrics listener are bound, and the worker
    // starts polling next: systemd may consider the service started.
    startup.mark("handover_etcd");
    std::string status;
    control.run_on_control_thread([&] { status = control.status_line(); }, std::chrono::seconds(2));
    // Taking over under systemd: we become the unit's main process (NotifyAccess=all).
    service::notify((inherited ? "MAINPID=" + std::to_string(getpid()) + "\n" : std::string()) +
                    "READY=1\nSTATUS=" + status);
    if (!inherited) {
        write_run_marker(marker, state.restarts);
    }
    log::info("started", status,
              {{"vnics", vnic_count},
               {"underlay", format_ipv4(state.config.underlay.ip)},
               {"memory", state.memory_mode},
               {"polling", opts.busy_poll ? "busy" : "adaptive"},
               {"workers", workers},
               {"control", opts.socket},
               {"metrics", metrics_at},
               {"version", JAKIRO_VERSION},
               {"startup_ms", startup.total_ms()},
               {"phases", startup.phases()}});

    // SIGTERM under systemd with a store: the state goes there, frozen and written exactly as for
    // a take-over, and this process exits (restart/fd_store_restart.hh).
    std::atomic<bool> saver_quit{false};
    // The restart lost the tenants' state: the stop is a failure for the service manager, and
    // the run marker stays, so that the next start reports it as the crash it is to tenants.
    std::atomic<bool> store_failed{false};
    std::thread saver;
    if (store_on_term) {
        saver = std::thread([&] {
            for (;;) {
                pollfd p{store_wake, POLLIN, 0};
                (void)poll(&p, 1, -1);
                uint64_t n = 0;
                (void)!read(store_wake, &n, sizeof n);
                if (saver_quit) {
                    return;
                }
                if (store_requested) {
                    break;
                }
            }
            // A take-over under way finishes first (it ends this process, or gives up).
            for (int i = 0; i < 400 && (handover.busy() || state.handing_over); ++i) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            }
            log::info("storing", "SIGTERM: parking the state in the file-descriptor store");
            const auto started = std::chrono::steady_clock::now();
            std::string why;
            const bool frozen = hooks.freeze(handover::offer{});
            handover::image_writer image(writer_version());
            if (frozen && hooks.write(image, why) && store_state(image, fd_store, why)) {
                service::notify(
                    "STOPPING=1\nSTATUS=stopping: the state is in the file-descriptor "
                    "store");
                remove_run_marker(marker);
                log::info("stored", "the state is in the file-descriptor store; exiting",
                          {{"descriptors", static_cast<uint64_t>(image.fds().size())},
                           {"bytes", static_cast<uint64_t>(image.data().size())},
                           {"ms", std::chrono::duration<double, std::milli>(
                                      std::chrono::steady_clock::now() - started)
                                      .count()}});
                std::fflush(nullptr);
                _exit(0);  // tear nothing down: the store holds the tenants' sockets and memory
            }
            if (!frozen && why.empty()) {
                why = "could not stop the workers";
            }
            log::error("fd_store_failed", "the state could not be stored: " + why +
                                              "; stopping without it (tenants' devices fail)");
            store_failed = true;
            control.run_on_control_thread(
                [&] {
                    std::string thaw_error;
                    if (!verbs_channel.thaw(thaw_error)) {
                        log::error("rdma_face", "after a failed store: " + thaw_error);
                    }
                },
                std::chrono::seconds(20));
            termination_requested = true;
            {
                std::lock_guard lock(freeze.mutex);
                freeze.resumed = true;
                freeze.changed.notify_all();
            }
            stop_requested = true;
            for (auto& e : engines) {
                e->wake();
            }
        });
    }

    loop_options loop;
    loop.busy_poll = opts.busy_poll;
    // Workers 1.. on the other lcores, worker 0 (the uplink's) on this one; again after a
    // take-over that failed (the freeze stopped them).
    std::vector<worker_launch> launches;
    launches.reserve(workers);
    for (;;) {
        launches.clear();
        unsigned next_id = 1;
        unsigned lcore = 0;
        RTE_LCORE_FOREACH_WORKER(lcore) {
            if (next_id == workers) {
                break;
            }
            launches.push_back(
                {&publisher, next_id, contexts[next_id].get(), rdma_ports[next_id].get(), &loop});
            if (rte_eal_remote_launch(run_worker, &launches.back(), lcore) != 0) {
                stop_requested = true;
                termination_requested = true;
                log::error("start_failed", "cannot launch worker " + std::to_string(next_id));
                break;
            }
            ++next_id;
        }
        if (inherited && (inherited->sock >= 0 || pending_store_names != nullptr)) {
            // The predecessor exits when it reads this: our workers take over now.
            const auto now = std::chrono::steady_clock::now();
            const double blackout =
                std::chrono::duration<double, std::milli>(now - early.frozen).count();
            const double takeover =
                std::chrono::duration<double, std::milli>(now - inherited->asked).count();
            control.run_on_control_thread(
                [&] {
                    state.restarts.blackout_ms = blackout;
                    state.restarts.takeover_ms = takeover;
                },
                std::chrono::seconds(2));
            report_outcome(*inherited, "");
            pending_inheritance = nullptr;
            inherited->image.reset();  // closes any descriptor no part of the daemon took
            if (pending_store_names != nullptr) {
                forget_stored_state(*pending_store_names);
                pending_store_names = nullptr;
            }
            write_run_marker(marker, state.restarts);
            log::info("took_over", "from " + early.from_version + " via " + state.restarts.via,
                      {{"blackout_ms", blackout}, {"takeover_ms", takeover}});
        }
        run_lcore_loop(publisher, 0, *worker, rdma_ports[0].get(), loop, stop_requested);
        rte_eal_mp_wait_lcore();
        std::unique_lock lock(freeze.mutex);
        if (termination_requested || !freeze.requested) {
            break;
        }
        // Frozen for a take-over: it ends this process (hooks.exit) or lets the workers run.
        freeze.stopped = true;
        freeze.changed.notify_all();
        freeze.changed.wait(lock, [] { return freeze.resumed; });
        freeze.requested = false;
        // A store that failed on SIGTERM resumes only to stop.
        stop_requested = termination_requested.load();
    }

    saver_quit = true;
    if (saver.joinable()) {
        const uint64_t one = 1;
        (void)!write(store_wake, &one, sizeof one);
        saver.join();
    }
    service::notify("STOPPING=1\nSTATUS=stopping");
    log::info("stopping", "signal received; closing ports");
    register_telemetry(nullptr);
    if (etcd) {
        etcd->stop();  // before the control thread: its callbacks post there
    }
    handover.stop();
    control.stop();
    host.stop();  // each vNIC's RDMA face, then its port
    verbs_channel.stop();
    if (store_failed) {
        return 1;
    }
    remove_run_marker(marker);
    return 0;
}
