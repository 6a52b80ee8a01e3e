#pragma once
// The software RNIC of one jakirod worker (docs/architecture.md §5): every QP of every vNIC on the
// host, polled from the worker's loop, fed the RoCEv2 packets the ingress pipeline found for its
// vNICs, emitting through a packet_port.
//
// receive() is where the RCFT check happens (docs/architecture.md §3): a packet is executed only if
// its destination QP exists on that vNIC, is connected (RTR or later) and its source address is the
// QP's peer; everything else is a counted drop, so no tenant of another VPC or another connection
// can inject into a QP. The ICRC is verified before anything else is believed.
//
// Control-plane changes (create, modify, query, destroy) reach the engine's thread through
// call(): a small mailbox the loop drains once per iteration; the caller waits (bounded). A
// call that times out leaves nothing half done: a task the worker has not started is
// cancelled (it never runs), one it has started is waited for and its result returned.
// Until a worker attaches, call() runs the function inline (unit tests, startup).
//
// Policy changes (docs/architecture.md §7): every table snapshot carries a policy generation, and
// every QP the generation its peer was last admitted under. The worker tells the engine the
// generation it runs with each iteration (use_policy). A connected QP whose generation differs
// is admitted again (packet_port::admits_connection) before it may send (poll, at most
// recheck_budget QPs per poll; the others wait for the next one) or receive (receive, one
// compare per packet); refused, it goes to ERR with IBV_EVENT_QP_FATAL, its WRs are flushed
// and packets still arriving for it are `revoked` drops. So no packet of a connection moves
// under a policy that no longer allows it, as the NFT's generation does for TCP flows.
//
// Visits (engine.cc poll): the worker visits only the QPs in its vNIC's queue, those with work
// or with something pending (WRs in flight and their timers, an ACK owed, a restored clock:
// queue_pair::wants_visits); a QP that has had nothing of the kind for park_after_idle_ns is parked
// and costs the worker nothing until the shim rings it (a bit per QP in the vNIC's doorbell
// page), a packet arrives for it, or a control call changes it. A QP whose WRs in flight wait
// for their ACK and nothing else (queue_pair::waits_for_timer) leaves the queue too, for the
// engine's timer_queue: it costs nothing until its retransmit or RNR timer is due, or one of
// those events comes first. So a poll costs what the queued
// QPs cost, however many idle QPs tenants hold, as a hardware NIC's doorbells make it; and every
// visit costs its vNIC a unit at least.
//
// Doorbells (doorbell_set.hh): one page per vNIC, whose bits the shim sets after posting to a
// parked QP, and whose count it bumps (and futex-wakes) when the page says the worker sleeps
// (verbs_abi/rings.hh); the worker's sleep waits on all of them.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "qos/ingress_meter.hh"
#include "rnic/doorbell_set.hh"
#include "rnic/engine_drops.hh"
#include "rnic/gsi_port.hh"
#include "rnic/packet_port.hh"
#include "rnic/queue_pair.hh"
#include "rnic/timer_queue.hh"
#include "stats/counter.hh"

namespace jakiro::rnic {

struct engine_counters {
    stats::counter received;
    stats::counter sent;
    stats::counter doorbells;
    // QP visits (each at least a unit of its vNIC's), and QPs parked (idle, left alone until rung).
    stats::counter visits;
    stats::counter parked;
    // Queued QPs whose shim was asked to ring because the worker was about to sleep.
    stats::counter sleep_asks;
    // Policy changes: connected QPs whose peer was admitted again, and those refused (ERR).
    stats::counter rechecks;
    stats::counter qps_revoked;
    std::array<stats::counter, engine_drop_count> drops{};  // [engine_drop]
};

// One row of `jakiroctl qps`.
struct qp_report {
    uint16_t vnic = 0;
    uint32_t qpn = 0;
    uint32_t type = 0;  // ibv_qp_type
    uint64_t owner = 0;
    uint32_t remote_ip_be = 0;
    ipv6_address remote_ip6{};  // an IPv6 peer (remote_ip_be is then 0)
    uint32_t remote_qpn = 0;
    uint32_t state = 0;
    uint32_t next_psn = 0;
    uint32_t una_psn = 0;
    uint32_t expected_psn = 0;
#define JAKIRO_QP_COUNTER(name) uint64_t name = 0;
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
    uint64_t rate_bps = 0;
};

class engine {
  public:
    // Units of work (queue_pair::poll: a packet, or a WQE that sends none, a completion, a flushed
    // WR) one vNIC's QPs may spend per pass, together: a tenant's QPs share one turn, so a
    // tenant with many QPs gets what a tenant with one gets, and the worker's time per poll is
    // bounded per vNIC, not per QP (the quota bounds how many QPs, not what they cost others),
    // whatever kind of work the tenant asks for.
    static constexpr unsigned vnic_units_per_pass = 32;
    // Passes per poll: at most 8 × 32 units per vNIC before the worker looks at its ports again.
    static constexpr unsigned max_passes = 8;
    static constexpr unsigned vnic_units_per_poll = max_passes * vnic_units_per_pass;
    // A vNIC's allowance of local work: WRs done without a packet (queue_pair_stats::silent_wrs:
    // memory-window binds and invalidations, WRs that fail locally, flushed WRs). Packets are
    // bounded by the vNIC's QoS rate and the wire; these by nothing else, so a tenant could
    // keep the worker busy for ever with them and its neighbours would pay in CPU. Beyond the
    // allowance the vNIC's QPs wait (none is visited) until it has refilled, and the worker
    // may sleep meanwhile. Legitimate programs do a bind or a flush per message at most.
    static constexpr uint64_t default_local_work_per_s = 100'000;
    // What may be spent at once after a quiet spell: a full ring's flush of the largest SQ.
    static constexpr int64_t local_work_burst = 4096;
    // How long a QP's visits find nothing to do before it is parked: about a round trip on the
    // overlay, so that a ping-pong's QPs stay queued between messages (a parked QP's next post
    // costs its shim a doorbell write and the worker a look at the page), while a QP left idle
    // stops costing visits soon.
    static constexpr uint64_t park_after_idle_ns = 100'000;

    // QP handles are (slot << 8) | tag with slots below `max_qps_per_vnic` + 1.
    engine(uint16_t vnic_slots, uint32_t max_qps_per_vnic);
    ~engine();
    engine(const engine&) = delete;
    engine& operator=(const engine&) = delete;

    // ---- control thread
    // What call() does with a task the worker has not started when the wait runs out.
    enum class on_timeout {
        cancel,    // it never runs; the caller sees ETIMEDOUT (create, modify, query)
        run_later  // it stays queued and runs whenever the worker comes (removals, which
                   // must happen eventually); the caller sees ETIMEDOUT
    };
    // Runs `fn` on the engine's thread and returns its result; ETIMEDOUT if the worker did
    // not start it within the call timeout (5 s; set_call_timeout), per `policy` above. Once
    // started, the result is always waited for and returned.
    int call(std::function<int()> fn, on_timeout policy = on_timeout::cancel);
    void set_call_timeout(std::chrono::milliseconds timeout) { _call_timeout = timeout; }
    // How often the doorbells have been rung: jakirod's own and every vNIC's.
    uint32_t doorbell_count() const;
    // Rings jakirod's own doorbell and signals wake_fd() (any thread; no tenant maps or holds
    // either): a sleeping worker wakes now, whichever way it sleeps.
    void wake();
    // An eventfd (non-blocking, jakirod's alone) that wake() writes: a worker sleeping in
    // epoll on its frame sources instead of on the doorbells adds it to its set and drains it.
    // -1 if it could not be created.
    int wake_fd() const { return _wake_fd; }
    const engine_counters& counters() const { return _counters; }
    // The live QPs, and with `retired` one row per vNIC slot with what its destroyed QPs
    // counted (qpn 0). Both are taken under one lock, so a QP is in exactly one of them: the
    // per-vNIC sums never count a QP twice, never go down, and miss no QP however briefly it
    // lived.
    std::vector<qp_report> report(std::vector<qp_report>* retired = nullptr) const;
    // QP1 of every vNIC: MADs to and from the rdma_cm agents (gsi_port.hh).
    gsi_port& gsi() { return _gsi; }

    // ---- engine thread (inside call() for the first two)
    void add_qp(std::shared_ptr<queue_pair> qp);
    void remove_qp(uint16_t vnic, uint32_t qpn);
    // vNIC `vnic`'s doorbell page (mapped by its clients only), or nullptr to forget it; the
    // caller keeps the page mapped until the call that removes it has returned.
    void set_vnic_doorbell(uint16_t vnic, verbs_proto::doorbell_page* page) {
        _doorbells.set(vnic, page);
    }
    // vNIC `vnic` is going away, its QPs already removed: its doorbell goes, and so do its
    // counters (visits, poller wakes, sleep asks, polls over its allowance, and those its QPs left
    // in report()'s `retired`) and its allowance's debt, so that a vNIC given the slot later starts
    // at zero. A vNIC that stays (a restored one whose page is replaced) keeps them: only
    // set_vnic_doorbell for it.
    void forget_vnic(uint16_t vnic);
    // The policy generation of the tables the worker runs with (once per iteration, before any
    // receive or poll of that iteration).
    void use_policy(uint32_t generation) {
        if (generation != _policy_generation) {
            _policy_generation = generation;
            _recheck_from = 0;  // every QP is checked again, recheck_budget per poll
        }
    }
    // vNIC `vnic`'s QoS rate in bit/s, 0 when it is not shaped (at start and on every QoS
    // change the worker sees): DCQCN's line rate for each of its QPs (queue_pair::set_line_rate),
    // now and for every QP added later.
    void set_vnic_rate(uint16_t vnic, uint64_t rate_bps, uint64_t now_ns);
    // vNIC `vnic`'s local-work allowance in WRs per second (default_local_work_per_s until
    // set). Engine thread.
    void set_vnic_local_work_rate(uint16_t vnic, uint64_t per_s);
    // Polls in which vNIC `vnic` sat out over its local-work allowance (any thread).
    uint64_t vnic_over_allowance(uint16_t vnic) const { return load_of(_over_allowance, vnic); }
    // Visits to vNIC `vnic`'s QPs (any thread): what the worker spent looking at them.
    uint64_t vnic_visits(uint16_t vnic) const { return load_of(_vnic_visits, vnic); }
    // Futex wakes the worker made for programs of vNIC `vnic` napping on an empty CQ (any
    // thread); each is charged to the vNIC as a unit of work and of its local-work allowance.
    uint64_t vnic_poller_wakes(uint16_t vnic) const { return load_of(_vnic_poller_wakes, vnic); }
    // Queued QPs of vNIC `vnic` whose shim prepare_sleep() asked to ring (a store each to a line
    // the shim reads; any thread): what the worker's way to sleep cost for that vNIC.
    uint64_t vnic_sleep_asks(uint16_t vnic) const { return load_of(_vnic_sleep_asks, vnic); }
    // `qp` may have work: it goes into its vNIC's queue of QPs to visit, if not there yet (engine
    // thread; queue_pair calls it on modify and on entering ERR, the engine on a packet or a ring).
    void queue_visit(queue_pair& qp);
    uint32_t policy_generation() const { return _policy_generation; }
    // The worker that will poll from now on; call() then goes through the mailbox.
    void attach();
    // The worker stopped: call() runs inline again (shutdown releases QPs after the loop).
    void detach();
    // Runs queued control calls, then polls every QP. Returns the work done: packets sent plus
    // the other units the QPs spent (queue_pair::poll), so 0 only when there was nothing to do
    // (work that sends nothing still keeps the worker from napping).
    unsigned poll(packet_port& port, uint64_t now_ns);
    // A RoCEv2 packet for local vNIC `vnic`: `ip` points at the inner IPv4 or IPv6 header of
    // `ip_len` bytes (the whole IP packet), UDP destination 4791. `meter`: the vNIC's ingress
    // meter when it is shaped (DHTB: above its rdma share the sending QP gets a CNP).
    void receive(uint16_t vnic, const uint8_t* ip, uint32_t ip_len, packet_port& port,
                 uint64_t now_ns, qos::ingress_meter* meter = nullptr);
    // Before the worker sleeps: tells every QP's shim to ring the doorbell; false (and the
    // flags cleared again) if work arrived meanwhile, so the worker must not sleep.
    bool prepare_sleep();
    // Sleeps up to `us` microseconds, less if the doorbell rings (call after prepare_sleep).
    void sleep(uint64_t us);
    // After sleeping: clears the flags. True if a doorbell (a vNIC's or jakirod's own) rang
    // since prepare_sleep().
    bool after_sleep();
    // The doorbells prepare_sleep() armed, for a worker that waits on them together with its
    // frame sources (dataplane/poll_loop/uring_sleeper.hh) instead of calling sleep().
    const doorbell_set& doorbells() const { return _doorbells; }
    bool has_qps() const { return !_active.empty(); }
    // Whether only wake() can bring it work while the worker sleeps: no QP whose tenant could
    // ring a doorbell, no MAD queued. A worker may then sleep on its frame sources and wake_fd()
    // alone (dataplane/poll_loop/frame_sleeper.hh). Engine thread.
    bool wakes_only_by_call() const { return _active.empty() && !_gsi.tx_pending(); }
    // What one poll can send for `vnic`, in bytes as QoS charges them: 0 when none of its QPs
    // has anything to send now (the rdma class is not backlogged), otherwise the poll's packet
    // cap for one vNIC at the path MTU of the first QP that has. The shaper grants the rdma
    // class no more than this: a grant the engine cannot take in one poll would read as a
    // blocked class (qos/scheduler.cc) and cost it its share.
    uint64_t vnic_send_room(uint16_t vnic) const;
    // Did a QP of `vnic` stop in the last poll with requests left, held back
    // (queue_pair::held_back)?
    bool vnic_held_back(uint16_t vnic) const {
        return vnic < _vnic_held.size() && _vnic_held[vnic] != 0;
    }
    // The QP `qpn` of local vNIC `vnic`, or nullptr (engine thread).
    queue_pair* find(uint16_t vnic, uint32_t qpn) const;

  private:
    static uint64_t load_of(const std::vector<stats::counter>& counters, uint16_t vnic) {
        return vnic < counters.size() ? counters[vnic].read() : 0;
    }
    // Queues the QPs the shims rang since the last look (the bits of every vNIC's page).
    void take_doorbells();
    // After a policy change: checks up to `rechecks_left` more QPs again (counted down).
    void recheck_policy(packet_port& port, unsigned& rechecks_left);
    // After a visit that left `qp` out of its queue: back in it, or parked.
    void after_visit(queue_pair& qp, uint64_t now_ns);
    // The QP asks the shim for a doorbell and leaves the queue; false (and it stays queued) if
    // work came meanwhile.
    bool park(queue_pair& qp);
    // As park, for a QP that waits for a timer of its own due at `due_ns`
    // (queue_pair::waits_for_timer): it goes into _timers, which queues it again when the timer is
    // due.
    bool wait_for_timer(queue_pair& qp, uint64_t due_ns);
    // Queues the QPs whose timers are due.
    void take_due_timers(uint64_t now_ns);
    void drop(engine_drop reason) { _counters.drops[static_cast<std::size_t>(reason)].add(); }
    void run_calls();

    // ---- receive (engine.cc): an inbound packet walks named steps, as the responder's
    // requests do (responder.cc); each returns a verdict and the first that is not `proceed`
    // ends the walk: the packet was taken (by QP1, as a CNP, by its QP) or is a counted drop.
    // The steps are inline and defined in engine.cc, their only caller, so the walk compiles to
    // one function as the check chain did: per packet nothing allocated, nothing virtual, no
    // call per step (perf/roce_bench's BM_EngineReceiveChecks measures it).
    struct receive_verdict {
        enum class action : uint8_t { proceed, taken, drop };
        action what = action::proceed;
        engine_drop reason{};  // for `drop`

        static receive_verdict proceed() { return {}; }
        static receive_verdict taken() { return {action::taken, {}}; }
        static receive_verdict drop(engine_drop why) { return {action::drop, why}; }
        bool proceeds() const { return what == action::proceed; }
    };
    // One inbound packet on its way through the steps: what receive() was given, its headers
    // as parse_roce found them (receive()'s own, never copied), and what an earlier step found
    // for a later one.
    struct inbound_packet {
        uint16_t vnic;
        const uint8_t* ip;  // IPv4 or IPv6
        uint32_t ip_len;
        uint64_t now_ns;
        qos::ingress_meter* meter;
        parse_result& parsed;
        bool ipv6 = false;                 // check_headers
        uint32_t src_ip_be = 0;            // check_headers: an IPv4 source
        const uint8_t* src_ip6 = nullptr;  // check_headers: an IPv6 source (16 bytes)
        queue_pair* qp = nullptr;          // find_qp
        transport_type transport{};        // find_qp: the QP's own

        const roce_packet& packet() const { return parsed.packet; }
        bool cnp() const { return parsed.packet.info->transport == transport_type::cnp; }
        // The ECN codepoint of the IP header: the low two bits of the IPv4 TOS or of the IPv6
        // traffic class.
        qos::ecn ecn() const { return static_cast<qos::ecn>((ipv6 ? ip[1] >> 4 : ip[1]) & 0x03); }
    };
    // The UDP length of a packet long enough for IP + UDP + BTH + ICRC whose UDP length is
    // the rest of the IP packet (IPv6: with UDP the next header, no extension headers); 0
    // otherwise.
    static inline uint32_t udp_length(const uint8_t* ip, uint32_t ip_len);
    inline receive_verdict check_headers(inbound_packet& in);
    inline receive_verdict check_icrc(inbound_packet& in);
    inline receive_verdict check_pkey(inbound_packet& in);
    inline receive_verdict take_qp1(inbound_packet& in);
    inline receive_verdict find_qp(inbound_packet& in);
    inline receive_verdict check_transport(inbound_packet& in);
    // UD: no connection, so each datagram is admitted and metered on its own.
    inline receive_verdict receive_datagram(inbound_packet& in, packet_port& port);
    inline receive_verdict check_datagram_ready(inbound_packet& in);
    inline receive_verdict check_datagram_admitted(inbound_packet& in, packet_port& port);
    inline receive_verdict meter_datagram(inbound_packet& in);
    // RC and UC: the RCFT entry, and the policy its peer was admitted under, decide.
    inline receive_verdict receive_connected(inbound_packet& in, packet_port& port);
    inline receive_verdict check_connection(inbound_packet& in);
    inline receive_verdict check_policy(inbound_packet& in, packet_port& port);
    inline receive_verdict take_cnp(inbound_packet& in);
    inline void deliver_connected(inbound_packet& in, packet_port& port);
    // After a packet went into `qp`: queued for a visit, and charged the poller wakes it caused.
    void after_receive(queue_pair& qp, uint64_t wakes_before);
    // A datagram to QP1: handed to the control side if it carries the GSI Q_Key, comes from a
    // QP1 and holds a MAD. Tenants cannot send that (controlled Q_Keys are refused at modify
    // time and replaced per WR by the QP's own, and their source QPN is never 1), so only an
    // agent's MAD passes.
    void receive_gsi(uint16_t vnic, const roce_packet& p, const inbound_packet& in);
    unsigned send_gsi(packet_port& port);
    verbs_proto::doorbell_page* own_doorbell() const;
    // True if `qp` may carry traffic under the current policy: admitted again when its
    // generation is stale, revoked when refused.
    bool admitted(queue_pair& qp, packet_port& port);

    // A queued call. `state` decides, under no lock, who owns it: the worker runs it only if
    // it moves queued -> started first; a caller whose wait ran out cancels it only if it
    // moves queued -> cancelled first.
    enum class task_state : uint8_t { queued, started, cancelled };
    struct task {
        std::function<int()> fn;
        std::shared_ptr<std::promise<int>> done;
        std::shared_ptr<std::atomic<task_state>> state;
    };
    static void run_task(task& t);

    gsi_port _gsi;
    std::chrono::milliseconds _call_timeout{5000};     // control thread
    std::vector<std::vector<queue_pair*>> _by_slot;    // [vnic][qpn >> 8], engine thread
    std::vector<std::shared_ptr<queue_pair>> _active;  // engine thread; copied into _reported
    // One vNIC's queued QPs (queue_pair::turn_state::queued) in the order they take turns at its
    // units: a FIFO ring with room for every QP of the vNIC (each is in it at most once), so a
    // vNIC whose units run out goes on where it stopped in the next pass or poll; its parked
    // QPs are in no queue and cost nothing.
    struct vnic_turns {
        std::vector<queue_pair*> ring;  // capacity: a power of two >= qps
        std::size_t head = 0;
        std::size_t size = 0;
        std::size_t qps = 0;  // QPs of the vNIC
        void push(queue_pair* qp) { ring[(head + size++) & (ring.size() - 1)] = qp; }
        queue_pair* pop() {
            queue_pair* qp = ring[head];
            head = (head + 1) & (ring.size() - 1);
            --size;
            return qp;
        }
        queue_pair* at(std::size_t i) const { return ring[(head + i) & (ring.size() - 1)]; }
        // Room for `count` QPs, keeping the queue's order.
        void reserve(std::size_t count);
        // Takes `qp` out of the queue, keeping the others' order.
        void erase(const queue_pair* qp);
    };
    std::vector<vnic_turns> _turns;  // [vnic], engine thread
    timer_queue _timers;             // QPs out of their queue until a timer is due; engine
    std::size_t _recheck_from = 0;   // _active index the policy recheck goes on from
    // A vNIC's local-work token bucket (WRs; negative: in debt for the last visit's work).
    struct local_work {
        int64_t tokens = local_work_burst;
        uint64_t per_s = default_local_work_per_s;
        uint64_t refilled_ns = 0;
        // Tops the bucket up for the time since the last refill; true if it may work now.
        bool refill(uint64_t now_ns);
    };
    std::vector<local_work> _local_work;  // [vnic], engine thread
    // [vnic] polls the vNIC sat out over its allowance; one per slot the engine was made for.
    std::vector<stats::counter> _over_allowance;
    std::vector<stats::counter> _vnic_visits;        // [vnic]
    std::vector<stats::counter> _vnic_poller_wakes;  // [vnic]
    std::vector<stats::counter> _vnic_sleep_asks;    // [vnic]
    std::size_t _first_vnic = 0;      // which vNIC goes first; moves on every poll; engine
    std::vector<uint8_t> _vnic_held;  // [vnic] vnic_held_back(); engine
    // [vnic] prepare_sleep asked its queued QPs to ring; after_sleep takes back only those.
    std::vector<uint8_t> _asked_to_ring;   // engine thread
    uint32_t _policy_generation = 0;       // engine thread
    std::vector<uint64_t> _vnic_rate_bps;  // [vnic] set_vnic_rate; engine thread
    uint32_t _gsi_psn = 0;                 // engine thread
    std::atomic<bool> _attached{false};
    std::atomic<bool> _calls_pending{false};
    std::mutex _mutex;  // guards _calls; inline calls (no worker) also hold it
    std::deque<task> _calls;
    mutable std::mutex _report_mutex;  // guards _reported and _retired
    std::vector<std::shared_ptr<queue_pair>> _reported;
    std::map<uint16_t, qp_report> _retired;          // [vnic] counters of its destroyed QPs
    std::unique_ptr<doorbell_memory> _own_doorbell;  // null if it could not be created
    int _wake_fd = -1;
    doorbell_set _doorbells;
    engine_counters _counters;
};

}  // namespace jakiro::rnic
