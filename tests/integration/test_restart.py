"""Restarting jakirod without tenants noticing (docs/restart.md): `tools/testbed restart hI`
asks the running daemon for its successor (`jakiroctl restart`), which takes over with the state
image over the root-only hand-over socket. What a tenant relies on must survive: a TCP stream
through restarts of both hosts keeps going (its conntrack entry carried, so the security
groups keep passing its packets), /metrics counters never go down, and `jakiroctl status` says
what happened. A successor that cannot read the state is refused while the old daemon serves
on; a tenant cannot take part in a hand-over; a restart that would lose RDMA contexts is refused
unless asked for; a crash is reported as one and the next daemon serves RDMA again at once.
"""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import (IP, JAKIROCTL, JAKIROD, PYTHON, RUN_DIR, T1, T2, TESTBED, alive,
                      iperf3_server, integrity_pair, jakirod_pids, jakiroctl, ns_bg, ping, run,
                      wait_until)
from test_rdma_device_fatal import Program, listening

pytestmark = pytest.mark.usefixtures("testbed")

HANDOVER = "/run/jakiro/h1.sock.handover"
CRASH_EXIT_S = 1.0  # a tenant's program learns of a crash this soon (issue: within 1 s)


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


def test_a_tcp_stream_survives_three_restarts_of_h1_and_two_of_h2(tmp_path):
    before = {h: jakirod_pids()[h] for h in ("h1", "h2")}
    out = tmp_path / "iperf3.json"
    with iperf3_server(T2), open(out, "w") as f:
        with ns_bg(T1, "iperf3", "-c", IP[T2], "-t", "30", "-J", stdout=f) as client:
            time.sleep(2)
            for host in ("h1", "h2", "h1", "h2", "h1"):
                flows_before = iperf_flow(host, "t1" if host == "h1" else "t2")
                assert flows_before, f"no iperf3 flow in {host}'s conntrack before the restart"
                packets_before = max(f["packets_in"] + f["packets_out"] for f in flows_before)
                r = restart(host)
                assert r.returncode == 0, r.stdout + r.stderr
                last = status(host)["last_restart"]
                assert last["kind"] == "restart", last
                assert last["carried"].get("flows", 0) >= 1, last
                # The same connection, its counters carried on (not a new entry from zero).
                flows_after = iperf_flow(host, "t1" if host == "h1" else "t2")
                assert flows_after and max(f["packets_in"] + f["packets_out"]
                                           for f in flows_after) >= packets_before, flows_after
                time.sleep(1.5)
            assert client.wait(timeout=60) == 0
    result = json.loads(out.read_text())
    assert "error" not in result, result.get("error")
    received = result["end"]["sum_received"]["bytes"]
    gbps = result["end"]["sum_received"]["bits_per_second"] / 1e9
    print(f"\niperf3 through 5 restarts: {gbps:.2f} Gbit/s, {received} bytes")
    assert received > 0
    after = jakirod_pids()
    assert all(after[h] != before[h] and not alive(before[h]) for h in before), (before, after)
    assert status("h1")["restarts"]["restart"] == 3
    assert status("h2")["restarts"]["restart"] == 2


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
    # Control: root in the daemon's own namespace is answered (a refusal: version 0).
    assert offer_from("jk-h1") == "verdict"
    # Root inside a tenant's namespace reaches the socket file but is not the service.
    assert offer_from(T1) == "closed"
    # Another user on the host cannot even connect (the socket is root's, mode 0600).
    assert offer_from("jk-h1", user="65534").startswith("connect 13")
    assert alive(old) and status("h1")["last_restart"]["kind"] in ("none", "restart")
    assert ping(T1, IP[T2])


def test_open_rdma_contexts_refuse_a_restart_unless_they_may_be_lost(tmp_path):
    port = 19601
    server = Program(T2, ["ib_write_bw", "-p", port, "-D", 60], tmp_path, "server")
    try:
        wait_until(lambda: listening(T2, port), 20, "ib_write_bw to listen")
        client = Program(T1, ["ib_write_bw", "-p", port, "-D", 60, IP[T2]], tmp_path, "client")
        try:
            time.sleep(4)
            assert client.proc.poll() is None, client.output()
            old = jakirod_pids()["h1"]
            r = run(JAKIROCTL, "--host", "h1", "restart", check=False)
            assert r.returncode == 1 and "RDMA contexts are open" in r.stdout + r.stderr, r
            assert alive(old) and client.proc.poll() is None, client.output()
            r = restart("h1", "--drop-rdma")
            assert r.returncode == 0, r.stdout + r.stderr
            last = status("h1")["last_restart"]
            assert last["lost"].get("rdma_contexts", 0) >= 1, last
            # The lost context's program hears that its device is gone and ends.
            assert client.wait(10) not in (None, 0), client.output()
        finally:
            client.stop()
    finally:
        server.stop()


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
    # The restarted daemon serves RDMA again: every byte of a new exchange checked.
    assert integrity_pair(T2, T1, IP[T2], 19603, ops=100) > 0
