"""The hostile-tenant suite for jakirod's control side (docs/threat-model.md, "Resources,
too"): what a tenant can do to another vNIC through the namespace its RDMA endpoint is bound
in, through rdma_cm (its own processes' ids, and a neighbour's requests over QP1), and through the
time jakirod's control side spends on it.

Every attack has its control: the same steps without the hostile part, or the probe against
the attacker's own vNIC, so that a refusal is the isolation and not a broken probe. The probes
are raw protocol clients (tests/hostile/verbs_probe) and an rdma_cm program run under
jakiro-run (tests/hostile/cm_probe).
"""

import contextlib
import ctypes
import json
import os
import queue
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import (IP, JAKIROD, RUN_DIR, T1, T2, T3, T5, host_config_with, jakirod_pids,
                      jakiroctl, link_mac, ns, run, shim_env, stats, stop, under_jakiro_run,
                      wait_until)

pytestmark = pytest.mark.usefixtures("testbed")

BUILD = Path(JAKIROD).resolve().parents[1]
PROBE = os.environ.get("JAKIRO_VERBS_PROBE") or str(BUILD / "tests" / "hostile" / "verbs_probe")
CM_PROBE = os.environ.get("JAKIRO_CM_PROBE") or str(BUILD / "tests" / "hostile" / "cm_probe")
BY_NAME = "@jakiro/verbs/name/{}"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# rdma.max_cm_backlog's default: the most of a vNIC's rdma_cm ids its peers' requests hold.
CM_BACKLOG = 128


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def probe(namespace, *args, timeout=30):
    """verbs_probe's verdict, run as root in `namespace`."""
    return last_line(ns(namespace, PROBE, *args, timeout=timeout).stdout)


def cm_probe(namespace, *args, timeout=60):
    """cm_probe's verdict, run under jakiro-run in `namespace`."""
    r = subprocess.run(under_jakiro_run(namespace, [CM_PROBE, *args]), capture_output=True,
                       text=True, timeout=timeout, env=shim_env())
    return last_line(r.stdout) or r.stderr.strip()


class Background:
    """A probe running in the background, its output read line by line as it comes."""

    def __init__(self, cmd, stdin=None, env=None):
        self.proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env,
                                     start_new_session=True)
        self.lines = queue.Queue()
        self.output = []  # every line so far
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line.strip())
        self.lines.put(None)  # the end

    def line(self, timeout):
        """The next line within `timeout` seconds, "" if none came (or the probe ended)."""
        try:
            return self.lines.get(timeout=timeout) or ""
        except queue.Empty:
            return ""

    def last(self, timeout):
        """The last line once the probe has ended (waited for up to `timeout` seconds)."""
        self.proc.wait(timeout=timeout)
        last = ""
        while (line := self.lines.get(timeout=5)) is not None:
            last = line or last
        return last

    def say(self, text):
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()


@contextlib.contextmanager
def background(cmd, stdin=None, env=None):
    b = Background(cmd, stdin, env)
    try:
        yield b
    finally:
        stop(b.proc)


def cm_probe_bg(namespace, *args, stdin=None):
    """cm_probe in the background under jakiro-run; stopped when the block ends."""
    return background(under_jakiro_run(namespace, [CM_PROBE, *args]), stdin, shim_env())


def rdma_face(vnic, host="h1"):
    """The vNIC's RDMA face in `jakiroctl stats --json`."""
    return stats(host)["rdma_faces"][vnic]


def metric(host, name, **labels):
    """One sample of jakirod's /metrics (the control socket's `metrics`), or None."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in jakiroctl(host, "metrics").stdout.splitlines():
        m = re.fullmatch(rf"{name}\{{([^}}]*)\}} (\S+)", line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            return float(m.group(2))
    return None


# ---- row 6: the namespace an endpoint is bound in

def link_index(namespace, ifname):
    return json.loads(ns(namespace, "ip", "-j", "link", "show", ifname).stdout)[0]["ifindex"]


@contextlib.contextmanager
def looking_like(attacker, victim):
    """The attacker's root makes its namespace look like the victim's from the inside: an
    interface with the victim's eth0 MAC at the victim's eth0 ifindex (its own eth0 when that
    has the index already, else one more interface)."""
    index, mac = link_index(victim, "eth0"), link_mac(victim, "eth0")
    if link_index(attacker, "eth0") == index:
        own = link_mac(attacker, "eth0")
        ns(attacker, "ip", "link", "set", "eth0", "address", mac)
        undo = ["ip", "link", "set", "eth0", "address", own]
    else:
        ns(attacker, "ip", "link", "add", "mimic", "index", str(index), "address", mac, "type",
           "veth", "peer", "name", "mimic-peer")
        undo = ["ip", "link", "del", "mimic"]
    try:
        yield
    finally:
        ns(attacker, *undo, check=False)


def add_again(tmp_path, vnic):
    """`apply` without the vNIC, then with it: its RDMA face is bound anew. The second apply's
    summary (its RDMA face's error, if any)."""
    jakiroctl("h1", "apply", str(host_config_with(tmp_path, vnic, None)), timeout=60)
    return jakiroctl("h1", "apply", str(RUN_DIR / "h1.yaml"), timeout=60).stdout


def test_a_tenant_that_looks_like_another_from_inside_never_moves_its_rdma_endpoint(tmp_path):
    # Control: t1 removed and added back is served in its own namespace, nowhere else.
    out = add_again(tmp_path, "t1")
    assert "RDMA face" not in out, out
    assert probe(T1, "hello", BY_NAME.format("t1")) == "vnic t1"
    assert probe(T3, "hello", BY_NAME.format("t1")) == "refused ECONNREFUSED"
    # Red t3's root gives its namespace an interface with t1's MAC at t1's ifindex. t1 still
    # gets its RDMA face back, in its own namespace (not refused as in "several namespaces").
    with looking_like(T3, T1):
        out = add_again(tmp_path, "t1")
        assert "RDMA face" not in out, out
        assert probe(T1, "hello", BY_NAME.format("t1")) == "vnic t1"
        assert probe(T3, "hello", BY_NAME.format("t1")) == "refused ECONNREFUSED"
    assert probe(T3, "hello", BY_NAME.format("t3")) == "vnic t3"


def test_a_victim_whose_namespace_has_no_name_is_still_bound_in_its_own_never_the_lookalikes(
        tmp_path):
    # t1's namespace loses its name (a container whose runtime does not pin it in /run/netns,
    # or one restarting), kept alive by a process in it; red t3 looks like t1 from the inside.
    keeper = subprocess.Popen(["ip", "netns", "exec", T1, "sleep", "300"],
                              start_new_session=True)
    inside_t1 = ["nsenter", f"--net=/proc/{keeper.pid}/ns/net"]
    try:
        wait_until(lambda: Path(f"/proc/{keeper.pid}/ns/net").exists(), 5, "the keeper")
        time.sleep(0.2)  # `ip netns exec` has exec'd sleep inside t1
        with looking_like(T3, T1):
            run("ip", "netns", "del", T1)  # the name goes; the namespace stays
            try:
                out = add_again(tmp_path, "t1")
                print(out)
                # Served in t1's own namespace (found by the kernel's record of its veth's
                # peer), never in t3's, whose interfaces alone would match.
                assert probe(T3, "hello", BY_NAME.format("t1")) == "refused ECONNREFUSED"
                r = run(*inside_t1, PROBE, "hello", BY_NAME.format("t1"))
                assert last_line(r.stdout) == "vnic t1", r.stdout
            finally:
                run("ip", "netns", "attach", T1, str(keeper.pid), check=False)
        # Control: named again, t1 is itself.
        assert probe(T1, "hello", BY_NAME.format("t1")) == "vnic t1"
    finally:
        stop(keeper)
        # Whatever happened above, t1's face is bound afresh for the tests that follow.
        add_again(tmp_path, "t1")


# ---- row 7: MIGRATE_ID takes ids only from a channel the caller holds

def test_an_unprivileged_process_cannot_take_roots_rdma_cm_listener():
    port = 7610
    args = ["-a", IP[T1], "-p", str(port), "-C", "5", "-S", "100", "-V", "-v"]
    with background(under_jakiro_run(T1, ["rping", "-s", *args]), env=shim_env()) as server:
        time.sleep(1.5)  # rping has listened (rdma_cm servers open no TCP port to wait for)
        # Nobody, in t1's namespace, names every channel and id up to 64 in MIGRATE_ID.
        with background(["ip", "netns", "exec", T1, *NOBODY, PROBE, "cm-steal",
                         BY_NAME.format("t1"), "64", "8"]) as thief:
            assert thief.line(30) == "vnic t1"  # it is a client of t1 like any other
            assert thief.line(30) == "migrated 0"
            # The next connection request goes to root's rping, which serves it.
            client = subprocess.run(under_jakiro_run(T2, ["rping", "-c", *args]),
                                    capture_output=True, text=True, timeout=60, env=shim_env())
            assert client.returncode == 0, client.stdout + client.stderr
            assert client.stdout.count("ping data: rdma-ping-") == 5, client.stdout
            server.last(20)
            served = "".join(server.output)
            assert server.proc.returncode == 0 and served.count("server ping data") == 5, served
            assert thief.last(20) == "events 0"
    # Controls: the same probe, as nobody, moves an id between two channels of its own when it
    # shows the source channel, as the shim does; and a librdmacm program's rdma_migrate_id works.
    r = ns(T1, *NOBODY, PROBE, "cm-migrate-own", BY_NAME.format("t1"))
    assert last_line(r.stdout) == "migrated own", r.stdout
    assert cm_probe(T1, "migrate-own") == "migrated own"


# ---- rdma_cm ids, the backlog and held REQs: a neighbour's requests through QP1

def test_a_neighbours_sidr_requests_never_take_a_vnics_rdma_cm_ids():
    port = 7710
    with cm_probe_bg(T1, "listen-ud", str(port), "15") as listener:
        assert listener.line(20) == "listening"
        # Control: t1's own processes get 800 ids with its listener up.
        assert cm_probe(T1, "create-ids", "800") == "created 800"
        before = rdma_face("t1")["rdma_cm"]
        # Blue t5 (same VPC and host, admitted by the security groups) sends 1000 SIDR_REQs to
        # t1's UD listener, whose application takes none of them.
        assert cm_probe(T5, "sidr-flood", IP[T1], str(port), "1000") == "sent 1000"
        face = rdma_face("t1")["rdma_cm"]
        assert face["ids"] <= 1 + CM_BACKLOG, face
        assert face["requests_over_backlog"] - before["requests_over_backlog"] >= 1000 - CM_BACKLOG
        # t1's own processes still get their ids (no EDQUOT after a few dozen).
        assert cm_probe(T1, "create-ids", "800") == "created 800"
        assert metric("h1", "jakiro_rdma_cm_refused_total", reason="backlog", vnic="t1") >= (
            1000 - CM_BACKLOG)
        assert metric("h1", "jakiro_rdma_cm_ids", vnic="t1") <= 1 + CM_BACKLOG
        qps = json.loads(jakiroctl("h1", "qps", "--json").stdout)["endpoints"]["vnics"]
        assert qps["t1"]["rdma_cm"]["max_backlog"] == CM_BACKLOG
        assert qps["t1"]["rdma_cm"]["requests_over_backlog"] >= 1000 - CM_BACKLOG
        assert qps["t5"]["rdma_cm"]["requests_over_backlog"] == 0, "the sender's own is clean"
        assert listener.last(30) == f"requests {CM_BACKLOG}"


def dial_just_before_the_listener(port):
    """t2 dials t1:port a moment before t1's application listens there (perftest -R's
    pattern): the REQ waits for the listener. (dial verdict, accept verdict)."""
    with cm_probe_bg(T1, "accept-on-cue", str(port), stdin=subprocess.PIPE) as acceptor:
        assert acceptor.line(20) == "ready"
        with cm_probe_bg(T2, "dial", IP[T1], str(port)) as dialer:
            assert dialer.line(20) == "dialing"
            time.sleep(0.02)
            acceptor.say("listen")
            return dialer.line(20), acceptor.line(20)


def test_a_neighbour_holding_every_waiting_slot_leaves_another_peers_request_its_wait():
    # Control: alone, t2's early REQ waits for t1's listener and is accepted.
    assert dial_just_before_the_listener(7810) == ("established", "accepted")
    before = rdma_face("t1")["rdma_cm"]["held_reqs_refused"]
    # Blue t5 keeps 40 REQs waiting at t1 for ports where nobody listens, all the time (QP1 is
    # not filtered by the security groups, and t5 is admitted anyway).
    with cm_probe_bg(T5, "req-flood", IP[T1], "7900", "40", "12") as flood:
        time.sleep(2)
        assert dial_just_before_the_listener(7811) == ("established", "accepted")
        assert flood.proc.poll() is None, flood.line(1)
    assert rdma_face("t1")["rdma_cm"]["held_reqs_refused"] > before


# ---- control-plane time: one vNIC's stuck call and everyone else's calls

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH = 0x4206, 0x4207, 17
WALL = 0x40000000  # __WALL: wait for a thread that is not the process's leader too


@contextlib.contextmanager
def thread_stopped(tid):
    """Thread `tid` alone stopped (ptrace's group-stop of one thread), as a worker stalled by
    a flood would be; the rest of the process runs on. Resumed when the block ends, and by the
    kernel should this process die first."""
    for request in (PTRACE_SEIZE, PTRACE_INTERRUPT):
        if _libc.ptrace(request, tid, None, None) != 0:
            raise OSError(ctypes.get_errno(), f"ptrace {request:#x} of thread {tid}")
    os.waitpid(tid, WALL)
    try:
        yield
    finally:
        _libc.ptrace(PTRACE_DETACH, tid, None, None)


def timed(cmd):
    start = time.monotonic()
    r = run(*cmd, timeout=30, check=False)
    return last_line(r.stdout), time.monotonic() - start


def test_a_vnics_call_stuck_on_its_worker_delays_no_other_vnics_verbs_or_rdma_cm_calls():
    # h1's one worker is jakirod's main thread, which runs every vNIC's QPs.
    worker = jakirod_pids()["h1"]
    others = [(T5, "t5"), (T3, "t3")]
    # Control: with the worker running, t1 creates its QP at once, and every other vNIC's
    # HELLO and rdma_cm commands are answered at once.
    verdict, _ = timed(["ip", "netns", "exec", T1, PROBE, "create-qp-timed", BY_NAME.format("t1")])
    assert re.fullmatch(r"qp status 0 after \d+ ms", verdict), verdict
    for namespace, vnic in others:
        assert timed(["ip", "netns", "exec", namespace, PROBE, "hello", BY_NAME.format(vnic)])[
            1] < 1
    with thread_stopped(worker):
        # t1's create_qp waits for the worker (up to jakirod's 5 s call timeout)...
        with background(["ip", "netns", "exec", T1, PROBE, "create-qp-timed",
                         BY_NAME.format("t1")]) as stuck:
            assert stuck.line(10) == "vnic t1"
            time.sleep(0.5)  # its create_qp is waiting now
            # ...while t5's and t3's verbs and rdma_cm calls are answered at once: they used to
            # wait behind t1's call, the rest of its 5 s.
            for namespace, vnic in others:
                hello, took = timed(["ip", "netns", "exec", namespace, PROBE, "hello",
                                     BY_NAME.format(vnic)])
                assert hello == f"vnic {vnic}" and took < 1.5, (vnic, hello, took)
                cm, took = timed(["ip", "netns", "exec", namespace, PROBE, "cm-migrate-own",
                                  BY_NAME.format(vnic)])
                assert cm == "migrated own" and took < 1.5, (vnic, cm, took)
            verdict = stuck.line(15)
    # t1's own call did wait, and ended as the engine says (ETIMEDOUT: the worker never came).
    m = re.fullmatch(r"qp status (\d+) after (\d+) ms", verdict)
    assert m and m.group(1) == "110" and int(m.group(2)) >= 4500, verdict
    # And the worker is back: t1 creates a QP again.
    verdict, _ = timed(["ip", "netns", "exec", T1, PROBE, "create-qp-timed", BY_NAME.format("t1")])
    assert re.fullmatch(r"qp status 0 after \d+ ms", verdict), verdict
