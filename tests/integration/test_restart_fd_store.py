"""`systemctl restart jakirod@h1` without tenants noticing (docs/restart.md): on SIGTERM the
daemon parks its state image and every descriptor it names in the unit's file-descriptor store,
and the next start restores from it. systemd is not PID 1 here: service_manager.py plays its
side of the protocol (notify socket, FDSTORE=1/FDNAME=/FDSTOREREMOVE=1/BARRIER=1, then
LISTEN_FDS/LISTEN_FDNAMES/LISTEN_PID), running h1's jakirod as jakirod@.service does.

A state the new binary cannot use (truncated, corrupt, a section version it does not read) is
not restored at all: the daemon starts cold, says why, and the tenants fail fast as after a
crash. Descriptors meant for another process are not believed.
"""

import fcntl
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (IP, JAKIROD, RUN_DIR, T1, T2, alive, integrity_pair, iperf3_server,
                      jakiroctl, ping, wait_until)
from service_manager import ServiceManager
from test_rdma_device_fatal import Program, listening

pytestmark = pytest.mark.usefixtures("testbed")

BUILD = Path(JAKIROD).resolve().parents[1]
UNIT = Path(os.environ.get("JAKIRO_UNIT") or BUILD / "dataplane" / "jakirod@.service")


def unit_setting(key):
    for line in UNIT.read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1]
    raise AssertionError(f"no {key}= in {UNIT}")


# As the unit runs it: its store's size (and --fd-store) and its scheduling priority.
STORE_MAX = int(unit_setting("FileDescriptorStoreMax"))
NICE = int(unit_setting("Nice"))


def status(host="h1"):
    return json.loads(jakiroctl(host, "status", "--json").stdout)


def qpns(host):
    out = jakiroctl(host, "qps").stdout
    return sorted(re.findall(r"^\S+\s+(0x[0-9a-f]+)\s+(?:RC|UC|UD)\s", out, re.M))


def iperf_flow(host, vnic):
    flows = json.loads(jakiroctl(host, "flows", "--json", "--vnic", vnic).stdout)
    return [f for f in flows if f["proto"] == "tcp" and (f["remote"].endswith(":5201")
                                                         or f["local"].endswith(":5201"))]


def start_plain_h1():
    """h1's jakirod as the test bed runs it (no manager), for the tests after these."""
    log = open(RUN_DIR / "h1.log", "ab")
    p = subprocess.Popen(["ip", "netns", "exec", "jk-h1", JAKIROD, "--config",
                          str(RUN_DIR / "h1.yaml")], stdin=subprocess.DEVNULL, stdout=log,
                         stderr=log, start_new_session=True)
    (RUN_DIR / "h1.pid").write_text(f"{p.pid}\n")
    wait_until(lambda: status_ready(), 40, "h1's jakirod to be ready")


def status_ready():
    try:
        return status().get("ready") is True
    except Exception:  # not answering yet
        return False


@pytest.fixture
def unit_h1(tmp_path):
    """h1's jakirod under the service manager, as jakirod@h1.service runs it."""
    pid = int((RUN_DIR / "h1.pid").read_text())
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not alive(pid), 20, "the test bed's h1 jakirod to stop")
    manager = ServiceManager(tmp_path, "jk-h1",
                             [JAKIROD, "--config", RUN_DIR / "h1.yaml", "--fd-store", STORE_MAX],
                             STORE_MAX, RUN_DIR / "h1.log", nice=NICE)
    try:
        manager.start()
        (RUN_DIR / "h1.pid").write_text(f"{manager.pid}\n")
        assert manager.wait_ready(0, 40), "h1's jakirod exited under the service manager"
        wait_until(lambda: ping(T1, IP[T2]), 20, "t1 to reach t2")
        yield manager
    finally:
        manager.stop()
        manager.close()
        start_plain_h1()


def systemctl_restart(manager, **kw):
    """`systemctl restart`; asserts the old process stored its state and exited 0."""
    since = len(manager.messages)
    old = manager.pid
    t0 = time.monotonic()
    code, ready = manager.restart(**kw)
    took = time.monotonic() - t0
    (RUN_DIR / "h1.pid").write_text(f"{manager.pid}\n")
    sent = manager.texts(since)
    assert code == 0, f"the old jakirod exited {code}"
    assert "FDSTORE=1\nFDNAME=jakiro-state" in sent, sent[-5:]
    assert any("STOPPING=1" in t for t in sent)
    assert ready, f"the new jakirod exited {manager.exit_status}"
    assert not alive(old)
    return took


def test_tenant_programs_live_through_systemctl_restarts(unit_h1, tmp_path):
    """ib_write_bw (RC) and rping -V t1 (h1) <-> t2 (h2) and an iperf3 stream t1 -> t2 while
    h1's jakirod is restarted twice the way systemctl does it: every program exits 0, the QPs are
    the same after, the conntrack entry of the stream is carried, and status says so."""
    manager = unit_h1
    programs = []
    iperf_out = tmp_path / "iperf3.json"
    with iperf3_server(T2), open(iperf_out, "w") as f:
        iperf = subprocess.Popen(["ip", "netns", "exec", T1, "iperf3", "-c", IP[T2], "-t", "35",
                                  "-J"], stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            rping = ["rping", "-a", IP[T2], "-p", 19622, "-C", 15000, "-S", 4000, "-V"]
            servers = [
                Program(T2, ["ib_write_bw", "-p", 19620, "-D", 35], tmp_path, "bw-server"),
                Program(T2, [rping[0], "-s", *rping[1:]], tmp_path, "rping-server")]
            programs += servers
            wait_until(lambda: listening(T2, 19620) or servers[0].proc.poll() is not None, 20,
                       "ib_write_bw to listen")
            time.sleep(1)  # rping listens through rdma_cm (no TCP socket to see)
            programs += [
                Program(T1, ["ib_write_bw", "-p", 19620, "-D", 35, IP[T2]], tmp_path, "bw"),
                Program(T1, [rping[0], "-c", *rping[1:]], tmp_path, "rping")]
            time.sleep(3)
            qps_before = qpns("h1")
            ended_early = [p.role for p in programs if p.proc.poll() is not None]
            assert not ended_early, "".join(p.output() for p in programs)
            for _ in range(2):
                flows_before = iperf_flow("h1", "t1")
                assert flows_before, "no iperf3 flow in h1's conntrack before the restart"
                took = systemctl_restart(manager)
                last = status()["last_restart"]
                print(f"\nsystemctl restart: {took:.2f}s; last_restart {last}; "
                      f"dropped from the store (hung up): {manager.dropped}")
                assert last["kind"] == "restart" and last["via"] == "fd store", last
                assert 'via="fd store"' in jakiroctl("h1", "metrics").stdout
                assert last["carried"].get("rdma_clients", 0) >= 1, last
                assert last["carried"].get("flows", 0) >= 1, last
                assert last["blackout_ms"] > 0, last
                assert iperf_flow("h1", "t1"), "the iperf3 flow was not carried"
                # The new process takes its state out of the store: a crash finds none.
                wait_until(lambda: manager.names() == [], 10, "the store to be emptied")
                assert not manager.refused, manager.refused
                time.sleep(3)
            qps_after = qpns("h1")
            ended = {p.role: p.wait(60) for p in programs}
            outputs = "".join(p.output() for p in programs)
            print(", ".join(f"{role} {code}" for role, code in ended.items()))
            assert all(code == 0 for code in ended.values()), outputs
            assert iperf.wait(timeout=60) == 0
        finally:
            for p in programs:
                p.stop()
            if iperf.poll() is None:
                iperf.kill()
    assert "data mismatch" not in (tmp_path / "rping.out").read_text()
    result = json.loads(iperf_out.read_text())
    assert "error" not in result, result.get("error")
    assert qps_before and set(qps_before) <= set(qps_after), (qps_before, qps_after)
    assert status()["restarts"]["restart"] >= 2


def truncated(data):
    return data[:len(data) // 2]


def corrupt(data):
    return b"NOTJAKIR" + data[8:]


@pytest.mark.parametrize("damage,expected", [
    ("truncated", "cut short"),
    ("corrupt", "not a jakirod state"),
    # The same binary told to read the required 'daemon' section only up to version 0: what a
    # binary built before that section's current version would be.
    ("version", "state section 'daemon' is version 1; the new binary reads up to version 0"),
])
def test_a_state_that_cannot_be_read_starts_the_daemon_cold_and_tenants_fail_fast(
        unit_h1, tmp_path, damage, expected):
    manager = unit_h1
    port = 19624
    server = Program(T2, ["ib_write_bw", "-p", port, "-D", 60], tmp_path, "server")
    client = None
    try:
        wait_until(lambda: listening(T2, port), 20, "ib_write_bw to listen")
        client = Program(T1, ["ib_write_bw", "-p", port, "-D", 60, IP[T2]], tmp_path, "client")
        time.sleep(3)
        assert client.proc.poll() is None, client.output()
        assert manager.terminate() == 0
        assert "jakiro-state" in manager.names()
        env = {}
        if damage == "version":
            env["JAKIRO_HANDOVER_READS"] = "daemon:0"
        else:
            # Replace the stored state by a damaged copy, sealed as the daemon seals it.
            with manager._lock:
                at = [i for i, (name, _) in enumerate(manager.store) if name == "jakiro-state"][0]
                fd = manager.store[at][1]
                data = os.pread(fd, os.fstat(fd).st_size, 0)
                bad = truncated(data) if damage == "truncated" else corrupt(data)
                copy = os.memfd_create("state", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                os.write(copy, bad)
                fcntl.fcntl(copy, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK |
                            fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
                os.close(fd)
                manager.store[at] = ("jakiro-state", copy)
        log_before = (RUN_DIR / "h1.log").stat().st_size
        since = len(manager.messages)
        manager.start(env)
        started = time.monotonic()
        (RUN_DIR / "h1.pid").write_text(f"{manager.pid}\n")
        assert manager.wait_ready(since, 40), f"the new jakirod exited {manager.exit_status}"
        # Cold, with the reason, and nothing of the state left in the store.
        with open(RUN_DIR / "h1.log", errors="replace") as f:
            f.seek(log_before)
            log = f.read()
        assert "fd_store_refused" in log and expected in log, log[-3000:]
        wait_until(lambda: manager.names() == [], 10, "the store to be emptied")
        last = status()["last_restart"]
        assert last["kind"] == "crash" and expected in last["state_refused"], last
        # The tenant learns at once (its connection closed with the store's copies).
        code = client.wait(5)
        print(f"\nclient exited {code} {time.monotonic() - started:.2f}s after the cold start")
        assert code not in (None, 0), client.output()
    finally:
        if client:
            client.stop()
        server.stop()
    # The cold daemon serves: overlay traffic and RDMA, every byte checked.
    assert ping(T1, IP[T2])
    assert integrity_pair(T2, T1, IP[T2], 19625, ops=100) > 0


def test_descriptors_meant_for_another_process_are_not_believed(unit_h1):
    """The state is passed, but LISTEN_PID names another process (what a process that inherited
    the variables, or anyone but the manager, would present): jakirod does not restore from it,
    nor take it out of the store. (Whether it then starts depends on the stored tap uplink: a
    single-queue tap admits one holder, and the store holds it.)"""
    manager = unit_h1
    assert manager.terminate() == 0
    assert "jakiro-state" in manager.names()
    log_before = (RUN_DIR / "h1.log").stat().st_size
    since = len(manager.messages)
    manager.start(listen_pid=1)
    (RUN_DIR / "h1.pid").write_text(f"{manager.pid}\n")
    deadline = time.monotonic() + 40
    ready = False
    while time.monotonic() < deadline and not ready and manager.running():
        ready = any("READY=1" in t.split("\n") for t in manager.texts(since))
        time.sleep(0.05)
    with open(RUN_DIR / "h1.log", errors="replace") as f:
        f.seek(log_before)
        log = f.read()
    assert "LISTEN_PID 1 is another process" in log, log[-3000:]
    assert "took_over" not in log, log[-3000:]
    if ready:
        last = status()["last_restart"]
        assert last["via"] == "cold" and not last["carried"], last
        os.kill(manager.pid, signal.SIGKILL)  # gone without storing anything of its own
    # Nothing it did not believe was taken out of the store.
    assert "jakiro-state" in manager.names()
    assert not any("FDSTOREREMOVE" in t for t in manager.texts(since))
    # The manager's own start with the store is restored as usual.
    code, ready = manager.restart()
    assert ready, f"jakirod exited {manager.exit_status}"
    (RUN_DIR / "h1.pid").write_text(f"{manager.pid}\n")
    assert status()["last_restart"]["via"] == "fd store"
    assert ping(T1, IP[T2])


@pytest.fixture
def plain_h1_stopped():
    """The test bed's h1 jakirod stopped for a test's own service manager; back afterwards."""
    pid = int((RUN_DIR / "h1.pid").read_text())
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not alive(pid), 20, "the test bed's h1 jakirod to stop")
    managers = []
    try:
        yield managers
    finally:
        for manager in managers:
            manager.stop()
            manager.close()
        start_plain_h1()


def managed_h1(managers, tmp_path, fd_store, store_max):
    """h1's jakirod under a service manager whose store holds `store_max`, told --fd-store."""
    manager = ServiceManager(tmp_path, "jk-h1",
                             [JAKIROD, "--config", RUN_DIR / "h1.yaml", "--fd-store", fd_store],
                             store_max, RUN_DIR / "h1.log", nice=NICE)
    managers.append(manager)
    manager.start()
    (RUN_DIR / "h1.pid").write_text(f"{manager.pid}\n")
    assert manager.wait_ready(0, 40), "h1's jakirod exited under the service manager"
    wait_until(lambda: ping(T1, IP[T2]), 20, "t1 to reach t2")
    return manager


def log_since(offset):
    with open(RUN_DIR / "h1.log", errors="replace") as f:
        f.seek(offset)
        return f.read()


def test_a_state_the_store_cannot_hold_fails_the_stop_and_the_next_start_reports_a_crash(
        plain_h1_stopped, tmp_path):
    """FileDescriptorStoreMax= too small for the descriptors: nothing is stored, and the
    restart does not pass for a clean one: the old process exits 1 (systemd records the unit's
    stop as failed) and the new one reports the tenants' loss as the crash it is to them."""
    manager = managed_h1(plain_h1_stopped, tmp_path, 2, 2)
    log_at = (RUN_DIR / "h1.log").stat().st_size
    code, ready = manager.restart()
    (RUN_DIR / "h1.pid").write_text(f"{manager.pid}\n")
    log = log_since(log_at)
    assert "fd_store_failed" in log and "the store holds 2" in log, log[-3000:]
    assert code == 1, f"the old jakirod exited {code}"
    assert manager.names() == [], manager.names()
    assert ready, f"the new jakirod exited {manager.exit_status}"
    last = status()["last_restart"]
    assert last["kind"] == "crash" and last["via"] == "cold" and not last["carried"], last
    assert 'via="cold"' in jakiroctl("h1", "metrics").stdout
    assert ping(T1, IP[T2])


def test_a_store_that_fills_up_before_the_state_starts_the_next_daemon_cold_with_the_reason(
        plain_h1_stopped, tmp_path):
    """The manager's store holds fewer descriptors than the daemon was told (systemd drops
    what goes beyond FileDescriptorStoreMax=): the state, sent last, is lost, so the next start
    finds descriptors without it, says so and starts cold, and empties the store."""
    manager = managed_h1(plain_h1_stopped, tmp_path, STORE_MAX, 3)
    log_at = (RUN_DIR / "h1.log").stat().st_size
    code, ready = manager.restart()
    (RUN_DIR / "h1.pid").write_text(f"{manager.pid}\n")
    assert code == 0, f"the old jakirod exited {code}"  # it cannot know: the store said nothing
    assert "jakiro-state" in manager.dropped, manager.dropped
    assert ready, f"the new jakirod exited {manager.exit_status}"
    log = log_since(log_at)
    assert "fd_store_refused" in log and "without the state" in log, log[-3000:]
    last = status()["last_restart"]
    assert last["kind"] == "crash" and last["via"] == "cold", last
    assert "without the state" in last["state_refused"], last
    wait_until(lambda: manager.names() == [], 10, "the store to be emptied")
    assert ping(T1, IP[T2])
