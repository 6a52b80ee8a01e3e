#include "rnic/engine.hh"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "qos/config.hh"
#include "rnic/wire/icrc.hh"

namespace jakiro::rnic {

namespace {

// Connected QPs admitted again per poll after a policy change: one ACL classification each
// (~0.1-0.3 µs), so a poll spends at most some tens of µs on it; a host's QPs are all checked
// within ceil(QPs / 128) polls.
constexpr unsigned recheck_budget = 128;
// QPs the policy recheck looks at per poll, checked or not (a look at a current one is a compare).
constexpr unsigned recheck_looks = 4096;

// A QP the worker stops looking at asks its shim to ring: for every post in ERR, whose receives
// a visit flushes; otherwise for sends only, since a receive waits for its message anyway
// (verbs_abi/rings.hh "Receives": an ibv_post_recv per message then costs no wake-up).
void want_doorbell(queue_pair& qp) {
    qp.ring().set_doorbell_wanted(qp.receives_need_visits() ? verbs_proto::doorbell_for_every_post
                                                            : verbs_proto::doorbell_for_sends);
}

}  // namespace

// The QP count per vNIC is verbs::qp_verbs' quota to enforce; the slot tables grow as QPs come.
// The per-vNIC counters cannot grow (a counter is not movable) and are read by the control
// thread: they are sized for every slot a vNIC may have, so that a vNIC added after the
// engine was made (by `apply`, from etcd, by the CNI plugin) is counted as one there at start.
engine::engine(uint16_t vnic_slots, uint32_t /*max_qps_per_vnic*/)
    : _by_slot(vnic_slots),
      _turns(vnic_slots),
      _local_work(vnic_slots),
      _over_allowance(std::max<std::size_t>(vnic_slots, doorbell_set::max_vnics)),
      _vnic_visits(std::max<std::size_t>(vnic_slots, doorbell_set::max_vnics)),
      _vnic_poller_wakes(std::max<std::size_t>(vnic_slots, doorbell_set::max_vnics)),
      _vnic_sleep_asks(std::max<std::size_t>(vnic_slots, doorbell_set::max_vnics)),
      _vnic_held(vnic_slots),
      _asked_to_ring(vnic_slots),
      _own_doorbell(doorbell_memory::create()),
      _wake_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

engine::~engine() {
    if (_wake_fd >= 0) {
        close(_wake_fd);
    }
}

verbs_proto::doorbell_page* engine::own_doorbell() const {
    return _own_doorbell != nullptr ? &_own_doorbell->page() : nullptr;
}

uint32_t engine::doorbell_count() const {
    return _doorbells.total(own_doorbell());
}

void engine::wake() {
    if (_own_doorbell != nullptr) {
        verbs_proto::wake_doorbell(_own_doorbell->page());
    }
    if (_wake_fd >= 0) {
        const uint64_t one = 1;
        (void)!write(_wake_fd, &one, sizeof(one));  // EAGAIN: a wake is pending anyway
    }
}

int engine::call(std::function<int()> fn, on_timeout policy) {
    std::unique_lock lock(_mutex);
    if (!_attached.load(std::memory_order_acquire)) {
        return fn();
    }
    auto done = std::make_shared<std::promise<int>>();
    auto result = done->get_future();
    auto state = std::make_shared<std::atomic<task_state>>(task_state::queued);
    _calls.push_back({std::move(fn), done, state});
    _calls_pending.store(true, std::memory_order_release);
    lock.unlock();
    wake();
    if (result.wait_for(_call_timeout) == std::future_status::ready) {
        return result.get();
    }
    if (policy == on_timeout::run_later) {
        return ETIMEDOUT;
    }
    task_state expected = task_state::queued;
    if (state->compare_exchange_strong(expected, task_state::cancelled,
                                       std::memory_order_acq_rel)) {
        return ETIMEDOUT;  // it will never run: nothing half done
    }
    // The worker is running it right now: its effect is real, so is its result.
    return result.get();
}

void engine::run_task(task& t) {
    task_state expected = task_state::queued;
    if (!t.state->compare_exchange_strong(expected, task_state::started,
                                          std::memory_order_acq_rel)) {
        return;  // its caller gave up and cancelled it
    }
    t.done->set_value(t.fn());
}

void engine::attach() {
    std::lock_guard lock(_mutex);
    _attached.store(true, std::memory_order_release);
}

void engine::detach() {
    std::deque<task> calls;
    {
        std::lock_guard lock(_mutex);
        _attached.store(false, std::memory_order_release);
        calls.swap(_calls);
        _calls_pending.store(false, std::memory_order_relaxed);
    }
    for (auto& t : calls) {
        run_task(t);
    }
}

void engine::run_calls() {
    if (!_calls_pending.load(std::memory_order_acquire)) {
        return;
    }
    std::deque<task> calls;
    {
        std::lock_guard lock(_mutex);
        calls.swap(_calls);
        _calls_pending.store(false, std::memory_order_relaxed);
    }
    for (auto& t : calls) {
        run_task(t);
    }
}

void engine::add_qp(std::shared_ptr<queue_pair> qp) {
    const uint16_t vnic = qp->vnic();
    if (vnic >= _by_slot.size()) {
        _by_slot.resize(vnic + 1);
    }
    auto& slots = _by_slot[vnic];
    const uint32_t slot = qp->qpn() >> 8;
    if (slot >= slots.size()) {
        slots.resize(slot + 1, nullptr);
    }
    slots[slot] = qp.get();
    if (vnic >= _turns.size()) {
        _turns.resize(vnic + 1);
        _vnic_held.resize(vnic + 1);
        _asked_to_ring.resize(vnic + 1);
        _local_work.resize(vnic + 1);
    }
    vnic_turns& turns = _turns[vnic];
    turns.reserve(++turns.qps);
    _timers.reserve(_active.size() + 1);
    qp->attach(this);
    queue_visit(*qp);  // its first visit decides whether it has anything to do
    if (vnic < _vnic_rate_bps.size()) {
        qp->set_line_rate(0, _vnic_rate_bps[vnic]);  // a new QP's DCQCN clock starts at 0
    }
    _active.push_back(std::move(qp));
    // The report's copy grows by one, not copied whole: a tenant creating QPs must not cost the
    // worker a pass over every QP of every vNIC (and an atomic per QP) per call.
    std::lock_guard lock(_report_mutex);
    _reported.push_back(_active.back());
}

void engine::set_vnic_rate(uint16_t vnic, uint64_t rate_bps, uint64_t now_ns) {
    if (vnic >= _vnic_rate_bps.size()) {
        _vnic_rate_bps.resize(vnic + 1, 0);
    }
    if (_vnic_rate_bps[vnic] == rate_bps) {
        return;
    }
    _vnic_rate_bps[vnic] = rate_bps;
    if (vnic < _by_slot.size()) {
        for (queue_pair* qp : _by_slot[vnic]) {
            if (qp != nullptr) {
                qp->set_line_rate(now_ns, rate_bps);
            }
        }
    }
}

void engine::remove_qp(uint16_t vnic, uint32_t qpn) {
    queue_pair* const target = find(vnic, qpn);
    if (queue_pair* qp = target; qp != nullptr) {
        _by_slot[vnic][qpn >> 8] = nullptr;
        vnic_turns& turns = _turns[vnic];
        if (qp->turn().queued) {
            turns.erase(qp);
            qp->turn().queued = false;
        }
        _timers.cancel(*qp);
        --turns.qps;
    }
    std::shared_ptr<queue_pair> gone;
    // By address: no QP object of another vNIC is read (a cache miss each) to find this one.
    for (auto it = _active.begin(); target != nullptr && it != _active.end(); ++it) {
        if (it->get() == target) {
            if (static_cast<std::size_t>(it - _active.begin()) < _recheck_from) {
                --_recheck_from;  // the recheck goes on with the same QP
            }
            gone = *it;
            _active.erase(it);
            break;
        }
    }
    std::lock_guard lock(_report_mutex);
    if (gone != nullptr) {
        std::erase(_reported, gone);
        // This thread is the counters' only writer, so they are final here.
        const queue_pair_stats& s = gone->stats();
        qp_report& sum = _retired[vnic];
        sum.vnic = vnic;
#define JAKIRO_QP_COUNTER(name) sum.name += s.name.read();
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
    }
}

void engine::vnic_turns::reserve(std::size_t count) {
    if (count <= ring.size()) {
        return;
    }
    std::size_t capacity = std::max<std::size_t>(ring.size(), 4);
    while (capacity < count) {
        capacity *= 2;
    }
    std::vector<queue_pair*> bigger(capacity, nullptr);
    for (std::size_t i = 0; i < size; ++i) {
        bigger[i] = at(i);
    }
    ring.swap(bigger);
    head = 0;
}

void engine::vnic_turns::erase(const queue_pair* qp) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < size; ++i) {
        queue_pair* q = at(i);
        if (q != qp) {
            ring[(head + kept++) & (ring.size() - 1)] = q;
        }
    }
    size = kept;
}

void engine::queue_visit(queue_pair& qp) {
    queue_pair::turn_state& turn = qp.turn();
    if (turn.queued || qp.vnic() >= _turns.size()) {
        return;
    }
    _timers.cancel(qp);  // a packet, a ring or a call came before its timer
    turn.queued = true;
    turn.idle_since_ns = 0;
    // Queued, its producers are looked at every visit: the shim need not ring for it (until the
    // worker sleeps: prepare_sleep asks again).
    qp.ring().set_doorbell_wanted(verbs_proto::doorbell_not_wanted);
    _turns[qp.vnic()].push(&qp);
}

bool engine::park(queue_pair& qp) {
    want_doorbell(qp);
    verbs_proto::fence_after_wanting_doorbell();
    if (qp.wants_visits()) {  // a post that came before the shim could see the flag
        qp.ring().set_doorbell_wanted(verbs_proto::doorbell_not_wanted);
        return false;
    }
    _counters.parked.add();
    return true;
}

bool engine::wait_for_timer(queue_pair& qp, uint64_t due_ns) {
    want_doorbell(qp);
    verbs_proto::fence_after_wanting_doorbell();
    if (qp.has_work()) {  // a post that came before the shim could see the flag
        qp.ring().set_doorbell_wanted(verbs_proto::doorbell_not_wanted);
        return false;
    }
    if (due_ns != UINT64_MAX) {  // else no timer runs: only a packet, a ring or a call
        _timers.schedule(qp, due_ns);
    }
    return true;
}

void engine::take_due_timers(uint64_t now_ns) {
    // Each QP is in _timers at most once and comes out queued: at most one look per QP per poll.
    while (queue_pair* qp = _timers.pop_due(now_ns)) {
        queue_visit(*qp);
    }
}

void engine::after_visit(queue_pair& qp, uint64_t now_ns) {
    queue_pair::turn_state& turn = qp.turn();
    if (turn.queued) {
        return;  // queued again during the visit (it entered ERR)
    }
    bool keep = true;
    uint64_t due_ns = 0;
    if (qp.waits_for_timer(due_ns) && due_ns > now_ns) {
        // Waiting for its ACK: visits until the timer is due would find nothing to do.
        turn.idle_since_ns = 0;
        keep = !wait_for_timer(qp, due_ns);
    } else if (qp.wants_visits()) {
        turn.idle_since_ns = 0;
    } else if (turn.idle_since_ns == 0) {
        turn.idle_since_ns = now_ns | 1;  // 0 means busy
    } else if (now_ns - turn.idle_since_ns >= park_after_idle_ns) {
        keep = !park(qp);
    }
    if (keep) {
        turn.queued = true;
        _turns[qp.vnic()].push(&qp);
    }
}

void engine::take_doorbells() {
    for (std::size_t vnic = 0; vnic < _turns.size(); ++vnic) {
        verbs_proto::doorbell_page* page = _doorbells.page_of(static_cast<uint16_t>(vnic));
        if (page == nullptr || !verbs_proto::anything_posted(*page)) {
            continue;
        }
        // Only the vNIC's own slot range is looked at, whatever bits its tenant set; a bit for a
        // slot without a QP costs one look, one for a QP of its own a visit (its units).
        const auto& slots = _by_slot[vnic];
        verbs_proto::take_posted(*page, static_cast<uint32_t>(slots.size()), [&](uint32_t slot) {
            if (queue_pair* qp = slots[slot]; qp != nullptr) {
                queue_visit(*qp);
            }
        });
    }
}

void engine::recheck_policy(packet_port& port, unsigned& rechecks_left) {
    // Every QP once after each policy change, connected ones admitted again (a parked QP too:
    // one whose peer lost its rule goes to ERR now, with IBV_EVENT_QP_FATAL, not at its next
    // post). QPs made stale by a modify are queued and checked at their visit.
    for (unsigned looks = 0;
         _recheck_from < _active.size() && rechecks_left > 0 && looks < recheck_looks; ++looks) {
        queue_pair& qp = *_active[_recheck_from++];
        if (qp.admitted_generation() != _policy_generation) {
            --rechecks_left;
            admitted(qp, port);  // refused: ERR, queued, and its visit below flushes
        }
    }
}

void engine::set_vnic_local_work_rate(uint16_t vnic, uint64_t per_s) {
    if (vnic >= _local_work.size()) {
        _local_work.resize(vnic + 1);
    }
    _local_work[vnic].per_s = std::max<uint64_t>(per_s, 1);
}

bool engine::local_work::refill(uint64_t now_ns) {
    if (refilled_ns == 0 || now_ns < refilled_ns) {
        refilled_ns = now_ns;
        return tokens > 0;
    }
    // At most a second's worth at once: the product stays far inside 64 bits.
    const uint64_t elapsed = std::min<uint64_t>(now_ns - refilled_ns, 1'000'000'000);
    const auto earned = static_cast<int64_t>(elapsed * per_s / 1'000'000'000);
    if (earned > 0) {  // else the fraction keeps accruing from the same starting point
        tokens = std::min(tokens + earned, local_work_burst);
        refilled_ns = now_ns;
    }
    return tokens > 0;
}

uint64_t engine::vnic_send_room(uint16_t vnic) const {
    // Only this vNIC's QPs: the shaper asks for every shaped vNIC, and another tenant's
    // thousand QPs must not make that question expensive.
    if (vnic >= _turns.size()) {
        return 0;
    }
    // The largest request: a WRITE First's headers (BTH, RETH), a full payload, ICRC.
    auto room_at = [](uint32_t mtu) {
        const uint32_t frame = frame_l2_l4_bytes +
                               opcode_info_of(opcode::rc_write_first).header_bytes + mtu +
                               icrc_bytes;
        return uint64_t{vnic_units_per_poll} * qos::charged_bytes(frame);
    };
    // The QPs its next pass visits first (parked ones have nothing to send).
    const vnic_turns& turns = _turns[vnic];
    for (std::size_t i = 0; i < std::min<std::size_t>(turns.size, vnic_units_per_pass); ++i) {
        if (const queue_pair* qp = turns.at(i); qp->has_work()) {
            return room_at(qp->path_mtu_bytes());
        }
    }
    // A parked QP was rung since the last poll, which queues it: room for the largest MTU.
    if (const auto* page = _doorbells.page_of(vnic);
        page != nullptr && verbs_proto::anything_posted(*page)) {
        return room_at(mtu_bytes(IBV_MTU_4096));
    }
    return 0;
}

queue_pair* engine::find(uint16_t vnic, uint32_t qpn) const {
    if (vnic >= _by_slot.size()) {
        return nullptr;
    }
    const auto& slots = _by_slot[vnic];
    const uint32_t slot = qpn >> 8;
    if (slot >= slots.size() || slots[slot] == nullptr || slots[slot]->qpn() != qpn) {
        return nullptr;
    }
    return slots[slot];
}

bool engine::admitted(queue_pair& qp, packet_port& port) {
    if (qp.admitted_generation() == _policy_generation) {
        return !qp.revoked();
    }
    qp.set_admitted_generation(_policy_generation);
    if (!qp.connected()) {
        return !qp.revoked();
    }
    _counters.rechecks.add();
    if (qp.remote_is_ipv6() ? port.admits_connection_ipv6(qp.vnic(), qp.remote_ip6())
                            : port.admits_connection(qp.vnic(), qp.remote_ip_be())) {
        return true;
    }
    qp.revoke();
    _counters.qps_revoked.add();
    return false;
}

unsigned engine::poll(packet_port& port, uint64_t now_ns) {
    run_calls();
    unsigned sent = _gsi.tx_pending() ? send_gsi(port) : 0;
    take_doorbells();
    take_due_timers(now_ns);
    // After a policy change, QPs are checked again before any of them sends, so that the
    // intra-host shortcut finds both ends current; those beyond the budget wait a poll.
    unsigned rechecks_left = recheck_budget;
    recheck_policy(port, rechecks_left);
    // Round robin in passes of vnic_units_per_pass units per vNIC, until nobody has anything more
    // to do now (window, QoS share, buffers) or the poll's cap is reached. Within a vNIC its
    // queued QPs take turns (vnic_turns); which vNIC goes first moves on every poll.
    const std::size_t vnics = _turns.size();
    const std::size_t first_vnic = vnics == 0 ? 0 : _first_vnic++ % vnics;
    std::fill(_vnic_held.begin(), _vnic_held.end(), 0);
    unsigned work = sent;  // the MADs, then every pass's packets and units
    for (unsigned pass = 0; pass < max_passes; ++pass) {
        unsigned this_pass = 0;  // packets and units: did anyone do anything?
        for (std::size_t k = 0; k < vnics; ++k) {
            const std::size_t vnic = (first_vnic + k) % vnics;
            vnic_turns& turns = _turns[vnic];
            const std::size_t count = turns.size;
            if (count == 0) {
                continue;
            }
            local_work& allowance = _local_work[vnic];
            if (pass == 0 && !allowance.refill(now_ns)) {
                if (vnic < _over_allowance.size()) {
                    _over_allowance[vnic].add();
                }
                continue;  // over its allowance: it sits this poll out
            }
            unsigned left = vnic_units_per_pass;
            uint64_t visits = 0;
            uint64_t wakes = 0;
            for (std::size_t visited = 0; visited < count && left > 0 && allowance.tokens > 0;
                 ++visited) {
                queue_pair& qp = *turns.pop();
                qp.turn().queued = false;
                if (qp.admitted_generation() != _policy_generation) {
                    if (rechecks_left == 0) {
                        // Not checked under the current policy yet: a later poll. Passing it
                        // over costs a unit, so that a queue of such QPs is not cycled through.
                        qp.turn().queued = true;
                        turns.push(&qp);
                        --left;
                        continue;
                    }
                    --rechecks_left;
                    admitted(qp, port);  // refused: ERR, and this visit flushes
                }
                const unsigned before = left;
                const queue_pair_stats& stats = qp.stats();
                const uint64_t silent_before = stats.silent_wrs.read();
                const uint64_t wakes_before = stats.poller_wakes.read();
                const unsigned sent_now = qp.poll(port, now_ns, left);
                // A futex wake for a napping poller (a unit, queue_pair::poll) is local work too,
                // as a WR that sends nothing is.
                const uint64_t woke = stats.poller_wakes.read() - wakes_before;
                allowance.tokens -=
                    static_cast<int64_t>(stats.silent_wrs.read() - silent_before + woke);
                _vnic_held[vnic] |= qp.held_back() ? 1 : 0;
                sent += sent_now;
                this_pass += sent_now + (before - left);
                // Looking costs its vNIC a unit even when the QP had nothing to do (not work:
                // it does not keep the worker from napping).
                if (left == before) {
                    --left;
                }
                ++visits;
                wakes += woke;
                after_visit(qp, now_ns);
            }
            if (vnic < _vnic_visits.size()) {
                _vnic_visits[vnic].add(visits);
                if (wakes > 0) {
                    _vnic_poller_wakes[vnic].add(wakes);
                }
            }
            _counters.visits.add(visits);
        }
        work += this_pass;
        if (this_pass == 0) {
            break;
        }
    }
    if (sent > 0) {
        _counters.sent.add(sent);
    }
    return work;
}

// An inbound packet goes through the steps below in this order; each returns a verdict and
// the first that is not `proceed` ends the walk. The ICRC is checked before anything of the
// packet but its lengths and headers is believed; the P_Key before any QP is looked up.
void engine::receive(uint16_t vnic, const uint8_t* ip, uint32_t ip_len, packet_port& port,
                     uint64_t now_ns, qos::ingress_meter* meter) {
    _counters.received.add(1);
    const uint32_t udp_len = udp_length(ip, ip_len);
    if (udp_len == 0) {
        drop(engine_drop::truncated);
        return;
    }
    const uint8_t* udp = ip + (ip_len - udp_len);
    parse_result parsed = parse_roce(udp + 8, udp_len - 8);
    inbound_packet in{vnic, ip, ip_len, now_ns, meter, parsed};
    receive_verdict v = check_headers(in);
    if (v.proceeds()) {
        v = check_icrc(in);
    }
    if (v.proceeds()) {
        v = check_pkey(in);
    }
    if (v.proceeds()) {
        v = take_qp1(in);
    }
    if (v.proceeds()) {
        v = find_qp(in);
    }
    if (v.proceeds()) {
        v = check_transport(in);
    }
    if (v.proceeds()) {
        v = in.transport == transport_type::ud ? receive_datagram(in, port)
                                               : receive_connected(in, port);
    }
    if (v.what == receive_verdict::action::drop) {
        drop(v.reason);
    }
}

uint32_t engine::udp_length(const uint8_t* ip, uint32_t ip_len) {
    if (ip_len < 20) {
        return 0;
    }
    uint32_t ihl = (ip[0] & 0x0F) * 4u;
    if ((ip[0] >> 4) == 6) {
        // RoCE v2 over IPv6: UDP right after the fixed header, the payload length the rest.
        ihl = 40;
        if (ip_len < ihl || ip[6] != 17 || load_be16(ip + 4) != ip_len - ihl) {
            return 0;
        }
    }
    if (ip_len < ihl + 8 + sizeof(bth_hdr) + icrc_bytes) {
        return 0;
    }
    const uint8_t* udp = ip + ihl;
    const uint32_t udp_len = (uint32_t{udp[4]} << 8) | udp[5];
    return udp_len == ip_len - ihl ? udp_len : 0;
}

// BTH and the extension headers its opcode calls for.
engine::receive_verdict engine::check_headers(inbound_packet& in) {
    if (!in.parsed.ok()) {
        return receive_verdict::drop(in.parsed.error == parse_error::truncated
                                         ? engine_drop::truncated
                                         : engine_drop::malformed);
    }
    in.parsed.packet.ip = in.ip;  // a UD receive delivers the IP header in its GRH area
    in.ipv6 = (in.ip[0] >> 4) == 6;
    if (in.ipv6) {
        in.src_ip6 = in.ip + 8;
    } else {
        std::memcpy(&in.src_ip_be, in.ip + 12, 4);
    }
    return receive_verdict::proceed();
}

engine::receive_verdict engine::check_icrc(inbound_packet& in) {
    return verify_icrc(in.ip, in.ip_len) ? receive_verdict::proceed()
                                         : receive_verdict::drop(engine_drop::bad_icrc);
}

engine::receive_verdict engine::check_pkey(inbound_packet& in) {
    return in.packet().pkey == default_pkey ? receive_verdict::proceed()
                                            : receive_verdict::drop(engine_drop::bad_pkey);
}

// QP1 is the rdma_cm agents', not a QP of the tables (receive_gsi counts its own drops).
engine::receive_verdict engine::take_qp1(inbound_packet& in) {
    if (in.packet().dest_qp != gsi_qpn) {
        return receive_verdict::proceed();
    }
    receive_gsi(in.vnic, in.packet(), in);
    return receive_verdict::taken();
}

// The RCFT look-up: the destination QP must exist on the receiving vNIC.
engine::receive_verdict engine::find_qp(inbound_packet& in) {
    in.qp = find(in.vnic, in.packet().dest_qp);
    if (in.qp == nullptr) {
        return receive_verdict::drop(engine_drop::unknown_qp);
    }
    in.transport = in.qp->type() == IBV_QPT_UD   ? transport_type::ud
                   : in.qp->type() == IBV_QPT_UC ? transport_type::uc
                                                 : transport_type::rc;
    return receive_verdict::proceed();
}

// A packet of the QP's transport; a CNP for any connected QP (UD has no connection to slow).
engine::receive_verdict engine::check_transport(inbound_packet& in) {
    const bool refused =
        in.cnp() ? in.transport == transport_type::ud : in.packet().info->transport != in.transport;
    return refused ? receive_verdict::drop(engine_drop::wrong_transport)
                   : receive_verdict::proceed();
}

engine::receive_verdict engine::receive_datagram(inbound_packet& in, packet_port& port) {
    receive_verdict v = check_datagram_ready(in);
    if (v.proceeds()) {
        v = check_datagram_admitted(in, port);
    }
    if (v.proceeds()) {
        v = meter_datagram(in);
    }
    if (v.proceeds()) {
        const uint64_t wakes_before = in.qp->stats().poller_wakes.read();
        in.qp->receive(in.packet(), port, in.now_ns);
        after_receive(*in.qp, wakes_before);
        v = receive_verdict::taken();
    }
    return v;
}

engine::receive_verdict engine::check_datagram_ready(inbound_packet& in) {
    const ibv_qp_state st = in.qp->state();
    return st == IBV_QPS_RESET || st == IBV_QPS_INIT ? receive_verdict::drop(engine_drop::not_ready)
                                                     : receive_verdict::proceed();
}

// No connection: any QP of the VPC may send, if the security groups let it in.
engine::receive_verdict engine::check_datagram_admitted(inbound_packet& in, packet_port& port) {
    bool permitted = false;
    if (in.ipv6) {
        ipv6_address src;
        std::memcpy(src.data(), in.src_ip6, src.size());
        permitted = port.permits_datagram_ipv6(in.vnic, src, false);
    } else {
        permitted = port.permits_datagram(in.vnic, in.src_ip_be, false);
    }
    return permitted ? receive_verdict::proceed() : receive_verdict::drop(engine_drop::denied);
}

// Metered like TCP: no connection to send a CNP to, and a datagram may be lost.
engine::receive_verdict engine::meter_datagram(inbound_packet& in) {
    if (in.meter != nullptr &&
        in.meter->on_packet(in.now_ns, qos::traffic_class::rdma, qos::charged_bytes(14 + in.ip_len),
                            in.ecn(), nullptr)
                .action == qos::ingress_action::drop) {
        return receive_verdict::drop(engine_drop::over_share);
    }
    return receive_verdict::proceed();
}

engine::receive_verdict engine::receive_connected(inbound_packet& in, packet_port& port) {
    receive_verdict v = check_connection(in);
    if (v.proceeds()) {
        v = check_policy(in, port);
    }
    if (v.proceeds()) {
        v = take_cnp(in);
    }
    if (v.proceeds()) {
        deliver_connected(in, port);
        v = receive_verdict::taken();
    }
    return v;
}

// The RCFT entry: connected (RTR or later), and to this source.
engine::receive_verdict engine::check_connection(inbound_packet& in) {
    const ibv_qp_state st = in.qp->state();
    const bool from_peer =
        in.ipv6 ? in.qp->remote_is_ipv6() &&
                      std::memcmp(in.src_ip6, in.qp->remote_ip6().data(), sizeof(ipv6_address)) == 0
                : in.src_ip_be == in.qp->remote_ip_be() && !in.qp->remote_is_ipv6();
    if (!from_peer || st == IBV_QPS_RESET || st == IBV_QPS_INIT) {
        return receive_verdict::drop(engine_drop::not_connected);
    }
    return receive_verdict::proceed();
}

// The peer lost its rule: nothing of it is executed.
engine::receive_verdict engine::check_policy(inbound_packet& in, packet_port& port) {
    return admitted(*in.qp, port) ? receive_verdict::proceed()
                                  : receive_verdict::drop(engine_drop::revoked);
}

// The receiver of our traffic is over its share: slow down.
engine::receive_verdict engine::take_cnp(inbound_packet& in) {
    if (!in.cnp()) {
        return receive_verdict::proceed();
    }
    in.qp->on_cnp(in.now_ns);
    return receive_verdict::taken();
}

// Into the QP, after the congestion it met on the way is answered with a CNP.
void engine::deliver_connected(inbound_packet& in, packet_port& port) {
    queue_pair* qp = in.qp;
    // What the QP sends while receiving (ACKs, NAKs, CNPs) counts as the engine's too.
    const uint64_t sent_before = qp->stats().packets_sent.read();
    const qos::ecn codepoint = in.ecn();
    if (in.meter == nullptr && codepoint == qos::ecn::ce && qp->cnp_pacer().try_send(in.now_ns)) {
        // No share to police, but the fabric marked congestion (the outer CE, carried in by
        // the RFC 6040 step): as a DCQCN notification point, tell the sender.
        qp->send_cnp(port);
    }
    if (in.meter != nullptr) {
        const auto verdict =
            in.meter->on_packet(in.now_ns, qos::traffic_class::rdma,
                                qos::charged_bytes(14 + in.ip_len), codepoint, &qp->cnp_pacer());
        if (verdict.send_cnp) {
            qp->send_cnp(port);
        }
        // RC is paced, not dropped (a drop costs a go-back-N retransmission): the CNP is the
        // signal, and the sender is another jakirod, which honours it.
    }
    const uint64_t wakes_before = qp->stats().poller_wakes.read();
    qp->receive(in.packet(), port, in.now_ns);
    after_receive(*qp, wakes_before);
    if (const uint64_t sent = qp->stats().packets_sent.read() - sent_before; sent > 0) {
        _counters.sent.add(sent);
    }
}

void engine::after_receive(queue_pair& qp, uint64_t wakes_before) {
    // A packet may leave the QP something to do (an ACK owed, READ responses, retirements).
    queue_visit(qp);
    // The futex wakes its completions cost: charged to the vNIC's local-work allowance here,
    // where no units are counted (packets are bounded by the peer's sending and the vNIC's share).
    const uint64_t woke = qp.stats().poller_wakes.read() - wakes_before;
    if (woke > 0) {
        const uint16_t vnic = qp.vnic();
        if (vnic < _local_work.size()) {
            _local_work[vnic].tokens -= static_cast<int64_t>(woke);
        }
        if (vnic < _vnic_poller_wakes.size()) {
            _vnic_poller_wakes[vnic].add(woke);
        }
    }
}

void engine::receive_gsi(uint16_t vnic, const roce_packet& p, const inbound_packet& in) {
    // Security groups do not apply here: the CM agent applies the vNIC's rdma rules to each
    // REQ itself, so that a refused peer gets a REJ instead of silence.
    if (p.opcode != opcode::ud_send_only || p.deth == nullptr || p.payload.size() < gsi_mad_bytes) {
        drop(engine_drop::wrong_transport);
        return;
    }
    // IBTA 13.5.1: QP1 accepts only the GSI Q_Key, and MADs travel QP1 to QP1. A tenant's UD
    // QP can carry neither (it may not hold a controlled Q_Key and its QPN is not 1), so this
    // refuses every CM MAD a tenant forges from its own QP.
    if (p.deth->qkey() != gsi_qkey || p.deth->src_qp() != gsi_qpn) {
        drop(engine_drop::gsi_forged);
        return;
    }
    gsi_datagram d;
    d.vnic = vnic;
    d.remote_ip_be = in.src_ip_be;
    if (in.ipv6) {
        std::memcpy(d.remote_ip6.data(), in.src_ip6, d.remote_ip6.size());
    }
    std::memcpy(d.mad.data(), p.payload.data(), gsi_mad_bytes);
    _gsi.push_rx(d);
}

unsigned engine::send_gsi(packet_port& port) {
    unsigned sent = 0;
    for (const gsi_datagram& d : _gsi.take_tx()) {
        const opcode_info& info = opcode_info_of(opcode::ud_send_only);
        const uint32_t roce_len = info.header_bytes + gsi_mad_bytes + icrc_bytes;
        const bool ipv6 = d.over_ipv6();
        const uint32_t l2_l4 = frame_l2_l4_bytes_for(ipv6);
        uint8_t* frame = port.begin_frame(l2_l4 + roce_len);
        if (frame == nullptr) {
            continue;  // no buffer: lost, as on a congested wire; the CM retransmits
        }
        bth_fields bth;
        bth.opcode = opcode::ud_send_only;
        bth.dest_qp = gsi_qpn;
        bth.psn = _gsi_psn++ & 0xFF'FFFF;
        ext_fields ext;
        ext.qkey = gsi_qkey;
        ext.src_qp = gsi_qpn;
        if (ipv6) {
            write_frame_headers_ipv6(frame, d.local_mac, d.local_ip6, d.remote_ip6, 0xC001,
                                     d.traffic_class, 0, 0, roce_len);
        } else {
            write_frame_headers(frame, d.local_mac, d.local_ip_be, d.remote_ip_be, 0xC001,
                                d.traffic_class, roce_len);
        }
        build_roce_headers(frame + l2_l4, info.header_bytes, bth, ext);
        std::memcpy(frame + l2_l4 + info.header_bytes, d.mad.data(), gsi_mad_bytes);
        seal_icrc(frame, roce_len);
        if (ipv6) {
            port.end_frame_ipv6(d.vnic, d.remote_ip6, l2_l4 + roce_len);
        } else {
            port.end_frame(d.vnic, d.remote_ip_be, l2_l4 + roce_len);
        }
        ++sent;
    }
    return sent;
}

bool engine::prepare_sleep() {
    _doorbells.arm(own_doorbell());  // before the last look: a ring after it ends the wait
    if (_calls_pending.load(std::memory_order_acquire) || _gsi.tx_pending()) {
        return false;
    }
    // A vNIC over its local-work allowance has no work the worker could do before it refills
    // (the nap is shorter than that), and its clients need not wake it: the worker comes anyway.
    auto waits_for_allowance = [this](std::size_t vnic) {
        return vnic < _local_work.size() && _local_work[vnic].tokens <= 0;
    };
    // Parked QPs ask for the doorbell already; the queued ones do from now on, and every page
    // that may wake the worker says it sleeps. Only queued QPs are looked at: the cost of going
    // to sleep does not grow with the idle QPs tenants hold either. A vNIC waiting for its
    // allowance is not asked at all: its queued QPs' flags stay cleared (queue_visit), so a
    // tenant keeping a thousand QPs full costs each sleep one store, not a store to a line its
    // shim reads on every post for each QP, twice.
    for (std::size_t vnic = 0; vnic < _turns.size(); ++vnic) {
        const bool wakes = !waits_for_allowance(vnic);
        if (auto* page = _doorbells.page_of(static_cast<uint16_t>(vnic)); page != nullptr) {
            verbs_proto::set_worker_sleeping(*page, wakes);
        }
        _asked_to_ring[vnic] = wakes ? 1 : 0;
        if (!wakes) {
            continue;
        }
        const vnic_turns& turns = _turns[vnic];
        for (std::size_t i = 0; i < turns.size; ++i) {
            want_doorbell(*turns.at(i));
        }
        _counters.sleep_asks.add(turns.size);
        // Engines made with no slots grow their turns with the QPs; their counters do not.
        if (turns.size > 0 && vnic < _vnic_sleep_asks.size()) {
            _vnic_sleep_asks[vnic].add(turns.size);
        }
    }
    verbs_proto::fence_after_wanting_doorbell();
    bool work = false;
    for (std::size_t vnic = 0; vnic < _turns.size() && !work; ++vnic) {
        if (waits_for_allowance(vnic)) {
            continue;
        }
        const auto* page = _doorbells.page_of(static_cast<uint16_t>(vnic));
        work = page != nullptr && verbs_proto::anything_posted(*page);
        const vnic_turns& turns = _turns[vnic];
        for (std::size_t i = 0; i < turns.size && !work; ++i) {
            work = turns.at(i)->has_work();
        }
    }
    // A call queued meanwhile is work too. Either way the worker stays up, so nothing it just
    // asked of the shims may stay asked: pages saying it sleeps and QPs wanting the doorbell
    // would have every post ring one (a system call) until its next sleep.
    if (work || _calls_pending.load(std::memory_order_acquire)) {
        after_sleep();
        return false;
    }
    return true;
}

void engine::sleep(uint64_t us) {
    _doorbells.wait(us);
}

bool engine::after_sleep() {
    for (std::size_t vnic = 0; vnic < _turns.size(); ++vnic) {
        if (auto* page = _doorbells.page_of(static_cast<uint16_t>(vnic)); page != nullptr) {
            verbs_proto::set_worker_sleeping(*page, false);
        }
        if (_asked_to_ring[vnic] == 0) {
            continue;
        }
        _asked_to_ring[vnic] = 0;
        const vnic_turns& turns = _turns[vnic];
        for (std::size_t i = 0; i < turns.size; ++i) {
            turns.at(i)->ring().set_doorbell_wanted(verbs_proto::doorbell_not_wanted);
        }
    }
    bool own_rang = false;
    if (_doorbells.rung_since_armed(own_doorbell(), own_rang) > 0 || own_rang) {
        _counters.doorbells.add();
        return true;
    }
    return false;
}

std::vector<qp_report> engine::report(std::vector<qp_report>* retired) const {
    std::vector<std::shared_ptr<queue_pair>> qps;
    {
        std::lock_guard lock(_report_mutex);
        qps = _reported;
        if (retired != nullptr) {
            retired->clear();
            for (const auto& [vnic, sum] : _retired) {
                retired->push_back(sum);
            }
        }
    }
    std::vector<qp_report> out;
    for (const auto& qp : qps) {
        const queue_pair_stats& s = qp->stats();
        qp_report r;
        r.vnic = qp->vnic();
        r.qpn = qp->qpn();
        r.type = qp->type();
        r.owner = qp->owner();
        r.remote_ip_be = qp->remote_ip_be();
        r.remote_ip6 = qp->remote_ip6();
        r.remote_qpn = qp->remote_qpn();
        r.state = s.state.load(std::memory_order_relaxed);
        r.next_psn = s.next_psn.load(std::memory_order_relaxed);
        r.una_psn = s.una_psn.load(std::memory_order_relaxed);
        r.expected_psn = s.expected_psn.load(std::memory_order_relaxed);
#define JAKIRO_QP_COUNTER(name) r.name = s.name.read();
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
        r.rate_bps = s.rate_bps.load(std::memory_order_relaxed);
        out.push_back(r);
    }
    return out;
}

void engine::forget_vnic(uint16_t vnic) {
    _doorbells.set(vnic, nullptr);
    // What the slot counted and owed was the old vNIC's: a vNIC given the slot later starts at
    // zero, with a full local-work allowance (its rate comes with the next snapshot).
    for (auto* counters :
         {&_vnic_visits, &_vnic_poller_wakes, &_vnic_sleep_asks, &_over_allowance}) {
        if (vnic < counters->size()) {
            (*counters)[vnic].reset();
        }
    }
    if (vnic < _local_work.size()) {
        _local_work[vnic] = local_work{.per_s = _local_work[vnic].per_s};
    }
    std::lock_guard lock(_report_mutex);
    _retired.erase(vnic);
}

}  // namespace jakiro::rnic
