#pragma once
// systemd's service notification protocol (sd_notify(3)), spoken directly: one datagram of
// "KEY=value" lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or '@' for the
// abstract namespace). systemd documents the protocol as stable for reimplementation; doing it
// here (~40 lines) keeps libsystemd and what it links out of a DPDK process. Without
// $NOTIFY_SOCKET (not under systemd's Type=notify) every call does nothing.
//
// jakirod sends READY=1 once its ports are started and its control socket listens, STATUS=
// lines when its state changes, WATCHDOG=1 while its worker makes progress (when WatchdogSec
// is set) and STOPPING=1 on its way out.
//
// Thread-safety: any thread.

#include <chrono>
#include <string>

namespace jakiro::service {

// Sends `state` (e.g. "READY=1\nSTATUS=up"); false when there is no notify socket or the
// datagram could not be sent.
bool notify(const std::string& state);

// systemd's watchdog period ($WATCHDOG_USEC) when it is meant for this process
// ($WATCHDOG_PID absent or ours); zero when there is no watchdog. Ping at half of it.
std::chrono::microseconds watchdog_period();

}  // namespace jakiro::service
