"""Restarting jakirod without tenants noticing (docs/restart.md): `tools/testbed restart hI`
asks the running daemon for its successor (`jakiroctl restart`), which takes over with the state
image over the root-only hand-over socket. What a tenant relies on must survive: a TCP stream
through restarts of both hosts keeps going (its conntrack entry carried, so the security
groups keep passing its packets), verbs, rdma_cm and MPI programs keep their QPs and
connections, a vNIC's quotas charge what they charged, /metrics counters never go down, and
`jakiroctl status` says what happened. A successor that cannot read the state is refused while
the old daemon serves on; a tenant cannot take part in a hand-over; a crash is reported as one,
its tenants fail within a second and the next daemon serves new RDMA programs.
"""

import json
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import (IP, JAKIROD, PYTHON, RUN_DIR, SRC, T1, T2, T5, TESTBED, alive,
                      iperf3_server, integrity_pair, jakirod_pids, jakiroctl, ping, run,
                      shim_env, stats, stop, under_jakiro_run, wait_until)
from test_rdma_device_fatal import Program, listening
from test_ucx_mpi import MPI_LAUNCH, PINGPONG_C, rsh_agent

pytestmark = pytest.mark.usefixtures("testbed")

HANDOVER = "/run/jakiro/h1.sock.handover"
CRASH_EXIT_S = 1.0  # a tenant's program learns of a crash this soon (the target: within 1 s)
NEW_PROGRAM_S = 30  # a new ib_write_bw on the restarted daemon ends by then, even on a loaded CI


def status(host):
    return json.loads(jakiroctl(host, "status", "--json").stdout)


def restart(host, *extra, timeout=90):
    r = run(TESTBED, "restart", host, *extra, timeout=timeout, check=False,
            env=dict(os.environ, JAKIROD=JAKIROD))
    print(r.stdout.strip())
    return r


def counters(host):
    """Every counter sample of /metrics (jakiroctl metrics): {'name{labels}': value}."""
    text = jakiroctl(host, "metrics").stdout
    kinds = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, value = line.rsplit(" ", 1)
        if kinds.get(key.split("{", 1)[0]) == "counter":
            out[key] = float(value)
    return out


def iperf_flow(host, vnic):
    flows = json.loads(jakiroctl(host, "flows", "--json", "--vnic", vnic).stdout)
    return [f for f in flows if f["proto"] == "tcp" and f["remote"].endswith(":5201")
            or f["local"].endswith(":5201")]


def qpns(host):
    out = jakiroctl(host, "qps").stdout
    return sorted(re.findall(r"^\S+\s+(0x[0-9a-f]+)\s+(?:RC|UC|UD)\s", out, re.M))


class integrity_loop:
    """rdma_integrity runs (every byte of every WRITE, READ and SEND checked), one after another
    between two tenants until stopped; each must pass. Short runs: a long one meets a lost
    completion under heavy retransmission that has nothing to do with restarts (see
    docs/restart.md), and short ones still put many a run across a take-over."""

    def __init__(self, server_tenant, client_tenant, port, ops=300):
        self.args = (server_tenant, client_tenant, IP[server_tenant], port, ops)
        self.runs, self.error = 0, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        server, client, ip, port, ops = self.args
        while not self._stop.is_set():
            try:
                integrity_pair(server, client, ip, port, ops=ops, seed=self.runs + 1)
            except AssertionError as e:
                self.error = str(e)[-3000:]
                return
            self.runs += 1

    def finish(self):
        self._stop.set()
        self._thread.join(timeout=90)
        assert not self._thread.is_alive(), "an rdma_integrity run never ended"
        assert self.error is None, self.error
        return self.runs


@pytest.fixture(scope="module")
def openmpi_pingpong(tmp_path_factory):
    """mpi_pingpong.c built with Open MPI's compiler wrapper."""
    program = tmp_path_factory.mktemp("mpi") / "pingpong.openmpi"
    subprocess.run(["mpicc.openmpi", "-O2", "-o", program, PINGPONG_C], check=True, timeout=60)
    return program


class mpi_pingpong:
    """One MPI job (Open MPI over UCX rc_verbs, two ranks: `rank0` and `rank1`) bouncing 1 B ..
    4 MiB messages with every byte checked, sweep after sweep until `finish` (mpi_pingpong.c
    --until): a single job that lives through whatever happens meanwhile, as an HPC job does."""

    def __init__(self, program, rank0, rank1, tmp_path):
        self.stop_file = tmp_path / "mpi.stop"
        self.log = tmp_path / "mpi.out"
        agent = rsh_agent(tmp_path, (rank0, rank1))
        cmd = MPI_LAUNCH["openmpi"]((IP[rank0], IP[rank1]), agent) + [
            program, "--until", self.stop_file]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(under_jakiro_run(rank0, cmd), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=shim_env(), start_new_session=True)

    def output(self):
        return self.log.read_text(errors="replace")

    def sweeps(self):
        return len(re.findall(r"^mpi pingpong: sweep \d+ done, 0 bad bytes", self.output(), re.M))

    def wait_for_sweeps(self, n, timeout):
        wait_until(lambda: self.sweeps() >= n or self.proc.poll() is not None, timeout,
                   f"{n} MPI ping-pong sweeps")
        assert self.proc.poll() is None, self.output()[-3000:]

    def finish(self, timeout=90):
        """Ends the job after its sweep under way; asserts it ran to its own end, 0 bad bytes."""
        assert self.proc.poll() is None, "the MPI job ended early:\n" + self.output()[-3000:]
        self.stop_file.touch()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        out = self.output()
        assert code == 0, f"mpirun: {code}\n{out[-3000:]}"
        m = re.search(r"^mpi pingpong: 12 sizes, 0 bad bytes, .*, (\d+) sweeps$", out, re.M)
        assert m, out[-3000:]
        return int(m.group(1))

    def stop(self):
        self.stop_file.touch()
        stop(self.proc)


def test_every_tenant_program_lives_through_three_restarts_of_h1_and_two_of_h2(tmp_path,
                                                                               openmpi_pingpong):
    """The acceptance run: ib_write_bw (RC) t1 -> t2, the RC WRITE/READ/SEND verifier t1 -> t2
    and t1 -> t5 (one host), rping -V t1 -> t2, an MPI ping-pong t1 -> t2 (one Open MPI job,
    every byte checked) and an iperf3 stream t1 -> t2 while h1's jakirod is restarted three
    times and h2's twice. Every program runs through all of them and exits 0 with every byte
    right; iperf3 keeps its one TCP connection (its conntrack entry carried, counters going on,
    the same ports after every restart: no reset, no reconnect), and `jakiroctl qps` on both
    hosts shows the QPs perftest, rping and MPI hold the same after."""
    before = {h: jakirod_pids()[h] for h in ("h1", "h2")}
    iperf_out = tmp_path / "iperf3.json"
    programs = []
    loops = []
    mpi = None
    seconds = 60  # the long-running programs' span: through every restart
    with iperf3_server(T2), open(iperf_out, "w") as f:
        iperf = subprocess.Popen(["ip", "netns", "exec", T1, "iperf3", "-c", IP[T2], "-t",
                                  str(seconds), "-J"], stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            rping = ["rping", "-a", IP[T2], "-p", 19612, "-C", 20000, "-S", 4000, "-V"]
            servers = [
                Program(T2, ["ib_write_bw", "-p", 19610, "-D", seconds], tmp_path, "bw-server"),
                Program(T2, [rping[0], "-s", *rping[1:]], tmp_path, "rping-server")]
            programs += servers
            wait_until(lambda: listening(T2, 19610) or servers[0].proc.poll() is not None, 20,
                       "ib_write_bw to listen")
            time.sleep(1)  # rping listens through rdma_cm (no TCP socket to see)
            programs += [
                Program(T1, ["ib_write_bw", "-p", 19610, "-D", seconds, IP[T2]], tmp_path, "bw"),
                Program(T1, [rping[0], "-c", *rping[1:]], tmp_path, "rping")]
            mpi = mpi_pingpong(openmpi_pingpong, T1, T2, tmp_path)
            # Its first sweep done: UCX has set its QPs up and moves data.
            mpi.wait_for_sweeps(1, 60)
            qps_before = {h: qpns(h) for h in ("h1", "h2")}
            ended_early = [p.role for p in programs if p.proc.poll() is not None]
            assert not ended_early, "".join(p.output() for p in programs)
            loops = [integrity_loop(T2, T1, 19613), integrity_loop(T5, T1, 19614)]
            stream_ends = []  # iperf3's TCP connection as each host's conntrack saw it
            for host in ("h1", "h2", "h1", "h2", "h1"):
                vnic = "t1" if host == "h1" else "t2"
                flows_before = iperf_flow(host, vnic)
                assert flows_before, f"no iperf3 flow in {host}'s conntrack before the restart"
                packets_before = max(f["packets_in"] + f["packets_out"] for f in flows_before)
                r = restart(host)
                assert r.returncode == 0, r.stdout + r.stderr
                last = status(host)["last_restart"]
                assert last["kind"] == "restart" and last["carried"].get("flows", 0) >= 1, last
                assert last["carried"].get("rdma_clients", 0) >= 1, last
                flows_after = iperf_flow(host, vnic)
                assert flows_after and max(f["packets_in"] + f["packets_out"]
                                           for f in flows_after) >= packets_before, flows_after
                stream_ends.append({f[end] for f in flows_after for end in ("local", "remote")})
                time.sleep(1.5)
            # Every long-running program was at work through the last restart, and MPI goes on
            # after it.
            still = {p.role: p.proc.poll() for p in programs}
            assert all(code is None for code in still.values()) and iperf.poll() is None, (
                still, "".join(p.output() for p in programs))
            swept = mpi.sweeps()
            mpi.wait_for_sweeps(swept + 1, 60)
            qps_after = {h: qpns(h) for h in ("h1", "h2")}  # while every program holds its QPs
            sweeps = mpi.finish()
            runs = [loop.finish() for loop in loops]
            ended = {p.role: p.wait(seconds + 30) for p in programs}
            outputs = "".join(p.output() for p in programs)
            print("\n" + ", ".join(f"{role} {code}" for role, code in ended.items()) +
                  f"; rdma_integrity runs passed: t1 -> t2 {runs[0]}, t1 -> t5 {runs[1]}; "
                  f"MPI ping-pong sweeps (0 bad bytes): {sweeps}")
            assert all(code == 0 for code in ended.values()), outputs
            assert all(n >= 2 for n in runs), runs
            assert iperf.wait(timeout=seconds + 30) == 0
        finally:
            for loop in loops:
                loop._stop.set()
            if mpi is not None:
                mpi.stop()
            for p in programs:
                p.stop()
            if iperf.poll() is None:
                iperf.kill()
    rping_out = (tmp_path / "rping.out").read_text()
    assert "data mismatch" not in rping_out
    result = json.loads(iperf_out.read_text())
    assert "error" not in result, result.get("error")
    # No reset: the one data connection iperf3 opened ran its whole time, and it is the one
    # each restarted host's conntrack carried.
    stream = result["start"]["connected"][0]
    local = f"{stream['local_host']}:{stream['local_port']}"
    assert result["end"]["sum_received"]["seconds"] >= seconds - 1, result["end"]["sum_received"]
    assert all(local in ends for ends in stream_ends), (local, stream_ends)
    gbps = result["end"]["sum_received"]["bits_per_second"] / 1e9
    print(f"iperf3 through 5 restarts: {gbps:.2f} Gbit/s; QPs {qps_before} -> {qps_after}")
    # perftest's, rping's and MPI's QPs are there after as before (the verifiers' come and go).
    for host in ("h1", "h2"):
        assert qps_before[host] and set(qps_before[host]) <= set(qps_after[host]), (
            host, qps_before[host], qps_after[host])
    after = jakirod_pids()
    assert all(after[h] != before[h] and not alive(before[h]) for h in before), (before, after)


def test_metrics_counters_never_go_down_across_a_take_over():
    assert ping(T1, IP[T2])
    first = counters("h1")
    assert restart("h1").returncode == 0
    second = counters("h1")
    lower = {k: (v, second.get(k)) for k, v in first.items()
             if k in second and second[k] < v}
    assert not lower, lower
    assert second['jakiro_restarts_total{kind="restart"}'] >= 1
    # Control: the counters did count across the restart (a ping adds packets afterwards).
    assert ping(T1, IP[T2])
    third = counters("h1")
    grown = [k for k in third if "packets" in k and third[k] > second.get(k, 0)]
    assert grown, "no packet counter moved after the restart"


def last_restart_info(host):
    """The labels of /metrics' jakiro_last_restart_info."""
    text = jakiroctl(host, "metrics").stdout
    m = re.search(r"^jakiro_last_restart_info\{(.*)\} 1$", text, re.M)
    assert m, "no jakiro_last_restart_info in /metrics"
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))


def test_the_last_restart_says_it_came_by_take_over_and_carried_the_rate_buckets():
    assert ping(T1, IP[T2])  # t1's face read: its packet-rate bucket is in use
    assert restart("h1").returncode == 0
    last = status("h1")["last_restart"]
    assert last["kind"] == "restart" and last["via"] == "take-over", last
    # Every vNIC the worker reads has a packet-rate bucket: it continues, not refilled.
    assert last["carried"].get("qos_buckets", 0) >= 1, last
    info = last_restart_info("h1")
    assert info["via"] == "take-over" and info["kind"] == "restart", info
    assert ping(T1, IP[T2])


def test_a_successor_that_cannot_read_the_state_is_refused_and_the_old_daemon_serves_on():
    old = jakirod_pids()["h1"]
    last_before = status("h1")["last_restart"]
    # The same binary told to read the required 'daemon' section only up to version 0: what a
    # binary built before that section's current version would say.
    r = subprocess.run(["ip", "netns", "exec", "jk-h1", JAKIROD, "--config",
                        f"{RUN_DIR}/h1.yaml", "--take-over"],
                       env=dict(os.environ, JAKIRO_HANDOVER_READS="daemon:0"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "refused the take-over" in r.stderr and "'daemon'" in r.stderr, r.stderr
    assert alive(old) and jakirod_pids()["h1"] == old
    assert status("h1")["last_restart"] == last_before
    assert ping(T1, IP[T2])
    # Control: the same binary without the restriction takes over.
    assert restart("h1").returncode == 0
    assert not alive(old)


def accepts(path, kind=socket.SOCK_STREAM):
    """Whether a process accepts on the Unix socket at `path`."""
    with socket.socket(socket.AF_UNIX, kind) as s:
        s.settimeout(2)
        try:
            s.connect(path)
            return True
        except OSError:
            return False


def test_a_successor_that_fails_late_leaves_the_old_daemon_reachable_by_its_sockets():
    """A successor that fails after it bound the control and hand-over sockets' paths (its
    predecessor's) must not take them along: the old daemon answers jakiroctl and can still
    be taken over."""
    old = jakirod_pids()["h1"]
    last_before = status("h1")["last_restart"]
    r = subprocess.run(["ip", "netns", "exec", "jk-h1", JAKIROD, "--config",
                        f"{RUN_DIR}/h1.yaml", "--take-over"],
                       env=dict(os.environ, JAKIRO_TAKE_OVER_FAIL_LATE="1"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "JAKIRO_TAKE_OVER_FAIL_LATE" in r.stderr, r.stderr
    assert alive(old)
    wait_until(lambda: accepts(HANDOVER, socket.SOCK_SEQPACKET), 5,
               "the old daemon to take its hand-over socket back")
    # jakiroctl reaches the old daemon by the control socket's path.
    wait_until(lambda: accepts("/run/jakiro/h1.sock"), 5, "the control socket's path to lead to it")
    assert status("h1")["last_restart"] == last_before
    assert ping(T1, IP[T2])
    # And it can still hand over.
    assert restart("h1").returncode == 0
    wait_until(lambda: not alive(old), 30, "the old daemon to hand over and exit")
    assert status("h1")["last_restart"]["via"] == "take-over"


def test_sigterm_to_the_old_daemon_during_a_take_over_ends_in_one_daemon_or_none():
    """SIGTERM reaches the old daemon while its successor takes over. The old one leaves (as
    asked) within a bound, never hanging on the take-over, and the host ends in one consistent
    state: the successor took over and serves (SIGTERM came once the workers were frozen: the
    old process leaves as a handed-over one does), or the take-over was abandoned and the
    successor gave up (SIGTERM came first: the old process stops, the successor finds no one
    to take over from). Never two daemons, never a successor without the state."""
    old = jakirod_pids()["h1"]
    r = jakiroctl("h1", "restart")
    successor = int(re.search(r"successor (\d+)", r.stdout).group(1))
    os.kill(old, signal.SIGTERM)
    try:
        wait_until(lambda: not alive(old), 15, "the old daemon to leave after SIGTERM")
        wait_until(lambda: not alive(successor) or status_ready("h1"), 40,
                   "the successor to take over or give up")
        print(f"SIGTERM during the take-over: the successor "
              f"{'took over' if alive(successor) else 'gave up'}")
        if alive(successor):
            (RUN_DIR / "h1.pid").write_text(f"{successor}\n")
            last = status("h1")["last_restart"]
            assert last["via"] == "take-over" and last["kind"] == "restart", last
            assert accepts("/run/jakiro/h1.sock") and accepts(HANDOVER, socket.SOCK_SEQPACKET)
            assert ping(T1, IP[T2])
        else:
            assert not accepts("/run/jakiro/h1.sock"), "a control socket with no daemon"
    finally:
        if not alive(successor):
            run(TESTBED, "restart", "h1", "--crash", timeout=90, check=False,
                env=dict(os.environ, JAKIROD=JAKIROD))
        wait_until(lambda: status_ready("h1"), 40, "h1's jakirod to serve again")


def status_ready(host):
    try:
        return status(host).get("ready") is True
    except Exception:  # not answering
        return False


def test_a_newer_build_takes_over_as_an_upgrade(tmp_path):
    """`jakiroctl restart --binary NEW`: a build of another version reads the same state and
    takes over; status and /metrics call it an upgrade from the old version. NEW is this build
    with its version string changed in place (what a package upgrade with compatible state
    sections brings)."""
    version = run(JAKIROD, "--version").stdout.split()[1]
    next_version = version[:-1] + ("9" if version[-1] != "9" else "8")  # same length
    data = Path(JAKIROD).read_bytes()
    assert data.count(version.encode() + b"\x00") >= 1, "no version string to change"
    newer = tmp_path / "jakirod"
    newer.write_bytes(data.replace(version.encode() + b"\x00", next_version.encode() + b"\x00"))
    newer.chmod(0o755)
    assert run(newer, "--version").stdout.strip() == f"jakirod {next_version}"
    old = jakirod_pids()["h1"]
    r = restart("h1", "--binary", newer)
    assert r.returncode == 0, r.stdout + r.stderr
    last = status("h1")["last_restart"]
    assert last["kind"] == "upgrade" and last["from_version"] == f"jakirod {version}", last
    assert 'kind="upgrade"' in jakiroctl("h1", "metrics").stdout
    assert not alive(old) and ping(T1, IP[T2])
    # And back to the build under test: that too is a change of version.
    assert restart("h1", "--binary", JAKIROD).returncode == 0
    assert status("h1")["last_restart"]["from_version"] == f"jakirod {next_version}"


MR_QUOTA = SRC / "tests" / "rdma" / "pyverbs_mr_quota.py"


def rdma_memory(vnic, host="h1"):
    return stats(host)["vnics"][vnic]["rdma_memory"]


def host_reserve_held(host="h1"):
    """What the host's RDMA reserve holds for every vNIC together (mappings, descriptors)."""
    reserve = json.loads(jakiroctl(host, "qps", "--json").stdout)["rdma_reserve"]
    return {k: v["held"] for k, v in reserve.items()}


def read_until(proc, line, timeout):
    """proc's output lines up to `line` (which must come within `timeout` seconds), read from
    its descriptor (a buffered reader would hold lines select() no longer sees)."""
    fd, text, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = text.decode(errors="replace").splitlines()
        if line in seen:
            return seen[:seen.index(line) + 1]
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            break
        text += chunk
    raise AssertionError(f"no {line!r} within {timeout} s: {text.decode(errors='replace')}")


@pytest.mark.parametrize("quota,size", [("max_mrs: 16", 4096), ("max_mr_bytes: 1MiB", 65536)],
                         ids=["mr_count", "mr_bytes"])
def test_a_vnic_at_its_mr_quota_is_charged_the_same_after_a_take_over(quota, size):
    """Noisy-neighbour accounting survives a take-over: t1 registers MRs up to its quota (its
    host YAML, as the operator sets it: the file jakirod runs with, applied), h1's jakirod is
    restarted, and in the same process with the same MRs one more ibv_reg_mr is still EDQUOT,
    an ibv_dereg_mr still gives the quota back, and the vNIC's counters go on from where they
    were (tests/rdma/pyverbs_mr_quota.py)."""
    config = RUN_DIR / "h1.yaml"
    original = config.read_text()
    lines = [line.rstrip()[:-1] + f", rdma: {{{quota}}}}}"
             if line.strip().startswith("- {name: t1,") else line
             for line in original.splitlines()]
    assert lines != original.splitlines(), "no t1 in h1's YAML"
    config.write_text("\n".join(lines) + "\n")
    program = None
    try:
        jakiroctl("h1", "apply", str(config), timeout=60)
        program = subprocess.Popen(under_jakiro_run(T1, [PYTHON, MR_QUOTA, size]),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=shim_env(),
                                   start_new_session=True)
        said = read_until(program, "holding", 60)
        assert any("ok: at quota" in line and "then EDQUOT" in line for line in said), said
        before = rdma_memory("t1")
        held_before = host_reserve_held()
        assert before["mrs"] >= 1 and before["quota_refusals"] >= 1, before
        assert restart("h1").returncode == 0
        after = rdma_memory("t1")
        # Charged the same: the MRs, their bytes and mappings, and the host's reserve with
        # them; its refusals counted on.
        for key in ("mrs", "mr_bytes", "mappings", "quota_refusals"):
            assert after[key] == before[key], (key, before, after)
        assert host_reserve_held() == held_before
        program.stdin.write("go\n")
        program.stdin.flush()
        out, _ = program.communicate(timeout=60)
        said += out.splitlines()
        assert program.returncode == 0, said
        assert "pyverbs_mr_quota: all verified" in said, said
        # Its two refusals after the take-over went on the count it had before.
        assert rdma_memory("t1")["quota_refusals"] == before["quota_refusals"] + 2
    finally:
        if program is not None:
            stop(program)
        config.write_text(original)
        jakiroctl("h1", "apply", str(config), timeout=60)
    # Its MRs gone with its process, the vNIC holds nothing.
    wait_until(lambda: rdma_memory("t1")["mrs"] == 0, 15, "t1's MRs given back")


def offer_from(namespace, user=None):
    """Sends a hand-over offer (protocol 1, reading 'daemon' only up to version 0, so that a
    daemon that listens answers with a refusal and changes nothing) from `namespace`, as
    `user`; returns what came back: 'verdict', 'closed' or the connect error."""
    client = (
        "import socket, struct, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
        "s.settimeout(5)\n"
        "try:\n"
        f"    s.connect({HANDOVER!r})\n"
        "except OSError as e:\n"
        "    print('connect', e.errno); sys.exit(0)\n"
        "v = b'attacker'\n"
        "body = struct.pack('<I', len(v)) + v + struct.pack('<III', 1, 1, 0)\n"
        "try:\n"
        "    s.send(struct.pack('<II', 1, 1) + body)\n"
        "except OSError:\n"
        "    print('closed'); sys.exit(0)\n"
        "try:\n"
        "    m = s.recv(65536)\n"
        "except OSError:\n"
        "    m = b''\n"
        "print('verdict' if len(m) >= 8 and struct.unpack('<I', m[:4])[0] == 2 else 'closed')\n")
    cmd = ["ip", "netns", "exec", namespace]
    if user:
        cmd += ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    r = subprocess.run(cmd + [PYTHON, "-c", client], capture_output=True, text=True,
                       timeout=20)
    return r.stdout.strip() or r.stderr.strip()


def test_neither_a_tenant_nor_another_user_can_take_part_in_a_hand_over():
    old = jakirod_pids()["h1"]
    last_before = status("h1")["last_restart"]
    # Control: root in the daemon's own namespace is answered (a refusal: version 0).
    assert offer_from("jk-h1") == "verdict"
    # Root inside a tenant's namespace reaches the socket file but is not the service.
    assert offer_from(T1) == "closed"
    # Another user on the host cannot even connect (the socket is root's, mode 0600).
    assert offer_from("jk-h1", user="65534").startswith("connect 13")
    assert alive(old) and status("h1")["last_restart"] == last_before
    assert ping(T1, IP[T2])


def test_a_crash_under_rdma_traffic_is_reported_and_the_next_daemon_serves_at_once(tmp_path):
    port = 19602
    server = Program(T2, ["ib_write_bw", "-p", port, "-D", 60], tmp_path, "server")
    try:
        wait_until(lambda: listening(T2, port), 20, "ib_write_bw to listen")
        client = Program(T1, ["ib_write_bw", "-p", port, "-D", 60, IP[T2]], tmp_path, "client")
        try:
            time.sleep(4)
            assert client.proc.poll() is None, client.output()
            os.kill(jakirod_pids()["h1"], signal.SIGKILL)
            killed_at = time.monotonic()
            code = client.wait(CRASH_EXIT_S)
            took = time.monotonic() - killed_at
            print(f"\nclient on the crashed host exited {code} {took:.2f}s after the kill")
            assert code not in (None, 0), client.output()
            # What systemd's Restart=on-failure does next: a new daemon, no take-over.
            started = time.monotonic()
            r = restart("h1", "--crash")
            assert r.returncode == 0, r.stdout + r.stderr
            print(f"restarted daemon ready {time.monotonic() - started:.2f}s after its start")
        finally:
            client.stop()
    finally:
        server.stop()
    st = status("h1")
    assert st["last_restart"]["kind"] == "crash" and st["restarts"]["crash"] >= 1, st
    # The restarted daemon serves a new ib_write_bw (how soon: perf/restart --crash; here a
    # bound a loaded machine meets)...
    bw = [Program(T2, ["ib_write_bw", "-p", 19604, "-n", 2000], tmp_path, "new-server")]
    try:
        wait_until(lambda: listening(T2, 19604) or bw[0].proc.poll() is not None, 20,
                   "the new ib_write_bw to listen")
        bw.append(Program(T1, ["ib_write_bw", "-p", 19604, "-n", 2000, IP[T2]], tmp_path,
                          "new-client"))
        codes = [p.wait(NEW_PROGRAM_S) for p in reversed(bw)]
        assert codes == [0, 0], "".join(p.output() for p in bw)
        assert re.search(r"^\s*65536\s+2000\s", bw[1].out.read_text(), re.M), bw[1].output()
    finally:
        for p in bw:
            p.stop()
    # ...and every byte of a new exchange is right.
    assert integrity_pair(T2, T1, IP[T2], 19603, ops=100) > 0
