#pragma once
// What an empty CQ poll does next. The "NIC" behind this shim is jakirod, a process on the same
// cores as the application: an application that spins on ibv_poll_cq (perftest, most RDMA
// code) takes the CPU time the device needs to produce the completions it waits for, and
// sched_yield() does not give it back (the scheduler's own work became a quarter of all
// samples). So after `spins` empty polls in a row each further empty poll naps `nap_ns` (the
// kernel's timer slack adds ~50 µs); a completion starts the spins over. A nap ends early when
// jakirod writes a completion into the CQ (verbs_proto::nap_until_completion): a program that
// polls hears of its completion as soon as one waiting on the CQ's completion channel would,
// instead of up to a whole nap (and its timer slack) later.
//
// The spins and the nap belong to the polling thread, not to one CQ: a program that polls
// several CQs in turn (UCX polls its receive and its send CQ on every progress call) waits for
// a completion in any of them, and a nap on the CQ it happened to poll last ran to its end
// while the completion sat in another (UCX's 8-byte tag latency on one host was 125 µs with
// such naps, 16 µs with none). So a thread naps on every CQ it found empty since its last
// completion, with one futex_waitv (Linux 5.16) on their napping words: jakirod's wake of any
// one ends the nap (verbs_proto::wake_napping_poller). Where futex_waitv is missing, the nap is
// on the CQ polled last, as a nap of fixed length would be.
//
// Measured on a 2-core host across two jakirods (ib_write_bw 64 KiB, ib_send_lat 64 B, MTU
// 9000, vnet uplink): spinning gave 0.82-1.04 GB/s and 380-432 µs typical latency, yielding
// 0.84-1.04 GB/s and 324-377 µs (after a 300 µs yield window), napping 1.54-1.92 GB/s and
// 68-126 µs. A program alone on dedicated cores may prefer to spin: JAKIRO_POLL_YIELD=0 in the
// environment turns the naps off.
//
// A CQ a thread remembers may be destroyed or resized by another thread: destroy_cq and
// resize_cq call retire_cq_rings() before they unmap a ring, which waits for naps in progress
// and makes every thread forget the CQs it remembers.
//
// Thread-safety: the spins and the remembered CQs are the calling thread's own;
// retire_cq_rings() from any thread.

#include <cstdint>

#include "verbs_abi/rings.hh"

namespace jakiro::verbs_shim::idle_backoff {

inline constexpr uint32_t spins = 64;
inline constexpr long nap_ns = 50'000;
// CQs a thread remembers at once; beyond, the one it found empty longest ago is forgotten.
inline constexpr unsigned max_cqs = 8;

// The calling thread found a completion: its spins start over and it forgets the empty CQs.
void on_progress();
// The calling thread found `ring` empty with its producer at `seen` (under the CQ's poll lock):
// true if it should now nap (nap(), once the lock is released).
bool after_empty_poll(verbs_proto::cq_ring_header& ring, uint32_t seen);
// The nap itself (none with JAKIRO_POLL_YIELD=0): up to `nap_ns`, over as soon as the producer
// of any CQ the thread found empty since its last completion moves.
void nap();
// Before a CQ ring is unmapped.
void retire_cq_rings();

// What the calling thread remembers (for tests): how many CQs, and whether `ring` is one.
unsigned remembered_cqs();
bool remembers(const verbs_proto::cq_ring_header& ring);

}  // namespace jakiro::verbs_shim::idle_backoff
