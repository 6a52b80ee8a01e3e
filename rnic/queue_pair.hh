#pragma once
// One QP of the software RNIC, of any transport: for RC, the requester (send queue → packets,
// ACKs, retransmission) and the responder (packets → memory and receive completions, ACK/NAK)
// of IBTA vol. 1 ch. 9, over the rings the shim posts into and the MRs it registered.
//
// The unreliable transports are the same object, as in rxe (one QP engine, the transport
// decides what is acknowledged): a UC QP sends SENDs and WRITEs, completes a WR once its last
// packet left, and its responder drops a message on a PSN gap, a missing receive or a bad rkey,
// silently (IB spec 9.7.5.2.2: no ACKs, no NAKs, no retries). A UD QP sends one packet per SEND to
// the address in its WQE with a DETH (Q_Key, source QP), and its responder checks the Q_Key and
// delivers the 40-byte GRH area (the IPv4 header in its last 20 bytes) before the payload.
//
// Requester: WQEs are copied out of the ring once (local keys checked then, pinned), get
// their PSN range, and are sent up to a window of unacknowledged packets. `una` is the oldest
// unacknowledged PSN; ACKs and in-order READ responses move it; a NAK, a sequence gap in READ
// responses or the local ACK timeout rewinds the send pointer to it (go-back-N); RNR NAKs wait
// out the responder's timer. WRs complete strictly in order.
// Responder: in-order packets are executed (SEND into the next receive WQE, WRITE and READ
// through the rkey, checked for PD, rights and bounds), duplicates are re-ACKed (READs are
// executed again), a gap is NAKed once. ACKs are coalesced: at most one per QP per poll, and
// none leaves ahead of a READ response owed before it.
//
// One header, one file per role (as rxe's rxe_req.c, rxe_comp.c, rxe_resp.c): queue_pair.cc (the
// object, poll and receive, flush), requester.cc, completer.cc, responder.cc (RC and UC, in
// named steps), unreliable.cc (UC's abandoned messages, UD), local_path.cc (intra-host) and
// dcqcn.cc; queue_pair_parts.hh is what they share.
//
// Thread-safety: everything here runs on the engine's thread (the control thread reaches a
// QP only through engine::call).

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "qos/rate_control.hh"
#include "rnic/packet_port.hh"
#include "rnic/qp_state.hh"
#include "rnic/queues/cq_ring.hh"
#include "rnic/queues/mr_table.hh"
#include "rnic/queues/qp_ring.hh"
#include "rnic/queues/srq_ring.hh"
#include "rnic/timer_queue.hh"
#include "rnic/wire/headers.hh"
#include "rnic/wire/ip_address.hh"
#include "stats/counter.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::handover {
class image_writer;
class section_reader;
}  // namespace jakiro::handover

namespace jakiro::rnic {

class packet_port;
class engine;

// Who hears about a QP's asynchronous errors (IBV_EVENT_QP_*): the channel server.
struct qp_event_sink {
    void (*raise)(void* context, uint64_t client, uint32_t type, uint32_t qp_handle) = nullptr;
    void* context = nullptr;
};

// Identity of the vNIC a QP belongs to, as its packets show it.
struct qp_endpoint {
    uint16_t vnic = 0;  // datapath slot
    std::array<uint8_t, 6> mac{};
    uint32_t ip_be = 0;
    ipv6_address ip6{};  // all zero: the vNIC has no IPv6 address (GID index 1 is its)
};

struct queue_pair_setup {
    // RC; UC and UD run the same requester and responder with acknowledgements off (below).
    ibv_qp_type type = IBV_QPT_RC;
    qp_endpoint local;
    uint32_t qpn = 0;  // == the QP handle
    uint32_t pd = 0;
    uint64_t owner = 0;  // client id
    std::shared_ptr<verbs::completion_queue> send_cq;
    std::shared_ptr<verbs::completion_queue> recv_cq;
    std::unique_ptr<verbs::qp_ring> ring;
    // The vNIC's MR table, shared: the QP may outlive the vNIC's resources for as long as its
    // removal waits behind a stalled worker (engine::on_timeout::run_later), and must still
    // find keys (none: the table is emptied when its clients go) rather than freed memory.
    std::shared_ptr<const verbs::mr_table> mrs;
    bool sq_sig_all = false;
    uint32_t max_send_sge = 0;
    uint32_t max_recv_sge = 0;
    uint32_t max_inline = 0;
    qp_device_limits limits;
    qp_event_sink events;
    // Non-null: receives come from this shared receive queue (its PD and max_sge check them),
    // never from `ring`'s RQ (one slot the shim never posts to: ibv_post_recv refuses).
    std::shared_ptr<verbs::shared_receive_queue> srq;
};

// What `jakiroctl qps` shows; written by the engine thread, read anywhere.
struct queue_pair_stats {
#define JAKIRO_QP_COUNTER(name) stats::counter name;
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
    std::atomic<uint64_t> rate_bps{0};  // a gauge: DCQCN's current sending rate
    // Snapshot of the protocol state.
    std::atomic<uint32_t> state{IBV_QPS_RESET};
    std::atomic<uint32_t> next_psn{0};
    std::atomic<uint32_t> una_psn{0};
    std::atomic<uint32_t> expected_psn{0};
    std::atomic<uint32_t> msn{0};
};

class queue_pair {
  public:
    // WQEs one visit (poll) may fetch from the send queue, WRs one visit or one received
    // packet may complete, and WRs one visit may flush with IBV_WC_WR_FLUSH_ERR: each is a
    // 512-byte copy plus MR lookups or a completion, so a visit stays within a few
    // microseconds however deep the client's rings are; the rest waits for the next visit
    // (has_work() keeps the worker awake for it).
    static constexpr uint32_t wqe_budget = 64;

    explicit queue_pair(queue_pair_setup setup);
    ~queue_pair();
    queue_pair(const queue_pair&) = delete;
    queue_pair& operator=(const queue_pair&) = delete;

    // A restarted jakirod (qp_handover.cc): the QP's protocol state as fields of the section
    // the caller has open, and the QP built again from them in the successor, over `setup`'s
    // rings, CQs, MRs and SRQ as the caller restored them from the same shared memory (the
    // ring's memfd attached with qp_ring::attach, its indices left to restore). Frames in
    // flight meanwhile are lost, as on a lossy fabric, and recovered the same way; timers
    // restart at the restored QP's first poll or packet. restore() returns null, with the
    // reader failed and its error saying why, for fields that cannot be this QP's. save() runs
    // where the QP does (engine::call) or with its worker stopped; restore() before the QP is
    // added to its engine. The old QP must not punch its ring out when it goes: its owner calls
    // ring().leave_pages_to_successor() first.
    void save(handover::image_writer& w) const;
    static std::unique_ptr<queue_pair> restore(queue_pair_setup setup, handover::section_reader& r);

    // ibv_modify_qp: 0 or an errno, all or nothing.
    int modify(const ibv_qp_attr& attr, int mask);
    void query(ibv_qp_attr& attr, ibv_qp_cap& cap, bool& sq_sig_all) const;

    // Fetches posted WQEs, sends packets, completes and flushes WRs, runs the timers and sends
    // a pending ACK, spending at most `units` of work (counted down; see work units below).
    // Returns the packets sent. With no units left it only runs the timers and sends an ACK
    // it owes.
    //
    // A unit of work is what one packet costs the worker. Everything else a visit does is
    // charged in the same units: a WQE that sends no packet (a memory-window bind or
    // invalidate, a WR that fails locally) costs one, a completion written costs one, a WR
    // flushed costs one, a futex wake for a program napping on its CQ costs one. So a tenant
    // cannot buy worker time with work that never reaches the wire; the engine gives each vNIC
    // the same units per poll (engine.cc), and charges a visit that spent none one unit.
    unsigned poll(packet_port& port, uint64_t now_ns, unsigned& units);
    // One packet addressed to this QP whose ICRC and source (the RCFT check) the engine
    // has already verified.
    void receive(const roce_packet& p, packet_port& port, uint64_t now_ns);
    // Anything posted or owed that poll() would act on right now?
    bool has_work() const;
    // Must the engine keep visiting it without being told? Work now (has_work), or something a
    // later visit finishes by itself: WRs taken and not yet retired (their ACKs, retransmission,
    // RNR and ACK-request timers), a memory-to-memory message under way, a restored QP's
    // clock. A QP without any of these gains work only from outside: a post (the shim rings its
    // doorbell), a packet (engine::receive), a control call (modify) or its peer on the same
    // host (enter_error); each of those queues it again (engine::queue_visit).
    bool wants_visits() const;
    // Does it wait for nothing but a timer of its own? WRs in flight whose ACK is not in, no
    // work now, and nothing a visit would do before `due_ns`: its retransmit timer's expiry or
    // the end of an RNR wait (UINT64_MAX: no timer runs, the local ACK timeout being 0). Until
    // then only a packet, a post (the shim rings its doorbell) or a control call brings it
    // work, and each of those queues it, so the engine need not visit it (engine.cc after_visit).
    // False when something else may need a visit (wants_visits), or in a state whose visits do
    // not run the timers.
    bool waits_for_timer(uint64_t& due_ns) const;
    // Does a receive posted now need a visit? Only in ERR, which flushes it; in any other state
    // the QP takes it when a message comes, and not before (verbs_abi/rings.hh "Receives").
    bool receives_need_visits() const { return _machine.state() == IBV_QPS_ERR; }
    // The engine's bookkeeping of the QP's turns (engine.cc): whether it is in its vNIC's queue
    // of QPs to visit, since when its visits found nothing to do, and its place in the engine's
    // timer_queue while it waits there instead.
    struct turn_state {
        bool queued = false;
        uint64_t idle_since_ns = 0;                   // 0: the last visit found it busy
        uint64_t due_ns = 0;                          // timer_queue: when it is due
        uint32_t timer_at = timer_queue::not_queued;  // timer_queue: its place, if there
    };
    turn_state& turn() { return _turn; }
    // The path MTU's payload bytes per packet (IB MTU, ibv_modify_qp).
    uint32_t path_mtu_bytes() const { return _mtu; }
    // The last poll stopped with requests left for a reason that may last: DCQCN's pacer, an
    // RNR wait, or no frame buffer from the port (the shaper tells DHTB, qos/scheduler.hh).
    bool held_back() const { return _held_back; }
    // The engine that runs it (for the intra-host shortcut's peer lookup); set by add_qp.
    void attach(engine* e) { _engine = e; }

    // DCQCN (docs/architecture.md §6): the receiver's CNP pacing for this QP, a CNP from the peer
    // (cut the sending rate), and sending one to the peer.
    qos::cnp_pacer& cnp_pacer() { return _cnp_pacer; }
    void on_cnp(uint64_t now_ns);
    void send_cnp(packet_port& port);
    uint64_t rate_bps() const { return _rate.rate_bps(); }
    // DCQCN's line rate (where the QP starts and what recovery climbs back to): its vNIC's QoS
    // rate, or dcqcn_line_rate_bps for a vNIC that is not shaped (`rate_bps` 0). Cutting from
    // a rate the vNIC can never reach would make the first CNPs bite on nothing. A QP that was
    // never cut moves to the new rate at once; a cut one keeps its rate and recovers towards
    // the new ceiling (and is lowered to it if it is lower).
    void set_line_rate(uint64_t now_ns, uint64_t rate_bps);
    uint64_t line_rate_bps() const { return _line_rate_bps; }

    // Security groups (docs/architecture.md §7). The policy generation this QP's peer was last
    // admitted under; unchecked_generation after its address vector changed. The engine compares it
    // with the generation of the tables it runs with and admits the peer again on a mismatch.
    static constexpr uint32_t unchecked_generation = UINT32_MAX;
    uint32_t admitted_generation() const { return _admitted_generation; }
    void set_admitted_generation(uint32_t generation) { _admitted_generation = generation; }
    // RC or UC with a peer (RTR, RTS, SQD, SQE): what a policy change must check again.
    bool connected() const;
    // The peer is no longer allowed: IBV_EVENT_QP_FATAL to the owner, ERR, and the next poll
    // flushes every outstanding WR. revoked() stays true until the QP is reset.
    void revoke();
    bool revoked() const { return _revoked; }

    uint32_t qpn() const { return _s.qpn; }
    ibv_qp_type type() const { return _s.type; }
    uint64_t owner() const { return _s.owner; }
    uint16_t vnic() const { return _s.local.vnic; }
    uint32_t remote_ip_be() const { return _remote_ip_be; }
    // RoCE v2 over IPv6: the peer is remote_ip6(), and remote_ip_be() is 0.
    bool remote_is_ipv6() const { return _remote_is_ipv6; }
    const ipv6_address& remote_ip6() const { return _remote_ip6; }
    uint32_t remote_qpn() const { return _machine.attr().dest_qp_num; }
    ibv_qp_state state() const { return _machine.state(); }
    verbs::qp_ring& ring() { return *_s.ring; }
    const queue_pair_stats& stats() const { return _stats; }
    const verbs::completion_queue& send_cq() const { return *_s.send_cq; }
    const verbs::completion_queue& recv_cq() const { return *_s.recv_cq; }

  private:
    // Whether address vector `ah` names a peer this QP's vNIC can reach (modify's check).
    bool reachable(const ibv_ah_attr& ah) const;
    // poll() without its counting.
    unsigned visit(packet_port& port, uint64_t now_ns, unsigned& units);
    // A send WQE as the engine keeps it: the copy, its local buffers (checked and pinned),
    // its PSN range and progress.
    struct send_op {
        verbs_proto::send_wqe wqe;
        uint32_t length = 0;
        uint32_t first_psn = 0;
        uint32_t packets = 0;        // PSNs it occupies (a READ: its responses)
        uint32_t read_received = 0;  // READ: response packets landed
        ibv_wc_status local_error = IBV_WC_SUCCESS;
        bool done = false;
        bool signaled = false;
        uint8_t sges = 0;
        std::array<std::byte*, verbs_proto::wqe_max_sge> sge_data{};
        std::array<uint32_t, verbs_proto::wqe_max_sge> sge_len{};
        std::array<std::shared_ptr<const verbs::mr_entry>, verbs_proto::wqe_max_sge> pins;
    };
    struct recv_op {
        verbs_proto::recv_wqe wqe;  // as taken (no zeroing: take_recv writes it first); a
                                    // restart looks its SGEs up again
        uint64_t wr_id = 0;
        uint32_t length = 0;
        ibv_wc_status local_error = IBV_WC_SUCCESS;
        uint8_t sges = 0;
        std::array<std::byte*, verbs_proto::wqe_max_sge> sge_data{};
        std::array<uint32_t, verbs_proto::wqe_max_sge> sge_len{};
        std::array<std::shared_ptr<const verbs::mr_entry>, verbs_proto::wqe_max_sge> pins;
    };
    // A READ the responder still owes responses for (new or re-executed), or the ACK of an
    // atomic executed behind READs still answering (answers leave in PSN order).
    struct read_job {
        uint32_t psn = 0;  // of the next response
        uint32_t remaining_packets = 0;
        uint32_t first_offset_packets = 0;  // position of `psn` in the whole READ
        uint32_t total_packets = 0;
        uint32_t length = 0;
        uint32_t msn = 0;
        uint32_t rkey = 0;  // what the request named: a restart looks `data` up again
        uint64_t va = 0;
        std::byte* data = nullptr;
        std::shared_ptr<const verbs::mr_entry> pin;
        // An atomic's ACK carrying `orig` (one packet, no data). Not kept across a restart:
        // the requester asks again and the replay cache answers.
        bool atomic = false;
        uint64_t orig = 0;
    };

    // ---- requester
    // Takes at most `units` (and wqe_budget) posted WQEs; returns how many of them send
    // nothing (their cost in units; the others are paid for by their packets).
    unsigned fetch_sends(uint64_t now_ns, unsigned units);
    void check_local_buffers(send_op& op);
    unsigned send_packets(packet_port& port, uint64_t now_ns, unsigned budget);
    bool emit_request(packet_port& port, send_op& op, uint32_t index_in_op, uint64_t now_ns);
    // Whether the request packet about to leave asks for an ACK (AckReq); counts it.
    bool asks_for_ack(const send_op& op, bool last, uint64_t now_ns);
    // Whether the op after the one being sent is fetched and will be sent behind it, asking
    // for an ACK itself if nothing follows it (a plain SEND/WRITE that did not fail locally).
    bool next_op_follows() const;
    // When packets left without AckReq and nothing has followed them for ack_request_gap_ns,
    // sends the last of them again asking for an ACK; returns the packets sent (0 or 1).
    unsigned ask_again_for_ack(packet_port& port, uint64_t now_ns);
    bool awaits_ack_probe() const { return _packets_since_ack_req > 0 && _una != _next_psn; }
    void on_ack_psn(uint32_t psn, uint64_t now_ns);
    void on_response(const roce_packet& p, packet_port& port, uint64_t now_ns);
    void on_read_response(const roce_packet& p, uint64_t now_ns);
    void on_atomic_ack(const roce_packet& p, uint64_t now_ns);
    // The READ or atomic a response at `psn` (== una) answers; the requests before it are
    // complete (responses come in order). nullptr if an earlier one still owes a response.
    send_op* op_answered_by(uint32_t psn);
    // A response at `psn` landed: una moves past it, the timers restart, WRs retire.
    void response_progress(uint32_t psn, uint64_t now_ns);
    // una past the ops an ACK acknowledged while a READ or atomic before them still missed
    // its response (on_ack_psn marks them done), now that nothing before them is missing.
    void skip_acknowledged();
    // A response at `psn` acknowledges the requests before its own READ or atomic.
    void acknowledge_before_response(uint32_t psn, uint64_t now_ns);
    void go_back(uint32_t psn);
    // Points the send pointer at `psn` (an ACK that overtook a rewind moves it forward).
    void move_send_pointer(uint32_t psn);
    bool psn_sent(uint32_t psn) const;  // in [una, sent_high)
    // Completes finished WRs in order, at most `budget` per call (the rest on the next event
    // or visit: has_work() says so) and, when `units` is given, writing no more completions
    // than it holds. Returns the completions written.
    unsigned retire_sends(uint32_t budget = wqe_budget, unsigned* units = nullptr);
    bool retire_pending() const;  // the oldest unretired WR is finished (or failed locally)
    bool initiator_depth_reached() const;  // max_rd_atomic READs/atomics await responses
    void run_timers(uint64_t now_ns);
    void fail_requester(uint32_t psn, ibv_wc_status status);

    // ---- intra-host shortcut: both QPs in this engine, data memory to memory
    // The message the shortcut is moving. A long one moves in slices, as many bytes per visit
    // as the packets of the same budget would carry, so that no tenant holds the worker with
    // one large WR. WRITE and READ keep the peer's memory pinned here; a SEND's receive WQE is
    // the peer's message in progress (_in_send), which its flush completes if it fails.
    struct local_transfer {
        bool active = false;
        uint32_t moved = 0;
        std::byte* remote = nullptr;  // WRITE: destination, READ: source (the peer's MR)
        std::shared_ptr<const verbs::mr_entry> pin;
    };
    // The QP of this engine connected back to this one and able to receive, if any.
    queue_pair* local_peer(packet_port& port) const;
    // Both ends checked under the policy the engine runs with.
    bool checked_with(const queue_pair& peer) const;
    unsigned send_local(queue_pair& peer, packet_port& port, uint64_t now_ns, unsigned budget);
    // DHTB and DCQCN for a slice of `packets` packets' worth (`frames_bytes` as frames) whose
    // data goes to `receiver` (the peer, or this QP for a READ).
    void meter_local(queue_pair& receiver, packet_port& port, uint64_t now_ns, uint32_t packets,
                     uint32_t frames_bytes);
    enum class local_result { started, done, rnr, failed };
    // The responder's half of a message of `requester`, in three steps. begin_local checks it
    // and takes what it needs (keys, a receive WQE; an atomic executes at once: `done`). On
    // `failed`, `status` is what the requester's WR completes with.
    local_result begin_local(const send_op& op, const queue_pair& requester, local_transfer& t,
                             ibv_wc_status& status);
    // Still the message `t` began (the peer was not reset under it)?
    bool continues_local(const send_op& op) const;
    // Does the rkey of a WRITE or READ `t` is moving still grant the rest of it, the same
    // memory? Checked before every slice after the first, since a slice may come visits later:
    // a window invalidated (LOCAL_INV, SEND_WITH_INV, dealloc), rebound or an MR deregistered
    // meanwhile ends the message with a remote access error.
    bool still_reaches(const send_op& op, const local_transfer& t) const;
    // `t` restored mid-message: its WRITE or READ's memory looked up again (left null when
    // the rkey no longer grants it, which still_reaches then refuses).
    void resume_local(const send_op& op, local_transfer& t) const;
    void place_local(const send_op& op, local_transfer& t, uint32_t len);
    void finish_local(const send_op& op, const queue_pair& requester, local_transfer& t);
    void complete_local_recv(const send_op& op, const queue_pair& requester, ibv_wc_status status,
                             uint32_t opcode, uint32_t len);

    // ---- responder (responder.cc): RC and UC requests walk the same named steps
    // What a step decided about an inbound request; the first that is not `proceed` ends the
    // walk and answer() acts on it.
    enum class verdict : uint8_t {
        proceed,               // on to the next step
        answered,              // executed and answered already (READ queued, atomic ACKed)
        duplicate,             // an old PSN: RC answers it again, never executes it twice
        nak_sequence_error,    // a PSN ahead of the expected one: NAK once (RC)
        nak_invalid_request,   // malformed, out of sequence, not an operation of the QP
        nak_length_error,      // a SEND longer than its receive WQE (IBV_WC_LOC_LEN_ERR)
        nak_remote_access,     // the rkey, the range or the QP's access flags refuse it
        nak_remote_operation,  // the receive WQE is bad (its own error status)
        rnr,                   // no receive WQE: RNR NAK (RC), the message is lost (UC)
        drop,                  // dropped silently (UC: the rest of a message already lost)
    };
    // One inbound request on its way through the steps: the packet, and what an earlier
    // step found for a later one (the memory of a READ or an atomic, from check_rkey).
    struct inbound_request {
        const roce_packet& p;
        verbs::mr_lookup target{};
    };
    void on_request(const roce_packet& p, packet_port& port);
    verdict check_psn(inbound_request& r);
    verdict check_op_seq(inbound_request& r);
    verdict check_op_valid(inbound_request& r);
    verdict check_length(inbound_request& r);
    verdict check_rkey(inbound_request& r);
    verdict check_resource(inbound_request& r);
    verdict execute(inbound_request& r, packet_port& port);
    verdict complete_request(inbound_request& r);
    void acknowledge(inbound_request& r, packet_port& port);
    void answer(verdict v, inbound_request& r, packet_port& port);
    void duplicate_request(inbound_request& r, packet_port& port);
    void replay_read(inbound_request& r);
    void queue_read(inbound_request& r, uint32_t psn);
    void release_recv_pins();
    // The receive WQE in hand (_recv) ends, on the packet path and the local path alike:
    // recv_completion() starts its CQE, complete_recv() drops its pins, retires its RQ (or SRQ)
    // slot and writes the CQE.
    verbs_proto::cqe recv_completion(ibv_wc_status status, uint32_t opcode,
                                     uint32_t byte_len) const;
    void complete_recv(const verbs_proto::cqe& c);
    bool take_recv(recv_op& out);
    // Looks up a receive WQE's buffers (PD, rights, bounds) into `out`; `out.local_error` says
    // why one does not resolve. take_recv and a restored QP's message in progress use it.
    void resolve_recv(const verbs_proto::recv_wqe& w, uint32_t pd, uint32_t max_sge,
                      recv_op& out) const;
    unsigned send_read_responses(packet_port& port, uint64_t now_ns, unsigned budget);
    // DCQCN pacing: may a data packet leave now? And charging one that left.
    bool pacer_open(uint64_t now_ns);
    // Below the line rate after a CNP (memory-to-memory messages are paced only then: at the
    // line rate they move at memory speed).
    bool dcqcn_slowed() const { return _rate.rate_bps() < _line_rate_bps; }
    void pacer_charge(uint64_t now_ns, uint32_t frame_len);
    void send_ack(packet_port& port, uint8_t syndrome, uint32_t psn);
    // Sends the pending ACK, or the owed NAK, once no READ response before its PSN is still
    // owed; true if sent.
    bool send_due_ack(packet_port& port);
    // A NAK at the expected PSN: now, or once the READ responses owed before it have left.
    void send_nak(packet_port& port, uint8_t syndrome);
    void replay_atomic(const roce_packet& p, packet_port& port);
    void send_atomic_ack(packet_port& port, uint32_t psn, uint64_t orig);
    // The atomic ACK now, or queued behind the READ responses still owed before it.
    void answer_atomic(packet_port& port, uint32_t psn, uint64_t orig);
    void responder_error(packet_port& port, verbs_proto::event_type event, uint8_t syndrome,
                         ibv_wc_status recv_status);

    // ---- unreliable transports (unreliable.cc)
    bool reliable() const { return _s.type == IBV_QPT_RC; }
    // UC: a message in progress is abandoned (its receive WQE waits for the next one).
    void abandon_message();
    // UD: a datagram whose Q_Key is the QP's, into the next receive WQE behind its GRH area.
    void on_datagram(const roce_packet& p);
    verdict check_qkey(const roce_packet& p) const;
    void deliver_datagram(const roce_packet& p, recv_op& r);

    // ---- a restart (qp_handover.cc)
    bool restore_fields(handover::section_reader& r);
    // A restored WQE's buffers, looked up again through the MR table by key and address (and
    // pinned again); false when the saved op cannot be what this QP took (a corrupt image).
    bool repin_send(send_op& op);
    bool repin_recv();
    bool repin_write();
    bool repin_read(read_job& job);
    // The restored QP's first poll or packet: its timers restart at `now_ns`.
    void restart_clock(uint64_t now_ns);

    // ---- both
    bool complete(verbs::completion_queue& cq, const verbs_proto::cqe& c);
    void enter_error();
    // Does the QP itself (IBV_QP_ACCESS_FLAGS) let peers do `right` (IBV_ACCESS_REMOTE_*)? The
    // responder checks it as well as the MR's rights: either refusing is a remote access error.
    bool grants(unsigned right) const { return (_machine.attr().qp_access_flags & right) != 0; }
    // The target of an inbound RDMA WRITE or READ. A zero-length one is not checked against
    // any MR (IB spec C9-88: it may carry any R_Key and VA; UCX flushes with one), so it
    // succeeds with no bytes to touch.
    verbs::mr_lookup remote_target(uint32_t rkey, uint64_t va, uint64_t length,
                                   uint32_t access) const;
    // In ERR: completes up to `limit` WRs with IBV_WC_WR_FLUSH_ERR, oldest first; returns how
    // many.
    unsigned flush(uint32_t limit);
    bool flush_pending() const;  // anything left for flush()
    void reset();
    // Sizes and offsets of frames to the peer's address family (_frame_l2_l4).
    uint32_t frame_bytes(uint8_t opcode, uint32_t payload_len) const;
    uint8_t* begin_packet(packet_port& port, uint8_t opcode, uint32_t payload_len,
                          uint32_t& header_offset);
    void finish_packet(packet_port& port, const bth_fields& bth, const ext_fields& ext,
                       uint8_t* frame, uint32_t payload_len);
    // UD: to `dst_ip_be`, or to `dst_ip6` when `ipv6`, instead of the connected peer (the
    // datagram was begun for that family: set_datagram_family).
    void finish_packet_to(packet_port& port, uint32_t dst_ip_be, const bth_fields& bth,
                          const ext_fields& ext, uint8_t* frame, uint32_t payload_len);
    void finish_packet_to_ipv6(packet_port& port, const ipv6_address& dst_ip6,
                               const bth_fields& bth, const ext_fields& ext, uint8_t* frame,
                               uint32_t payload_len);
    // UD: the next datagram's frames are of this family (a UD QP has no peer of its own).
    void set_datagram_family(bool ipv6) { _frame_l2_l4 = frame_l2_l4_bytes_for(ipv6); }
    // The RoCE headers, pad and ICRC of a frame whose IP and UDP headers are written.
    void seal_packet(const bth_fields& bth, const ext_fields& ext, uint8_t* frame,
                     uint32_t payload_len, uint32_t roce_len);
    void publish_stats();

    queue_pair_setup _s;
    engine* _engine = nullptr;
    turn_state _turn;
    qp_state_machine _machine;
    queue_pair_stats _stats;
    uint32_t _remote_ip_be = 0;
    bool _remote_is_ipv6 = false;
    ipv6_address _remote_ip6{};
    uint32_t _frame_l2_l4 = frame_l2_l4_bytes;  // Ethernet, IP and UDP of frames to the peer
    uint32_t _admitted_generation = unchecked_generation;
    bool _revoked = false;
    uint16_t _udp_src_port = 0;
    uint32_t _mtu = 1024;
    bool _held_back = false;       // see held_back()
    bool _clock_restarts = false;  // restored: the first poll or packet restarts the timers

    // requester
    std::vector<send_op> _sends;  // indexed by ring index & (sq capacity - 1)
    uint32_t _send_index = 0;     // next op to transmit from (ring index)
    uint32_t _psn_cursor = 0;     // first PSN of the next fetched op
    uint32_t _next_psn = 0;       // PSN of the next packet to transmit
    uint32_t _una = 0;            // oldest unacknowledged PSN
    uint32_t _sent_high = 0;      // one past the highest PSN ever sent (a rewind keeps it)
    uint64_t _last_progress_ns = 0;
    uint32_t _packets_since_ack_req = 0;  // request packets sent since one asked for an ACK
    uint64_t _first_unasked_ns = 0;       // when the oldest of those left
    bool _asking_again = false;           // ask_again_for_ack is sending: AckReq is set
    uint32_t _retries_left = 0;
    uint32_t _rnr_retries_left = 0;
    uint64_t _rnr_resume_ns = 0;  // != 0: waiting out an RNR NAK
    uint64_t _rnr_wait_ns = 0;    // how long that wait is (a restart waits it again)
    bool _rewound_for_gap = false;
    bool _local_fallback = false;  // the shortcut met a half-done message: use packets
    local_transfer _local;

    // responder
    uint32_t _epsn = 0;
    uint32_t _msn = 0;
    bool _nak_sent = false;
    bool _ack_pending = false;
    // A sequence-error or RNR NAK (its syndrome) decided while READ responses before it were
    // still owed: it leaves after them, at the expected PSN (send_due_ack).
    bool _nak_owed = false;
    uint8_t _owed_nak = 0;
    uint32_t _ack_psn = 0;
    bool _in_send = false;     // a multi-packet SEND is under way into _recv
    bool _recv_held = false;   // UC: _recv was taken for a message that was abandoned
    bool _discarding = false;  // UC: dropping the rest of a message, up to its next first packet
    recv_op _recv;
    uint32_t _recv_offset = 0;
    bool _in_write = false;  // a multi-packet WRITE is under way
    std::byte* _write_data = nullptr;
    uint32_t _write_length = 0;
    uint32_t _write_offset = 0;
    std::shared_ptr<const verbs::mr_entry> _write_pin;
    // A WRITE through a memory window is looked up again at every packet (check_rkey): the
    // window's owner may invalidate or rebind it mid-message, and no byte may land after.
    bool _write_through_window = false;
    uint32_t _write_rkey = 0;
    uint64_t _write_va = 0;
    std::vector<read_job> _reads;  // FIFO, at most max_dest_rd_atomic + 1
    // The last atomics executed, by PSN: a duplicate request is answered from here.
    struct atomic_reply {
        uint32_t psn = 0;
        uint64_t orig = 0;
        bool valid = false;
    };
    std::array<atomic_reply, 32> _atomic_replies{};
    uint32_t _atomic_next = 0;
    bool _comm_established = false;
    bool _last_wqe_reached = false;  // on an SRQ: IBV_EVENT_QP_LAST_WQE_REACHED raised in ERR

    // congestion control
    qos::dcqcn_rate _rate;
    qos::cnp_pacer _cnp_pacer;
    uint64_t _measured_bps = 0;  // what the QP really sends (EWMA)
    uint64_t _window_start_ns = 0;
    uint64_t _window_bytes = 0;
    uint64_t _last_cnp_ns = 0;
    bool _ceiling_lowered = false;
    uint64_t _line_rate_bps;  // set_line_rate
};

// ibv_mtu → bytes (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5).
constexpr uint32_t mtu_bytes(uint32_t ibv_mtu) {
    return ibv_mtu >= 1 && ibv_mtu <= 5 ? 128u << ibv_mtu : 0;
}

}  // namespace jakiro::rnic
