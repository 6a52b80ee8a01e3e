#include "dataplane/poll_loop/lcore_loop.hh"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <sched.h>

#include <algorithm>
#include <ctime>
#include <optional>
#include <string_view>
#include <vector>

#include "dataplane/arp.hh"
#include "dataplane/overlay/sealing/uplink_sealing.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/pipeline/egress.hh"
#include "dataplane/pipeline/ingress.hh"
#include "dataplane/pipeline/local_arrival.hh"
#include "dataplane/poll_loop/frame_sleeper.hh"
#include "dataplane/poll_loop/frame_sources.hh"
#include "dataplane/poll_loop/packet_wait.hh"
#include "dataplane/poll_loop/rx_waker.hh"
#include "dataplane/poll_loop/uring_sleeper.hh"
#include "dataplane/port_io.hh"
#include "dataplane/rnic_glue/roce_port.hh"
#include "dataplane/shaping/egress_shaper.hh"
#include "dataplane/shaping/ingress_policer.hh"
#include "dataplane/worker/clock.hh"
#include "dataplane/worker/fabric_dispatch.hh"
#include "dataplane/worker/handoff.hh"
#include "rnic/engine.hh"

namespace jakiro {

namespace {

constexpr uint16_t rx_burst_size = 32;
constexpr unsigned max_rx_bursts = 4;
constexpr unsigned face_check_period = 8;
// Idle back-off: after `idle_spin_us` without a packet the worker sleeps, starting at
// `first_sleep_us` and doubling up to `max_sleep_us`. 2 ms caps the added latency of the first
// packet after a pause; each wake costs ~10-20 µs of CPU (syscall, polling every port), so 500
// wakes/s keep an idle daemon near 1 % of a core (1 ms measured 1.4-2.0 %).
constexpr uint64_t idle_spin_us = 200;
// When the nap will be a frame_sleeper's (one epoll_wait a frame ends), napping is cheap and
// the spin shorter: one TCP stream across hosts, two cores, 9.98 Gbit/s at 80 µs against 9.67
// at 200 µs and 8.43 with no spin (the first naps are 10 µs, each wake a pass of every port).
constexpr uint64_t frames_spin_us = 80;
constexpr uint64_t first_sleep_us = 10;
constexpr uint64_t max_sleep_us = 2000;
// A throttled queue is napped on only when its tokens are at least this far away: shorter
// sleeps cost more in wake-up than the spin they save.
constexpr uint64_t min_throttled_sleep_us = 10;
// ARP for remote hosts: retry unresolved ones quickly, refresh resolved ones slowly.
constexpr uint64_t arp_retry_ms = 250;
constexpr uint64_t arp_refresh_ms = 30000;
// Requests one retry sends at most, the next ones continuing where it stopped: a publication
// waits for the worker's iteration to end (the RCU grace period), so the iteration must not
// grow with the hosts the VLT points at. 1 024 every 250 ms asks 4 096 hosts a second.
constexpr uint32_t arp_requests_per_retry = 1024;
// Flow aging: every 10 ms look at 1 % of the flow table, so a full sweep takes a second.
constexpr uint64_t aging_interval_ms = 10;
constexpr uint32_t aging_sweeps_per_second = 100;

void sleep_us(uint64_t us) {
    timespec ts{0, static_cast<long>(us * 1000)};
    nanosleep(&ts, nullptr);
}

// Whether every port of the snapshot, the uplink and every vNIC's, is a vnet face (frame_sleeper
// hears them all; an af_packet PMD port only uring_sleeper's or rx_waker's watch does).
bool only_faces(const datapath_tables& tables) {
    if (!vnet_face::is_face_port(tables.uplink_port)) {
        return false;
    }
    for (const uint16_t slot : tables.active_slots) {
        if (!vnet_face::is_face_port(tables.vnics[slot].port_id)) {
            return false;
        }
    }
    return true;
}

// Whether a frame on any port of the snapshot ends the worker's sleep: a vnet face (a tap
// uplink too) and an af_packet PMD port are ordinary sockets that uring_sleeper and rx_waker
// watch (frame_sources.hh); another PMD's port (memif) only a poll sees.
bool frames_end_sleeps(const datapath_tables& tables) {
    const auto heard = [](uint16_t port) {
        if (vnet_face::is_face_port(port)) {
            return true;
        }
        rte_eth_dev_info info{};
        return rte_eth_dev_info_get(port, &info) == 0 && info.driver_name != nullptr &&
               std::string_view(info.driver_name) == "net_af_packet";
    };
    if (!heard(tables.uplink_port)) {
        return false;
    }
    for (const uint16_t slot : tables.active_slots) {
        if (!heard(tables.vnics[slot].port_id)) {
            return false;
        }
    }
    return true;
}

// The sockets of the faces another worker reads: its vNICs', and the uplink's unless it is
// `self`'s (worker 0 owns it). An af_packet PMD port's socket is not known here: every worker
// watches those.
void others_faces(const datapath_tables& tables, unsigned self, std::vector<int>& out) {
    out.clear();
    if (self != 0 && vnet_face::is_face_port(tables.uplink_port)) {
        if (const vnet_face::face* f = vnet_face::face_of(tables.uplink_port)) {
            out.push_back(f->fd());
        }
    }
    for (const uint16_t slot : tables.active_slots) {
        const uint16_t port = tables.vnics[slot].port_id;
        if (tables.vnics[slot].worker == self || !vnet_face::is_face_port(port)) {
            continue;
        }
        if (const vnet_face::face* f = vnet_face::face_of(port)) {
            out.push_back(f->fd());
        }
    }
}

// Where the ARP requests to remote hosts stand: the next slot to ask, and how many slots a
// refresh (every host, resolved or not) still has to go.
struct neighbor_requests {
    uint32_t next = 0;
    uint32_t refresh_left = 0;
};

// Sends "who has" to remote hosts, at most arp_requests_per_retry: the rest of a refresh first,
// then unresolved ones, from where the last call stopped.
void request_neighbors(worker_context& ctx, const datapath_tables& tables,
                       neighbor_requests& state) {
    const uint32_t count = ctx.neighbors->size();
    uint32_t sent = 0;
    for (uint32_t looked = 0; looked < count && sent < arp_requests_per_retry; ++looked) {
        const uint32_t slot = state.next < count ? state.next : 0;
        state.next = slot + 1u < count ? slot + 1u : 0;
        const bool refresh = state.refresh_left > 0;
        if (refresh) {
            --state.refresh_left;
        } else if (ctx.neighbors->mac(slot)) {
            continue;
        }
        ++sent;
        rte_mbuf* m = rte_pktmbuf_alloc(ctx.pool);
        if (m == nullptr) {
            return;
        }
        auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
        const uint32_t len = write_arp_request(frame, tables.underlay_mac, tables.underlay_ip,
                                               ctx.neighbors->ip(slot));
        m->data_len = m->pkt_len = len;
        ctx.counters.arp_requests_sent.add(1);
        ctx.tx.enqueue(tables.uplink_port, m, ctx.counters);
    }
}

// The uplink's frames that belong to another worker's vNICs go to it (worker/handoff.hh);
// the rest stay, in order, at the front of `pkts`. Returns how many stayed.
uint16_t hand_off_fabric(worker_context& ctx, const datapath_tables& tables, rte_mbuf** pkts,
                         uint16_t count) {
    worker_handoff& handoff = *ctx.handoff;
    rte_mbuf* theirs[worker_handoff::max_lanes][overlay::max_merged];
    uint16_t their_count[worker_handoff::max_lanes] = {};
    uint16_t kept = 0;
    for (uint16_t i = 0; i < count; ++i) {
        const uint8_t owner = fabric_frame_owner(tables, pkts[i], ctx.id);
        if (owner == ctx.id || owner >= handoff.workers()) {
            pkts[kept++] = pkts[i];
        } else {
            theirs[owner][their_count[owner]++] = pkts[i];
        }
    }
    for (unsigned w = 0; w < handoff.workers(); ++w) {
        const uint16_t n = their_count[w];
        if (n == 0) {
            continue;
        }
        const uint16_t taken = handoff.give_fabric(w, theirs[w], n);
        ctx.counters.handed_fabric.add(taken);
        for (uint16_t i = taken; i < n; ++i) {
            ctx.drop(theirs[w][i], drop_reason::handoff_ring_full);
        }
    }
    return kept;
}

// What the other workers handed this one: frames from the uplink for its vNICs, frames
// to send on its ports (the uplink, or one of its vNICs after judging them as the receiver),
// and RoCE from their engines to its engine's QPs.
unsigned take_handoffs(worker_context& ctx, roce_port* rdma_port, const datapath_tables& tables) {
    worker_handoff& handoff = *ctx.handoff;
    constexpr uint16_t burst = 32;
    rte_mbuf* pkts[burst];
    unsigned taken = 0;
    for (unsigned b = 0; b < max_rx_bursts; ++b) {
        const uint16_t n = handoff.take_fabric(ctx.id, pkts, burst);
        if (n > 0) {
            process_uplink_burst(ctx, tables, pkts, n);
        }
        taken += n;
        if (n < burst) {
            break;
        }
    }
    for (unsigned b = 0; b < max_rx_bursts; ++b) {
        const uint16_t n = handoff.take_port(ctx.id, pkts, burst);
        rte_mbuf* arrivals[burst];
        uint16_t arrival_count = 0;
        for (uint16_t i = 0; i < n; ++i) {
            if (pkts[i]->port == tables.uplink_port) {
                ctx.tx.enqueue(tables.uplink_port, pkts[i], ctx.counters);
            } else {
                arrivals[arrival_count++] = pkts[i];
            }
        }
        if (arrival_count > 0) {
            process_local_arrivals(ctx, tables, arrivals, arrival_count);
        }
        taken += n;
        if (n < burst) {
            break;
        }
    }
    for (unsigned b = 0; b < max_rx_bursts; ++b) {
        const uint16_t n = handoff.take_roce(ctx.id, pkts, burst);
        if (n > 0 && rdma_port != nullptr) {
            rdma_port->receive_handed(pkts, n, now_ns());
        } else {
            for (uint16_t i = 0; i < n; ++i) {
                ctx.drop(pkts[i], drop_reason::port_removed);  // no engine here (never in jakirod)
            }
        }
        taken += n;
        if (n < burst) {
            break;
        }
    }
    ctx.counters.taken_handoffs.add(taken);
    return taken;
}

// Tells the tx batch who owns each port of a new snapshot: the uplink is worker 0's, a
// vNIC's port its owner's.
void learn_port_owners(worker_context& ctx, const datapath_tables& tables) {
    ctx.tx.set_owner(tables.uplink_port, 0);
    for (const uint16_t slot : tables.active_slots) {
        ctx.tx.set_owner(tables.vnics[slot].port_id, tables.vnics[slot].worker);
    }
}

// Frames read from a vNIC's port and dropped at once, over one of its allowances: from the
// tenant, and dropped, as any frame the pipeline drops is.
void count_dropped(worker_context& ctx, uint16_t slot, const vnet_face::over_allowance& d,
                   drop_reason reason) {
    ctx.counters.drops[static_cast<std::size_t>(reason)].add(d.frames);
    auto& vnic = ctx.counters.vnics[slot];
    vnic.from_tenant_packets.add(d.frames);
    vnic.from_tenant_bytes.add(d.bytes);
    vnic.drops.add(d.frames);
}

bool any_unresolved(const overlay::underlay_neighbors& neighbors) {
    for (uint32_t slot = 0; slot < neighbors.size(); ++slot) {
        if (!neighbors.mac(slot)) {
            return true;
        }
    }
    return false;
}

}  // namespace

void run_lcore_loop(tables_publisher& publisher, unsigned worker_id, worker_context& ctx,
                    roce_port* rdma_port, const loop_options& options,
                    const std::atomic<bool>& stop) {
    const uint64_t hz = rte_get_tsc_hz();
    const uint64_t idle_spin_cycles = hz * idle_spin_us / 1000000;
    const uint64_t frames_spin_cycles = hz * frames_spin_us / 1000000;
    packet_wait waiting(hz);
    uint64_t last_packet_tsc = rte_get_tsc_cycles();
    uint64_t next_arp_retry = 0;
    neighbor_requests arp;
    uint64_t next_arp_refresh = last_packet_tsc + hz * arp_refresh_ms / 1000;
    uint64_t sleep = first_sleep_us;
    uint64_t next_aging = 0;
    const uint32_t aging_budget =
        std::max<uint32_t>(64, ctx.flows->capacity() / aging_sweeps_per_second);
    rte_mbuf* pkts[rx_burst_size];
    rte_mbuf* uplink_pkts[rx_burst_size * max_rx_bursts];
    vnet_face::face_set ready_faces;
    unsigned polls_since_face_check = 0;
    static_assert(rx_burst_size * max_rx_bursts <= overlay::max_merged);

    // A worker with an engine waits for its frame sources and its doorbells in one io_uring
    // wait (uring_sleeper.hh). Without io_uring's futex wait, or without an engine: a frame
    // arriving on an af_packet port rings the doorbell through rx_waker's helper thread, and
    // frame_sleeper takes the naps that only frames and jakirod's calls can end.
    std::unique_ptr<uring_sleeper> uring;
    std::optional<frame_source_set> sources;
    if (ctx.engine != nullptr && !options.busy_poll) {
        uring = uring_sleeper::open();
        if (uring) {
            sources.emplace();
        }
    }
    std::vector<int> others;  // the faces other workers read (frame_sources.hh)
    std::optional<rx_waker> waker;
    if (uring) {
        // The one wait hears every cause.
    } else if (ctx.engine != nullptr && !options.busy_poll) {
        waker.emplace([&ctx] {
            ctx.counters.rx_wakes.add(1);
            ctx.engine->wake();
        });
    } else if (ctx.handoff != nullptr && !options.busy_poll) {
        // A worker without the engine sleeps on the hand-off's futex.
        waker.emplace([&ctx] {
            ctx.counters.rx_wakes.add(1);
            ctx.handoff->ring(ctx.id);
        });
    }
    std::optional<frame_sleeper> frames;
    if (!uring && ctx.engine != nullptr && ctx.handoff == nullptr && !options.busy_poll) {
        frames.emplace(ctx.engine->wake_fd());
    }
    uint64_t faces_of = UINT64_MAX;  // the publication faces_only is from
    bool faces_only = false;
    bool frames_wake = false;  // frames_end_sleeps, of the same publication
    // Whether a nap now would be the frame_sleeper's (see frame_sleeper.hh for when).
    const auto naps_on_frames = [&] {
        if (uring) {
            return ctx.engine->wakes_only_by_call();
        }
        return frames && faces_only && ctx.engine->wakes_only_by_call() && frames->ready();
    };
    const bool owns_uplink = ctx.id == 0;
    uint64_t owners_of = UINT64_MAX;  // the publication the tx batch's port owners are from
    if (ctx.handoff != nullptr) {
        ctx.tx.hand_off_through(ctx.handoff, ctx.id);
    }
    // Sleeps up to `us`, less if a tenant's post rings the doorbell or, with `wake_on_rx`, a
    // frame arrives (an idle nap; a throttled one ends when tokens are due anyway). False if
    // work arrived while deciding to sleep, so the loop must go on instead.
    const auto nap = [&](uint64_t us, bool wake_on_rx) {
        if (uring && wake_on_rx) {
            const datapath_tables& tables = *publisher.current();  // online: still ours
            if (sources->stale(tables.publication)) {
                others_faces(tables, ctx.id, others);
            }
            sources->refresh(tables.publication, others);
        }
        if (ctx.engine != nullptr && !ctx.engine->prepare_sleep()) {
            return false;
        }
        if (ctx.handoff != nullptr && !ctx.handoff->before_sleep(ctx.id)) {
            if (ctx.engine != nullptr) {
                ctx.engine->after_sleep();
            }
            return false;
        }
        publisher.offline(worker_id);
        const bool on_frames = !uring && wake_on_rx && naps_on_frames();
        const bool watch = waker && wake_on_rx && !on_frames;
        if (watch) {
            waker->before_sleep();
        }
        if (uring) {
            // A throttled nap waits for tokens, not frames: the doorbells and the time only.
            const rnic::doorbell_set& bells = ctx.engine->doorbells();
            const uring_sleeper::woken woke =
                uring->sleep(wake_on_rx ? sources->fd() : -1, bells.armed(), bells.generation(),
                             bells.sleep_cap(us));
            if (woke.frames) {
                ctx.counters.rx_wakes.add(1);
            }
        } else if (on_frames) {
            if (frames->sleep(us)) {
                ctx.counters.rx_wakes.add(1);  // as rx_waker counts the naps frames cut short
            }
        } else if (ctx.engine != nullptr) {
            ctx.engine->sleep(us);
        } else if (ctx.handoff != nullptr) {
            ctx.handoff->sleep(ctx.id, us);
        } else {
            sleep_us(us);
        }
        if (watch) {
            waker->after_sleep();
        }
        if (ctx.handoff != nullptr) {
            ctx.handoff->after_sleep(ctx.id);
        }
        publisher.online(worker_id);
        if (ctx.engine != nullptr && ctx.engine->after_sleep()) {
            ctx.counters.doorbell_wakes.add(1);
        }
        return true;
    };

    // Faces of vNICs over their packet rate, unread until it refills (release_frames): out of
    // the faces' epoll set and every worker's watch of the frame sources meanwhile, so that neither
    // a poll nor a sleep hears of their frames.
    struct held_face {
        uint16_t slot;
        uint16_t port;
        int fd;
    };
    std::vector<held_face> held;
    held.reserve(max_vnics);
    const auto hold_face = [&](uint16_t slot, uint16_t port) {
        const int fd = vnet_face::face_of(port)->fd();
        vnet_face::mute_face(port, true);
        ready_faces.reset(port - vnet_face::first_face_port);
        frame_sources::ignore(fd, true);
        held.push_back({slot, port, fd});
    };
    const auto release_held_faces = [&](uint64_t ns) {
        const datapath_tables& tables = *publisher.current();
        for (std::size_t i = 0; i < held.size();) {
            const held_face h = held[i];
            // Gone (a live change removed the vNIC or gave it another port): a new face is
            // heard from the start, and this one's descriptor may be another's by now.
            const bool gone = tables.vnic_of_port[h.port] != h.slot;
            const uint32_t rate = tables.vnics[h.slot].max_packet_rate;
            if (!gone && (ctx.packet_rates.available(h.slot, rate, ns) <
                              packet_rate_buckets::release_frames(rate) ||
                          (ctx.shaper != nullptr && !ctx.shaper->tcp_queue_drained(h.slot)))) {
                ++i;
                continue;
            }
            if (!gone) {
                vnet_face::mute_face(h.port, false);
                ready_faces.set(h.port - vnet_face::first_face_port);  // what waited is read now
            }
            frame_sources::ignore(h.fd, false);
            held[i] = held.back();
            held.pop_back();
        }
    };

    publisher.register_worker(worker_id);
    if (ctx.engine != nullptr) {
        ctx.engine->attach();
    }
    const rdma_queues rdma = rdma_queues::of(ctx.engine);  // what the shaper asks of the engine
    while (!stop.load(std::memory_order_relaxed)) {
        const datapath_tables& tables = *publisher.current();
        if (tables.publication != faces_of) {
            faces_only = only_faces(tables);
            frames_wake = frames_end_sleeps(tables);
            faces_of = tables.publication;
        }
        if (ctx.handoff != nullptr && tables.publication != owners_of) {
            learn_port_owners(ctx, tables);
            owners_of = tables.publication;
        }
        unsigned received = 0;
        if (ctx.policer != nullptr) {
            ctx.policer->sync(tables, ctx.id, now_ns());  // before any packet meets a meter
        }
        if (rdma_port != nullptr) {
            rdma_port->use(&tables);
        }
        if (ctx.engine != nullptr) {
            ctx.engine->use_policy(tables.policy_generation);  // QPs are checked again on change
        }

        // A port that fills a burst gets up to max_rx_bursts in a row: on a shared core one
        // iteration can take a millisecond, and a single burst per port per iteration would
        // then cap every port at 32 frames per millisecond.
        // The uplink's bursts are gathered first so GRO sees up to 128 frames at once: a
        // TCP flow's frames go to its tenant as one super-frame (overlay/superframe.hh).
        // Which vnet faces have frames: asked every poll while some face is busy, otherwise
        // every face_check_period polls, so quiet faces cost the loop (and the RoCE engine's
        // visits) a system call per 8 polls, not per poll. An uplink face is asked about every
        // poll, in the same system call: one epoll_wait instead of a read that finds nothing,
        // which is what most polls of a busy daemon would otherwise do.
        const bool uplink_face = owns_uplink && vnet_face::is_face_port(tables.uplink_port);
        if (uplink_face || ready_faces.any() || ++polls_since_face_check >= face_check_period) {
            vnet_face::collect_ready_faces(ready_faces);
            polls_since_face_check = 0;
        }
        const bool poll_uplink =
            owns_uplink &&
            (!uplink_face || ready_faces[tables.uplink_port - vnet_face::first_face_port] ||
             vnet_face::face_of(tables.uplink_port)->holds_uplink_frames());
        uint16_t from_fabric = 0;
        for (unsigned b = 0; poll_uplink && b < max_rx_bursts; ++b) {
            const uint16_t n = port_rx_uplink(tables.uplink_port, uplink_pkts + from_fabric,
                                              rx_burst_size, ctx.counters);
            from_fabric += n;
            if (n < rx_burst_size) {
                break;
            }
        }
        if (from_fabric > 0) {
            received += from_fabric;
            if (ctx.sealing != nullptr) {
                // Sealed frames are authenticated and opened before anything reads what they
                // carry (GRO, the hand-off's VLT lookup, the ingress pipeline).
                from_fabric = ctx.sealing->open_burst(uplink_pkts, from_fabric, tables.underlay_ip,
                                                      tables.underlay_mac, ctx.counters, now_ns());
            }
            uint16_t left = overlay::merge_burst(uplink_pkts, from_fabric);
            if (ctx.handoff != nullptr) {
                left = hand_off_fabric(ctx, tables, uplink_pkts, left);
            }
            for (uint16_t off = 0; off < left; off += rx_burst_size) {
                process_uplink_burst(ctx, tables, uplink_pkts + off,
                                     std::min<uint16_t>(rx_burst_size, left - off));
            }
        }
        if (ctx.handoff != nullptr) {
            received += take_handoffs(ctx, rdma_port, tables);
        }
        const uint64_t rx_ns = now_ns();
        release_held_faces(rx_ns);
        for (const uint16_t slot : tables.active_slots) {
            if (tables.vnics[slot].worker != ctx.id) {
                continue;  // another worker's vNIC
            }
            const uint16_t port = tables.vnics[slot].port_id;
            const bool face = vnet_face::is_face_port(port);
            if (face && !ready_faces[port - vnet_face::first_face_port]) {
                continue;
            }
            const vnet_face::buffer_allowance allowance{slot,
                                                        tables.vnics[slot].max_packet_buffers};
            uint32_t rate_left =
                ctx.packet_rates.available(slot, tables.vnics[slot].max_packet_rate, rx_ns);
            bool over_rate = false;
            for (unsigned b = 0; b < max_rx_bursts; ++b) {
                if (face && ctx.shaper != nullptr && ctx.shaper->tcp_queue_full(slot)) {
                    // Its QoS queue is full: what more it sent would be read only to be
                    // dropped (egress_shaper::tcp_queue_full). Left unread until it drains.
                    ctx.shaper->count_hold(slot);
                    hold_face(slot, port);
                    break;
                }
                const uint16_t want =
                    static_cast<uint16_t>(std::min<uint32_t>(rx_burst_size, rate_left));
                if (want == 0) {
                    // Out of its packet rate with frames waiting. A face is left unread until
                    // the rate refills: the kernel drops what its socket cannot hold, in the
                    // sender's time, not the worker's. An ethdev's frames are read and dropped
                    // (its socket is the PMD's; its readiness cannot be muted).
                    over_rate = true;
                    if (face) {
                        hold_face(slot, port);
                        break;
                    }
                    const vnet_face::over_allowance beyond = port_rx_discard(port, rx_burst_size);
                    received += beyond.frames;
                    count_dropped(ctx, slot, beyond, drop_reason::packet_rate_exceeded);
                    if (beyond.frames < rx_burst_size) {
                        break;
                    }
                    continue;
                }
                vnet_face::over_allowance dropped;
                const uint16_t n = port_rx_burst(port, pkts, want, allowance, dropped);
                if (n > 0) {
                    received += n;
                    process_tenant_burst(ctx, tables, slot, pkts, n);
                }
                if (dropped.frames > 0) {
                    received += dropped.frames;  // work done: the frames were read
                    count_dropped(ctx, slot, dropped, drop_reason::buffer_allowance_exceeded);
                    ctx.counters.vnics[slot].buffer_allowance_exceeded.add(dropped.frames);
                }
                const uint32_t read = n + dropped.frames;
                ctx.packet_rates.charge(slot, read);
                rate_left -= std::min(rate_left, read);
                if (read < want) {
                    break;  // drained
                }
            }
            if (over_rate) {
                ctx.counters.vnics[slot].packet_rate_exceeded.add(1);
            }
        }

        const uint64_t ns = now_ns();
        if (ctx.shaper != nullptr) {
            // DHTB: grants for this iteration; tcp frames within them leave now, the engine
            // sends rdma within its share below.
            ctx.shaper->sync(tables, ctx, ns);
            ctx.shaper->run(ctx, rdma, ns);
        }
        if (ctx.engine != nullptr) {
            // Loopback first (intra-host peers' frames), then the QPs' own sending and timers.
            received += rdma_port->deliver_loopback(*ctx.engine, ns);
            received += ctx.engine->poll(*rdma_port, ns);
            rdma_port->flush();
        }
        if (ctx.shaper != nullptr) {
            ctx.shaper->commit_rdma(rdma);
        }

        const uint64_t now = rte_get_tsc_cycles();
        if (owns_uplink && now >= next_arp_retry) {
            next_arp_retry = now + hz * arp_retry_ms / 1000;
            const bool refresh = now >= next_arp_refresh;
            if (refresh) {
                next_arp_refresh = now + hz * arp_refresh_ms / 1000;
            }
            if (refresh) {
                arp.refresh_left = ctx.neighbors->size();
            }
            if (arp.refresh_left > 0 || any_unresolved(*ctx.neighbors)) {
                request_neighbors(ctx, tables, arp);
            }
        }
        if (now >= next_aging) {
            next_aging = now + hz * aging_interval_ms / 1000;
            ctx.flows->expire(now, aging_budget);
        }
        ctx.tx.flush(
            [&](uint16_t port) {
                return port == tables.uplink_port || tables.vnic_of_port[port] != no_vnic;
            },
            ctx.counters);
        publisher.quiescent(worker_id);

        if (received > 0 || options.busy_poll || !ctx.tx.empty()) {
            ctx.counters.busy_polls.add(1);
            if (received > 0) {
                last_packet_tsc = now;
                sleep = first_sleep_us;
            }
            continue;
        }
        if (ctx.shaper != nullptr && ctx.shaper->has_queued()) {
            // Only shaped frames waiting for their vNIC's tokens: nap until they may leave
            // instead of spinning. On a shared host the tenants that produce the traffic need
            // this core, and the port rings hold what arrives meanwhile (one grant period).
            const uint64_t wait_us = ctx.shaper->ns_until_sendable(now_ns()) / 1000;
            if (wait_us >= min_throttled_sleep_us && nap(std::min(wait_us, max_sleep_us), false)) {
                ctx.counters.throttled_sleeps.add(1);
            } else {
                ctx.counters.busy_polls.add(1);
            }
            continue;
        }
        const uint64_t spin_cycles = naps_on_frames() ? frames_spin_cycles : idle_spin_cycles;
        if (now - last_packet_tsc < spin_cycles) {
            // Waiting for a stream's next packet without taking the core from whoever makes
            // it: where tenants and daemons outnumber the cores, the core goes to anyone
            // runnable and comes straight back if nobody is (one system call per empty poll).
            // Two cores, one TCP stream across two hosts: 9.3 against 8.2 Gbit/s.
            // A spinning neighbour would keep a yielded core until the next tick, so after one
            // slow yield the waits are naps for a while (poll_loop/packet_wait.hh).
            if (waiting.nap_now(now)) {
                // uring_sleeper and rx_waker's thread end a nap at a frame, a doorbell or a
                // hand-off, where every port's frames are heard.
                const uint64_t us = waiting.nap_us(now, last_packet_tsc + spin_cycles,
                                                   (uring || waker) && frames_wake, first_sleep_us);
                if (nap(us, true)) {
                    ctx.counters.waiting_naps.add(1);
                }
                continue;
            }
            sched_yield();
            if (waiting.yielded(now, rte_get_tsc_cycles())) {
                ctx.counters.slow_yields.add(1);
            }
            continue;
        }
        if (nap(sleep, true)) {
            ctx.counters.idle_sleeps.add(1);
            sleep = std::min(sleep * 2, max_sleep_us);
        }
    }
    if (ctx.engine != nullptr) {
        ctx.engine->detach();  // control calls run inline from now on: nobody polls
    }
    publisher.offline(worker_id);
}

}  // namespace jakiro
