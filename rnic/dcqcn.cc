// DCQCN at the reaction point: a CNP lowers the QP's rate and the pacer holds packets to it;
// and the CNP this QP sends as a notification point.

#include "rnic/queue_pair.hh"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "rnic/engine.hh"
#include "rnic/packet_port.hh"
#include "rnic/queue_pair_parts.hh"
#include "rnic/timers.hh"
#include "rnic/wire/aeth.hh"
#include "rnic/wire/psn.hh"
#include "verbs_abi/wc_opcode.hh"

namespace jakiro::rnic {

using namespace queue_pair_parts;

void queue_pair::on_cnp(uint64_t now_ns) {
    _stats.cnps_received.add(1);
    // DCQCN cuts relative to the current rate, which on hardware is what the QP sends. A
    // software QP rarely sends at its nominal line rate, so the first cuts would not bite:
    // bring the ceiling down to a little above what the QP really sends, then cut.
    if (_measured_bps > 0 && _rate.rate_bps() > _measured_bps + _measured_bps / 4) {
        _rate.set_line_rate(now_ns, std::max<uint64_t>(_measured_bps + _measured_bps / 4,
                                                       _rate.params().min_rate_bps));
        _ceiling_lowered = true;
    }
    _rate.on_cnp(now_ns);
    _last_cnp_ns = now_ns;
}

void queue_pair::set_line_rate(uint64_t now_ns, uint64_t rate_bps) {
    const uint64_t line = qos::rdma_line_rate_bps(rate_bps);
    if (line == _line_rate_bps) {
        return;
    }
    _line_rate_bps = line;
    if (_rate.cnps() == 0) {
        // Never cut: start over at the new rate (alpha 1, so the first CNP halves it).
        qos::dcqcn_params p = _rate.params();
        p.line_rate_bps = line;
        _rate = qos::dcqcn_rate(p, now_ns);
    } else if (!_ceiling_lowered || line < _rate.params().line_rate_bps) {
        // A ceiling lowered to what the QP really sends stays until it is restored, unless
        // the vNIC's new rate is lower still.
        _rate.set_line_rate(now_ns, line);
    }
}

bool queue_pair::pacer_open(uint64_t now_ns) {
    if (_ceiling_lowered && now_ns - _last_cnp_ns > ceiling_restore_ns) {
        // Quiet for a while: let recovery climb back towards the nominal line rate.
        _rate.set_line_rate(now_ns, _line_rate_bps);
        _ceiling_lowered = false;
    }
    return _rate.grant(now_ns) > 0;
}

void queue_pair::pacer_charge(uint64_t now_ns, uint32_t frame_len) {
    _rate.on_sent(frame_len);
    // What the QP really sends, averaged over ~100 µs windows (EWMA, 1/4 per window).
    _window_bytes += frame_len;
    if (_window_start_ns == 0) {
        _window_start_ns = now_ns;
    } else if (now_ns - _window_start_ns >= 100'000) {
        const uint64_t bps = _window_bytes * 8'000'000'000 / (now_ns - _window_start_ns);
        _measured_bps = _measured_bps == 0 ? bps : (_measured_bps * 3 + bps) / 4;
        _window_bytes = 0;
        _window_start_ns = now_ns;
    }
}

void queue_pair::send_cnp(packet_port& port) {
    uint32_t payload_at = 0;
    uint8_t* frame = begin_packet(port, opcode::cnp, 0, payload_at);
    if (frame == nullptr) {
        return;
    }
    bth_fields bth;
    bth.opcode = opcode::cnp;
    bth.dest_qp = _machine.attr().dest_qp_num;  // the QP that sends too fast
    ext_fields ext;
    finish_packet(port, bth, ext, frame, 0);
    _stats.cnps_sent.add(1);
}

}  // namespace jakiro::rnic
