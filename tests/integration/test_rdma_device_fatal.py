"""jakirod going away never hangs a verbs program: perftest (ib_write_bw polling,
ib_send_bw -e sleeping on completion events) runs between t1 (h1) and t2 (h2) for far longer
than the test waits, then one host's jakirod is SIGKILLed. The perftest process on that host
must exit non-zero within a few seconds, with a completion error (flushed work requests) or a
failed ibv_get_cq_event; its peer must end too (its connection to the dead side closes, or
its own QP runs out of retries), never hang.

The killed jakirod is started again as tools/testbed starts it (same config, log and pid
file) and must report ready, so each case — and the module's teardown — finds a working bed.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import IP, JAKIROCTL, JAKIROD, RUN_DIR, SRC, T1, T2, alive, jakirod_pids, stop, \
    wait_until

pytestmark = pytest.mark.usefixtures("testbed")

JAKIRO_RUN = SRC / "tools" / "jakiro-run"
HOST = {T1: "h1", T2: "h2"}
VNIC = {T1: "t1", T2: "t2"}

RUNNING_S = 3  # traffic flows this long before the kill
EXIT_BOUND_S = 5  # the killed host's program must be gone this soon after the kill
PEER_BOUND_S = 20  # its peer: a closed TCP connection, or retries running out (~1 s)
START_S = 20  # jakiro-run + device open + connection setup
READY_S = 60  # a restarted jakirod reports ready (tools/testbed waits as long)


def shim_env():
    """The build tree's shim beside the jakirod under test, as the other RDMA tests do."""
    env = dict(os.environ)
    lib = Path(JAKIROD).resolve().parents[1] / "verbs_shim" / "libjakiro_verbs.so"
    if lib.exists():
        env["JAKIRO_VERBS_LIB"] = str(lib)
    return env


class Program:
    """A verbs program under jakiro-run in a tenant, output to files (never a full pipe)."""

    def __init__(self, tenant, cmd, tmp_path, role):
        self.role = role
        self.out = tmp_path / f"{role}.out"
        self.err = tmp_path / f"{role}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", tenant, str(JAKIRO_RUN), "--", *map(str, cmd)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=shim_env(),
                start_new_session=True)

    def wait(self, timeout):
        """The exit status, or None if it still ran after `timeout` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def output(self):
        return (f"\n--- {self.role} stdout\n{self.out.read_text(errors='replace')[-3000:]}"
                f"\n--- {self.role} stderr\n{self.err.read_text(errors='replace')[-3000:]}")

    def stop(self):
        stop(self.proc)


def listening(tenant, port):
    r = subprocess.run(["ip", "netns", "exec", tenant, "ss", "-Hltn", f"sport = :{port}"],
                       capture_output=True, text=True, timeout=5)
    return bool(r.stdout.strip())


def connected(tenant, port):
    r = subprocess.run(["ip", "netns", "exec", tenant, "ss", "-Htn", "state", "established",
                        f"sport = :{port}"], capture_output=True, text=True, timeout=5)
    return bool(r.stdout.strip())


def ready(host):
    r = subprocess.run([JAKIROCTL, "--host", host, "status", "--json"], capture_output=True,
                       text=True, timeout=5)
    try:
        return r.returncode == 0 and json.loads(r.stdout).get("ready") is True
    except ValueError:
        return False


def restart_jakirod(host):
    """Starts `host`'s jakirod again exactly as tools/testbed does, and waits until ready."""
    cmd = ["ip", "netns", "exec", f"jk-{host}", JAKIROD, "--config", f"{RUN_DIR}/{host}.yaml"]
    with open(f"{RUN_DIR}/{host}.log", "ab") as log:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
    (RUN_DIR / f"{host}.pid").write_text(f"{p.pid}\n")
    # Reaped when it ends (tools/testbed down stops it by pid): never a zombie it waits for.
    threading.Thread(target=p.wait, daemon=True).start()
    wait_until(lambda: p.poll() is not None or ready(host), READY_S,
               f"the restarted jakirod of {host} to be ready")
    assert p.poll() is None, f"restarted jakirod of {host} exited {p.returncode}"


_ports = iter(range(19500, 19600))


# (program and flags, the tenant whose jakirod is killed). The killed host's program is in
# verbs when its device dies: ib_write_bw's client spins in ibv_poll_cq, ib_send_bw's server
# in ibv_poll_cq too, and with -e both sides sleep in ibv_get_cq_event (perftest has no -D with
# events: a count far beyond the test's wait instead). Not here: ib_write_bw's *server* on
# the killed host, which makes no verbs call while the client writes (it waits on TCP), so
# there is nothing for its shim to notice, as with a kernel RNIC.
CASES = {
    "write_bw_client_host": (["ib_write_bw", "-D", 120], T1),
    "send_bw_server_host": (["ib_send_bw", "-D", 120], T2),
    "send_bw_events_client_host": (["ib_send_bw", "-e", "-n", 10_000_000], T1),
    "send_bw_events_server_host": (["ib_send_bw", "-e", "-n", 10_000_000], T2),
}


@pytest.mark.parametrize("case", CASES)
def test_killing_jakirod_under_perftest_ends_the_program_with_an_error(case, tmp_path):
    port = next(_ports)
    (program, *flags), killed = CASES[case]
    common = [*flags, "-x", 0, "-F", "-s", 65536, "-p", port]
    server = client = None
    host = HOST[killed]
    try:
        server = Program(T2, [program, "-d", f"jakiro_{VNIC[T2]}", *common], tmp_path,
                         "server")
        wait_until(lambda: server.proc.poll() is not None or listening(T2, port), START_S,
                   f"{program} to listen on {port}")
        assert server.proc.poll() is None, f"server exited early: {server.output()}"
        client = Program(T1, [program, "-d", f"jakiro_{VNIC[T1]}", *common, IP[T2]],
                         tmp_path, "client")
        # Connected (perftest's stdout is a buffered file: its lines come at exit), then
        # a few seconds of traffic.
        wait_until(lambda: client.proc.poll() is not None or connected(T2, port), START_S,
                   f"{program} to connect")
        assert client.proc.poll() is None, f"client exited early: {client.output()}"
        time.sleep(RUNNING_S)
        assert client.proc.poll() is None and server.proc.poll() is None, \
            f"ended before the kill:{client.output()}{server.output()}"

        pid = jakirod_pids()[host]
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until(lambda: not alive(pid), 5, f"jakirod {host} to die")

        victim, peer = (client, server) if killed == T1 else (server, client)
        status = victim.wait(EXIT_BOUND_S)
        took = time.monotonic() - killed_at
        peer_status = peer.wait(PEER_BOUND_S)
        print(f"\n{case}, {host} killed: {victim.role} exited {status} after {took:.1f}s; "
              f"{peer.role} (healthy host) exited {peer_status}{victim.output()}{peer.output()}")
        assert status is not None, \
            f"{victim.role} on {host} still runs {EXIT_BOUND_S}s after jakirod died (hangs)" \
            f"{victim.output()}"
        assert status != 0, f"{victim.role} exited 0 although its device died{victim.output()}"
        text = (victim.out.read_text(errors="replace") +
                victim.err.read_text(errors="replace")).lower()
        # perftest says why: a completion with an error, a failed call, or a post the dead
        # device refused ("Couldn't post recv"), whichever verb came first.
        assert re.search(r"completion with error|failed|couldn't post", text), \
            f"{victim.role} did not say why it stopped{victim.output()}"
        if peer is client:
            # The healthy side's requester runs out of retries (RETRY_EXC_ERR) and says so.
            assert peer_status not in (None, 0), \
                f"client on the healthy host exited {peer_status} {PEER_BOUND_S}s after its " \
                f"peer's jakirod died{peer.output()}"
        elif peer_status is None:
            # A passive server on the healthy host: RC has no keepalive, so it waits for
            # traffic that will never come, as with hardware. Killed below; reported here.
            print(f"{case}: the healthy host's server still waited after {PEER_BOUND_S}s "
                  f"(killed), as a passive RC responder does")
    finally:
        for p in (client, server):
            if p is not None:
                p.stop()
        pid = jakirod_pids().get(host)
        if pid is None or not alive(pid):
            restart_jakirod(host)
