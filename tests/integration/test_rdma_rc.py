"""The RDMA face, RC queue pairs end to end: unmodified ibverbs programs (ibverbs-utils'
ibv_rc_pingpong, perftest) and the project's own tests/rdma programs run with jakiro-run in
tenant namespaces, across hosts (t1 on h1 <-> t2 on h2, over the overlay) and on one host
(t1 <-> t5). Data integrity also holds over a lossy, reordering fabric (tc netem on ul-h2, or
fabric_impair.py behind NFQUEUE where the kernel has no sch_netem), where jakiroctl qps shows
the retransmissions; protection errors reach the requester; tshark and scapy check the packets
on the fabric (VXLAN -> RoCEv2 BTH/RETH/AETH, ICRC).

Servers run in the background in their tenant's namespace and are killed in finally blocks;
every process has a timeout. The programs find the shim beside the jakirod under test.
"""

import contextlib
import itertools
import json
import os
import re
import signal
import struct
import subprocess
import threading
import time
import zlib
from pathlib import Path

import pytest

from conftest import (IP, JAKIRO_RUN, JAKIROCTL, SRC, T1, T2, T5, build_tool,
                      global_counter, impaired_fabric, jakiroctl, ns, ns_bg, run, shim_env, stop,
                      uplinks_cut_by_the_kernel, wait_until)

pytestmark = pytest.mark.usefixtures("testbed")

VNIC = {T1: "t1", T2: "t2", T5: "t5"}

# (server tenant, client tenant): over the overlay, and between two vNICs of one jakirod.
PLACEMENTS = {"cross_host": (T2, T1), "intra_host": (T5, T1)}

FABRIC = "jk-fabric"
FABRIC_LINK = "ul-h2"  # the fabric side of h2's underlay veth (tools/testbed, docs/testbed.md)
IMPAIRMENT = ["--loss", 1, "--reorder", 25, "--delay-ms", 1]

SERVER_START_S = 15  # jakiro-run + device open + listen
CLIENT_TIMEOUT_S = 60
SERVER_EXIT_S = 20  # after the client is done

_ports = itertools.count(19000)  # a fresh TCP port per run: no TIME_WAIT surprises


INTEGRITY = build_tool("JAKIRO_RDMA_INTEGRITY", "rdma_integrity")
PROTECTION = build_tool("JAKIRO_RDMA_PROTECTION", "rdma_protection")


def listening(tenant, port):
    r = ns(tenant, "ss", "-Hltn", f"sport = :{port}", timeout=5, check=False)
    return bool(r.stdout.strip())


class Server:
    """A verbs program started in the background under jakiro-run; output goes to files so a
    chatty server can never block on a full pipe."""

    def __init__(self, tenant, cmd, port, tmp_path):
        self.name = Path(str(cmd[0])).name
        self.out = tmp_path / f"{self.name}-{port}.out"
        self.err = tmp_path / f"{self.name}-{port}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", tenant, str(JAKIRO_RUN), "--", *map(str, cmd)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=shim_env(),
                start_new_session=True)
        try:
            wait_until(lambda: self.proc.poll() is not None or listening(tenant, port),
                       SERVER_START_S, f"{self.name} to listen on {port} in {tenant}")
        except AssertionError:
            self.stop()
            raise AssertionError(f"{self.name} did not listen on {port}: {self.output()}")
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited {self.proc.returncode} before listening: "
                                 f"{self.output()}")

    def output(self):
        return (f"\n--- {self.name} stdout\n{self.out.read_text(errors='replace')[-3000:]}"
                f"\n--- {self.name} stderr\n{self.err.read_text(errors='replace')[-3000:]}")

    def stop(self):
        stop(self.proc)


@contextlib.contextmanager
def server(tenant, cmd, port, tmp_path):
    s = Server(tenant, cmd, port, tmp_path)
    try:
        yield s
    finally:
        s.stop()


def text(data):
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def client(tenant, cmd, timeout=CLIENT_TIMEOUT_S):
    """Runs a verbs program to completion under jakiro-run; None for stdout/stderr and
    returncode "timeout" if it had to be killed at `timeout`."""
    try:
        return ns(tenant, JAKIRO_RUN, "--", *cmd, timeout=timeout, check=False, env=shim_env())
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(
            e.cmd, f"killed after {timeout}s", text(e.stdout),
            text(e.stderr) + f"\n(killed: still running after {timeout}s)")


def engine_reports():
    """Both hosts' `jakiroctl qps` (QPs still there, the engine's drops by reason), to
    explain a failed run."""
    text = ""
    for host in ("h1", "h2"):
        r = run(JAKIROCTL, "--host", host, "qps", timeout=10, check=False)
        text += f"\n--- jakiroctl --host {host} qps\n{r.stdout}{r.stderr}"
    return text


def run_pair(placement, server_cmd, client_cmd, port, tmp_path, client_timeout=CLIENT_TIMEOUT_S):
    """Server first, then the client towards the server's tenant IP; both must exit 0.
    Returns (client result, server stdout + stderr)."""
    srv_tenant, cli_tenant = PLACEMENTS[placement]
    with server(srv_tenant, server_cmd, port, tmp_path) as srv:
        cli = client(cli_tenant, client_cmd, timeout=client_timeout)
        try:
            status = srv.proc.wait(timeout=SERVER_EXIT_S if cli.returncode == 0 else 5)
        except subprocess.TimeoutExpired:
            srv.stop()
            status = f"still running {SERVER_EXIT_S}s after its client (killed)"
        out = srv.output()
        print(f"\n--- client {' '.join(map(str, client_cmd))}\n{cli.stdout}{cli.stderr}{out}")
        if cli.returncode != 0 or status != 0:
            out += engine_reports()
        assert cli.returncode == 0, (f"client exited {cli.returncode}:\n{cli.stdout}\n"
                                     f"{cli.stderr}\nserver: {status}{out}")
        assert status == 0, f"server exited {status}: {out}"
        return cli, srv.out.read_text(errors="replace") + srv.err.read_text(errors="replace")


# ---------------------------------------------------------------- ibv_rc_pingpong


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("events", [False, True], ids=["poll", "events"])
@pytest.mark.parametrize("size", [1, 4096, 65536])
def test_ibv_rc_pingpong_completes_with_validated_buffers(placement, events, size, tmp_path):
    port = next(_ports)
    args = ["-g", "0", "-s", size, "-n", 50, "-p", port, "-c"] + (["-e"] if events else [])
    srv_tenant = PLACEMENTS[placement][0]
    cli, srv_out = run_pair(placement, ["ibv_rc_pingpong", *args],
                            ["ibv_rc_pingpong", *args, IP[srv_tenant]], port, tmp_path)
    # -c: the server checks the bytes it received ("invalid data in page N" on stderr).
    assert "invalid data" not in (cli.stderr + srv_out).lower(), cli.stderr + srv_out
    # "8192 bytes in 0.01 seconds = 6.55 Mbit/sec" and "50 iters in ... usec/iter"
    assert re.search(r"\d+ bytes in [\d.]+ seconds", cli.stdout), cli.stdout
    assert "50 iters in" in cli.stdout, cli.stdout


# ---------------------------------------------------------------- ibv_srq_pingpong


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("events", [False, True], ids=["poll", "events"])
def test_ibv_srq_pingpong_runs_its_qps_on_one_shared_receive_queue(placement, events, tmp_path):
    """16 RC QPs per side (the default) take their receives from one SRQ of 500 WQEs."""
    port = next(_ports)
    args = ["-g", "0", "-s", 4096, "-n", 100, "-p", port, "-c"] + (["-e"] if events else [])
    srv_tenant = PLACEMENTS[placement][0]
    cli, srv_out = run_pair(placement, ["ibv_srq_pingpong", *args],
                            ["ibv_srq_pingpong", *args, IP[srv_tenant]], port, tmp_path)
    assert "invalid data" not in (cli.stderr + srv_out).lower(), cli.stderr + srv_out
    assert re.search(r"\d+ bytes in [\d.]+ seconds", cli.stdout), cli.stdout
    assert "100 iters in" in cli.stdout, cli.stdout


def test_ibv_xsrq_pingpong_fails_cleanly_without_xrc():
    """XRC domains and XRC SRQs are not built: the program says so and exits non-zero, without
    a crash or a hang, and leaves nothing behind in jakirod."""
    cmd = ["ibv_xsrq_pingpong", "-g", "0", "-p", next(_ports)]
    r = client(T1, cmd, timeout=20)
    out = (r.stdout or "") + (r.stderr or "")
    assert r.returncode != "timeout", out
    assert r.returncode != 0, out
    assert r.returncode > 0, f"killed by signal {-r.returncode}: {out}"
    assert "couldn't" in out.lower() or "failed" in out.lower(), out


# ---------------------------------------------------------------- perftest

PERFTEST = {
    # tool: (size, iterations); bandwidth at 64 KiB, latency at 2 bytes.
    "ib_write_bw": (65536, 200),
    "ib_read_bw": (65536, 200),
    "ib_send_bw": (65536, 200),
    "ib_write_lat": (2, 200),
    "ib_read_lat": (2, 200),
    "ib_send_lat": (2, 200),
}


def perftest_result(output):
    """(header, values) of perftest's result table: the "#bytes" line and the first line of
    numbers after it."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes"):
            for row in lines[i + 1:]:
                if row.strip() and row.split()[0].isdigit():
                    return line.strip(), row.split()
    return None, None


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("tool", PERFTEST)
def test_perftest_completes_and_reports(tool, placement, tmp_path):
    size, iters = PERFTEST[tool]
    srv_tenant, cli_tenant = PLACEMENTS[placement]
    port = next(_ports)
    common = ["-x", 0, "-F", "-s", size, "-n", iters, "-p", port]
    cli, srv_out = run_pair(placement,
                            [tool, "-d", f"jakiro_{VNIC[srv_tenant]}", *common],
                            [tool, "-d", f"jakiro_{VNIC[cli_tenant]}", *common, IP[srv_tenant]],
                            port, tmp_path)
    header, values = perftest_result(cli.stdout)
    if header is None:  # some tools report on the server side only
        header, values = perftest_result(srv_out)
    assert header is not None, f"no result line in {tool}'s output:\n{cli.stdout}\n{srv_out}"
    print(f"\n{tool} {placement}: {header}\n{tool} {placement}: {' '.join(values)}")
    assert int(values[0]) == size and int(values[1]) == iters
    assert all(float(v) >= 0 for v in values[2:] if re.fullmatch(r"[\d.]+", v))
    if tool.endswith("_bw"):
        assert float(values[3]) > 0, "average bandwidth is 0"


def test_perftest_takes_the_post_send_path_its_device_table_gives_us(tmp_path):
    """perftest 4.5 uses the ibv_wr_* API (ibv_create_qp_ex with send ops, ibv_qp_to_qp_ex)
    only for the devices it lists (ConnectX-4 and later, BlueField, EFA, HNS, by vendor part
    id) and forces --use_old_post_send for every other device, Jakiro's included; no option
    turns the new path on. Its header says which path it took: if a perftest ever offers us
    the new one, this test notices (and the shim's ibv_qp_ex is there to take it)."""
    port = next(_ports)
    common = ["-x", 0, "-F", "-s", 4096, "-n", 20, "-p", port]
    srv_tenant, cli_tenant = PLACEMENTS["intra_host"]
    cli, _ = run_pair("intra_host", ["ib_write_bw", "-d", f"jakiro_{VNIC[srv_tenant]}", *common],
                      ["ib_write_bw", "-d", f"jakiro_{VNIC[cli_tenant]}", *common,
                       IP[srv_tenant]], port, tmp_path)
    m = re.search(r"ibv_wr\* API\s*:\s*(\w+)", cli.stdout)  # " ibv_wr* API     : OFF"
    assert m, f"no ibv_wr* API line in perftest's header:\n{cli.stdout}"
    assert m.group(1) == "OFF", "perftest now takes the ibv_wr_* path: add it to PERFTEST"


# ---------------------------------------------------------------- pyverbs, extended verbs

PYVERBS_SMOKE = SRC / "tests" / "rdma" / "pyverbs_smoke.py"


@pytest.mark.parametrize("placement,receive", [("intra_host", "srq"), ("cross_host", "srq"),
                                               ("intra_host", "own_rq")])
def test_pyverbs_extended_verbs_move_and_check_data(placement, receive, tmp_path):
    """rdma-core's Python bindings across two tenants: extended CQs (start/next/end_poll and
    the read accessors), RC QPs made with send ops (ibv_qp_to_qp_ex), the server receiving on
    an SRQ (or its own receive queue); SEND, SEND with immediate and inline data, RDMA WRITE
    and READ, both atomics, ATOMIC WRITE and a batch ibv_wr_abort discards, all through ibv_wr_*.
    Both sides check every byte and completion (tests/rdma/pyverbs_smoke.py)."""
    srv_tenant, _ = PLACEMENTS[placement]
    port = next(_ports)
    extra = ["--no-srq"] if receive == "own_rq" else []
    cli, srv_out = run_pair(placement,
                            ["/usr/bin/python3", PYVERBS_SMOKE, "--server", "--port", port, *extra],
                            ["/usr/bin/python3", PYVERBS_SMOKE, "--connect", IP[srv_tenant],
                             "--port", port], port, tmp_path)
    assert "pyverbs_smoke: client: all checks passed" in cli.stdout, cli.stdout
    assert "pyverbs_smoke: server: all checks passed" in srv_out, srv_out


# ---------------------------------------------------------------- rdma_integrity

INTEGRITY_SUMMARY = re.compile(r"rdma_integrity: (\d+) of (\d+) ops \(([^)]*)\), (\d+) bytes, "
                               r"(\d+) failures")


def run_integrity(placement, tmp_path, ops, seed, extra=(), timeout=90):
    srv_tenant, _ = PLACEMENTS[placement]
    port = next(_ports)
    common = ["--port", port, "--timeout", timeout, *extra]
    cli, srv_out = run_pair(
        placement, [INTEGRITY, "--server", *common],
        [INTEGRITY, "--connect", IP[srv_tenant], "--ops", ops, "--seed", seed, *common],
        port, tmp_path, client_timeout=timeout + 15)
    m = INTEGRITY_SUMMARY.search(cli.stdout)
    assert m, f"no summary line: {cli.stdout}"
    done, planned, kinds, nbytes, failures = m.groups()
    assert (int(done), int(planned), int(failures)) == (ops, ops, 0), m.group(0)
    assert "rdma_integrity: server:" in srv_out and " 0 failures" in srv_out, srv_out
    # Every kind of op ran.
    assert all(int(n) > 0 for n in re.findall(r"\w+ (\d+)", kinds)), kinds
    return int(nbytes)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_integrity_verifies_every_byte(placement, tmp_path):
    run_integrity(placement, tmp_path, ops=1000, seed=7)


def test_integrity_verifies_every_byte_with_completion_events(tmp_path):
    run_integrity("cross_host", tmp_path, ops=300, seed=11, extra=["--events"])


def test_integrity_detects_injected_corruption(tmp_path):
    """The checker is not vacuous: with --inject-fault each side flips a byte of what the
    first WRITE and SEND delivered (server) and what the first READ brought (client)."""
    port = next(_ports)
    common = ["--port", port, "--timeout", 60, "--inject-fault"]
    with server(T2, [INTEGRITY, "--server", *common], port, tmp_path) as srv:
        cli = client(T1, [INTEGRITY, "--connect", IP[T2], "--ops", 200, "--seed", 3, *common])
        status = srv.proc.wait(timeout=SERVER_EXIT_S)
        out = srv.output()
    print(f"\n{cli.stdout}{cli.stderr}{out}")
    assert cli.returncode == 1 and status == 1, f"client {cli.returncode}, server {status}"
    m = re.search(r"failures \(client (\d+), server (\d+)\)", cli.stdout)
    assert m and int(m.group(1)) >= 1 and int(m.group(2)) >= 2, cli.stdout
    assert "FAIL op" in cli.stderr and "FAIL op" in out


def test_integrity_server_without_client_times_out_cleanly():
    r = ns(T2, JAKIRO_RUN, "--", INTEGRITY, "--server", "--port", next(_ports), "--timeout", 2,
           timeout=20, check=False, env=shim_env())
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "timed out after 2 s while waiting for the client's TCP connection" in r.stderr


class QpWatcher:
    """Polls `jakiroctl qps --json` on both hosts while a test runs and keeps the highest
    counters seen per QP (QPs vanish from the report once destroyed)."""

    def __init__(self, hosts=("h1", "h2"), interval=0.25):
        self.hosts, self.interval = hosts, interval
        self.peak = {}  # (host, vnic, qpn) -> {counter: max}
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def query(host):
        return run(JAKIROCTL, "--host", host, "qps", "--json", timeout=10, check=False)

    def _run(self):
        while not self._stop.is_set():
            for host in self.hosts:
                r = self.query(host)
                if r.returncode != 0:
                    self.error = r.stderr.strip()
                    continue
                for q in json.loads(r.stdout).get("qps", []):
                    key = (host, q.get("vnic"), q.get("qpn"))
                    peak = self.peak.setdefault(key, {})
                    for k, v in q.items():
                        if isinstance(v, int) and not isinstance(v, bool):
                            peak[k] = max(peak.get(k, 0), v)
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=15)

    def total(self, counter):
        return sum(p.get(counter, 0) for p in self.peak.values())


def qps_command_available():
    r = QpWatcher.query("h1")
    if r.returncode == 0:
        return True
    print(f"\njakiroctl qps unavailable ({r.returncode}): {r.stderr.strip()}")
    return False


NFQUEUE_NUM = 7


@contextlib.contextmanager
def lossy_fabric(tmp_path, report):
    """1 % loss, 25 % reordering, 1 ms delay for frames bridged towards h2 (report[FABRIC_LINK]:
    what fabric_impair.py counted)."""
    with impaired_fabric(tmp_path, report, {FABRIC_LINK: (NFQUEUE_NUM, [])}, IMPAIRMENT, seed=5):
        yield


QP_COUNTERS = ("retransmitted", "timeouts", "naks_received", "naks_sent", "duplicates",
               "out_of_sequence", "error_completions")


def test_integrity_on_a_clean_fabric_sends_almost_nothing_twice(tmp_path):
    """The fabric between the hosts loses nothing here, so RC has nothing to recover: READs,
    WRITEs and SENDs mixed must not make a QP go back for answers that were merely behind
    others (READ responses overtaken by a later ACK once cost 70 % of the packets sent again
    and a local ACK timeout every few dozen ops, and long runs ran out of time)."""
    if not qps_command_available():
        pytest.fail("jakiroctl qps is not available")
    watcher = QpWatcher()
    with watcher:
        run_integrity("cross_host", tmp_path, ops=3000, seed=29, timeout=60)
    counters = {c: watcher.total(c) for c in (*QP_COUNTERS, "packets_sent")}
    print(f"jakiroctl qps (peaks over the run, both hosts): {counters}")
    assert watcher.peak, f"jakiroctl qps never showed a QP ({watcher.error})"
    # A frame the host really drops now and then may be resent; go-back-N by design may not.
    assert counters["retransmitted"] * 100 < counters["packets_sent"], counters
    assert counters["timeouts"] <= 2, counters


def test_integrity_survives_loss_and_reordering_by_retransmitting(tmp_path):
    have_qps = qps_command_available()
    impairment = {}
    watcher = QpWatcher()
    try:
        with lossy_fabric(tmp_path, impairment), watcher:
            t0 = time.monotonic()
            nbytes = run_integrity("cross_host", tmp_path, ops=200, seed=23, timeout=150,
                                   extra=["--max-size", 65536])
            elapsed = time.monotonic() - t0
    finally:
        # Also when the run failed: what the impairment did and what the QPs went through.
        print(f"impairment: {impairment.get(FABRIC_LINK)}")
        for key, peak in sorted(watcher.peak.items()):
            print(f"jakiroctl qps {key}: " + ", ".join(f"{c} {peak.get(c, 0)}"
                                                       for c in QP_COUNTERS))
    print(f"{nbytes} bytes verified in {elapsed:.1f}s over {' '.join(map(str, IMPAIRMENT))}")
    stats = impairment.get(FABRIC_LINK)
    assert isinstance(stats, dict) and stats["dropped"] > 0 and stats["delayed"] > 0, \
        f"nothing was impaired: {stats}"
    assert have_qps, "jakiroctl qps failed: the retransmission counters cannot be checked"
    counters = {c: watcher.total(c) for c in QP_COUNTERS}
    print(f"jakiroctl qps (peaks over the run, both hosts): {counters}")
    assert watcher.peak, f"jakiroctl qps never showed a QP ({watcher.error})"
    assert counters["retransmitted"] > 0, "1% loss and reordering, yet no QP retransmitted"


def test_integrity_holds_while_the_send_cq_is_resized_under_loss(tmp_path):
    """ibv_resize_cq across hosts on a lossy, reordering fabric: the client resizes its send CQ
    right after posting every batch (to 8 batches, then to exactly one), while retransmissions
    and ACKs make jakirod's engine complete into it; every op must still complete once, in
    order, with every byte right (rdma_integrity --resize-cq)."""
    impairment = {}
    with lossy_fabric(tmp_path, impairment):
        run_integrity("cross_host", tmp_path, ops=120, seed=29, timeout=150,
                      extra=["--max-size", 65536, "--resize-cq"])
    print(f"impairment: {impairment.get(FABRIC_LINK)}")
    stats = impairment.get(FABRIC_LINK)
    assert isinstance(stats, dict) and stats["dropped"] > 0, f"nothing was impaired: {stats}"


# ---------------------------------------------------------------- rdma_protection


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_protection_errors_reach_the_requester_and_memory_stays_untouched(placement, tmp_path):
    srv_tenant, _ = PLACEMENTS[placement]
    port = next(_ports)
    cli, srv_out = run_pair(placement, [PROTECTION, "--server", "--port", port],
                            [PROTECTION, "--connect", IP[srv_tenant], "--port", port], port,
                            tmp_path)
    assert "3 of 3 cases as expected; server MEMORY untouched" in cli.stdout, cli.stdout
    assert "server: memory untouched" in srv_out, srv_out


# ---------------------------------------------------------------- the wire

BTH_FIELDS = ["vxlan.vni", "udp.dstport", "infiniband.bth.opcode", "infiniband.bth.destqp",
              "infiniband.bth.psn", "infiniband.reth.va", "infiniband.reth.r_key",
              "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "infiniband.aeth.msn"]

# RC opcodes (docs/roce-wire.md).
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY, ACK = 0x06, 0x07, 0x08, 0x0A, 0x11


def icrc_by_hand(ip_bytes):
    """docs/roce-wire.md's ICRC: CRC-32 over 8 bytes of 0xFF and the inner IPv4 packet up to the
    ICRC, with TOS, TTL, IPv4 checksum, UDP checksum and BTH byte 4 set to 0xFF."""
    ihl = (ip_bytes[0] & 0x0F) * 4
    body = bytearray(ip_bytes[:-4])
    body[1] = body[8] = 0xFF
    body[10:12] = b"\xff\xff"
    body[ihl + 6:ihl + 8] = b"\xff\xff"
    body[ihl + 8 + 4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(body)) & 0xFFFFFFFF


@pytest.fixture(scope="module")
def roce_capture(tmp_path_factory):
    """A pcap of br0 while t1 runs a short ib_write_bw to t2 (64 KiB messages)."""
    d = tmp_path_factory.mktemp("roce")
    pcap = d / "fabric.pcap"
    err = open(d / "tshark.err", "w+")
    cmd = ["tshark", "-n", "-i", "br0", "-f", "udp port 4789", "-a", "duration:60",
           "-w", str(pcap)]
    # The uplinks cut their super-datagrams in the kernel, as a NIC would: tshark decodes the
    # first frame of a super-datagram only.
    with uplinks_cut_by_the_kernel(), ns_bg(FABRIC, *cmd, stderr=err) as tshark:
        wait_until(lambda: "Capturing on" in (d / "tshark.err").read_text(), 10,
                   "tshark to start")
        port = next(_ports)
        tool = ["ib_write_bw", "-x", 0, "-F", "-s", 65536, "-n", 20, "-p", port]
        run_pair("cross_host", [*tool, "-d", "jakiro_t2"],
                 [*tool, "-d", "jakiro_t1", IP[T2]], port, d)
        time.sleep(0.5)
        os.killpg(tshark.pid, signal.SIGINT)
        wait_until(lambda: tshark.poll() is not None, 10, "tshark to finish")
    assert pcap.exists() and pcap.stat().st_size > 0, (d / "tshark.err").read_text()
    return pcap


def roce_frames_in(capture):
    """The inner Ethernet frames of a capture's VXLAN frames that carry RoCE v2 (UDP 4791)."""
    from scapy.all import rdpcap
    from scapy.layers.inet import IP as IPv4, UDP
    from scapy.layers.vxlan import VXLAN

    for frame in rdpcap(str(capture)):
        if VXLAN not in frame:
            continue
        inner = frame[VXLAN].payload
        if IPv4 in inner and UDP in inner[IPv4] and inner[IPv4][UDP].dport == 4791:
            yield inner


def test_tshark_decodes_vxlan_roce_bth_reth_aeth(roce_capture):
    cmd = ["tshark", "-n", "-r", str(roce_capture), "-Y", "infiniband", "-T", "fields",
           "-E", "separator=\t", "-E", "aggregator=,"]
    for f in BTH_FIELDS:
        cmd += ["-e", f]
    out = run(*cmd, timeout=60).stdout
    rows = [dict(zip(BTH_FIELDS, line.split("\t"))) for line in out.splitlines()]
    print(f"\n{len(rows)} RoCE packets decoded")
    assert rows, "tshark decoded no InfiniBand (RoCEv2) packet inside VXLAN"
    opcodes = {}
    for r in rows:
        op = int(r["infiniband.bth.opcode"], 0)
        opcodes[op] = opcodes.get(op, 0) + 1
        assert r["vxlan.vni"] == "100"
        assert r["udp.dstport"].split(",")[-1] == "4791"  # outer 4789, inner 4791
    print("opcodes: " + ", ".join(f"{op:#04x} x{n}" for op, n in sorted(opcodes.items())))
    with_reth = [r for r in rows if r["infiniband.reth.r_key"]]
    with_aeth = [r for r in rows if r["infiniband.aeth.syndrome"]]
    assert with_reth, "no packet with a RETH"
    assert with_aeth, "no packet with an AETH"
    for r in with_reth:
        assert int(r["infiniband.bth.opcode"], 0) in (WRITE_FIRST, WRITE_ONLY)
        assert int(r["infiniband.reth.dmalen"]) == 65536  # one RETH per 64 KiB message
        assert int(r["infiniband.reth.va"], 0) != 0
    # 64 KiB at a 1024-byte path MTU: WRITE First, Middles, Last; the responder ACKs.
    assert {WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, ACK} <= set(opcodes), opcodes
    assert all(int(r["infiniband.bth.opcode"], 0) == ACK for r in with_aeth)


def test_captured_icrcs_match_scapy_and_the_spec(roce_capture):
    from scapy.all import raw
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP as IPv4

    checked = {}  # opcode -> packets whose ICRC was checked
    for inner in roce_frames_in(roce_capture):
        ip_bytes = raw(inner[IPv4])[:inner[IPv4].len]
        stored = struct.unpack("<I", ip_bytes[-4:])[0]  # least significant byte first
        opcode = ip_bytes[(ip_bytes[0] & 0x0F) * 4 + 8]
        if opcode in checked and checked[opcode] >= 3:
            continue  # a few of each kind are enough
        # scapy's RoCE layer recomputes the ICRC of the same packet.
        again = IPv4(ip_bytes)
        assert BTH in again, f"scapy did not dissect BTH: {again.summary()}"
        again[BTH].icrc = None
        recomputed = struct.unpack("<I", raw(again)[-4:])[0]
        assert stored == recomputed, (f"opcode {opcode:#04x}: stored ICRC {stored:#010x}, "
                                      f"scapy computes {recomputed:#010x}")
        assert stored == icrc_by_hand(ip_bytes), f"opcode {opcode:#04x}: hand-made ICRC differs"
        checked[opcode] = checked.get(opcode, 0) + 1
    print(f"\nICRC verified per opcode: {', '.join(f'{k:#04x} x{v}' for k, v in checked.items())}")
    assert sum(checked.values()) >= 3, "too few RoCE packets captured to check ICRCs"
    assert ACK in checked and (WRITE_FIRST in checked or WRITE_ONLY in checked), checked


def test_padding_behind_roce_packets_is_zeros_and_never_more_than_a_reth(roce_capture):
    """A QP's full packets share super-datagrams at one size: a WRITE's middle packets are
    padded to its first's (16 bytes of RETH) behind the inner IPv4 packet. The padding is
    zeros (nothing of another buffer leaks) and the inner packet stays whole and first."""
    from scapy.all import raw
    from scapy.layers.inet import IP as IPv4

    padded = unpadded = 0
    for inner in roce_frames_in(roce_capture):
        inner_frame = raw(inner)
        behind = inner_frame[14 + inner[IPv4].len:]
        assert len(behind) <= 16, f"{len(behind)} bytes behind a {inner[IPv4].len}-byte packet"
        assert behind == bytes(len(behind)), f"padding that is not zeros: {behind.hex()}"
        if behind:
            padded += 1
        else:
            unpadded += 1
    print(f"\n{padded} RoCE frames padded, {unpadded} not")
    assert padded > 0 and unpadded > 0, "64 KiB WRITEs: padded middles, unpadded firsts and ACKs"


# ---------------------------------------------------------------- congestion from the fabric


@contextlib.contextmanager
def fabric_marks_ce_towards(port):
    """The fabric's switch marks congestion (CE) on one in 50 ECN-capable (ECT(0)) overlay
    packets it forwards to `port`, as a congested ECN switch would (RED-style, not every
    packet: that would hold DCQCN at its minimum rate): an iptables TOS rule on the bridge.
    Packets that are not ECN-capable (the tenants' TCP here) pass unmarked, as a switch
    would queue or drop them; CE on them would make the far end drop them (RFC 6040)."""
    sysctl = "net.bridge.bridge-nf-call-iptables"
    before = ns(FABRIC, "sysctl", "-n", sysctl).stdout.strip()
    # VXLAN, or ESP in UDP on a sealed test bed (the outer ECN field stays in the clear).
    rule = ["FORWARD", "-m", "physdev", "--physdev-out", port, "-p", "udp", "-m", "multiport",
            "--dports", "4789,4500",
            "-m", "ecn", "--ecn-ip-ect", "2", "-m", "statistic", "--mode", "nth", "--every", "50",
            "--packet", "0", "-j", "TOS", "--set-tos", "0x03/0x03"]
    try:
        ns(FABRIC, "sysctl", "-qw", f"{sysctl}=1")
        ns(FABRIC, "iptables", "-t", "mangle", "-I", *rule)
        yield
    finally:
        ns(FABRIC, "iptables", "-t", "mangle", "-D", *rule, check=False)
        ns(FABRIC, "sysctl", "-qw", f"{sysctl}={before or 0}", check=False)


def write_bw(tmp_path):
    """ib_write_bw t1 -> t2 (64 KiB x 500)."""
    port = next(_ports)
    common = ["-x", 0, "-F", "-s", 65536, "-n", 500, "-p", port]
    run_pair("cross_host", ["ib_write_bw", "-d", f"jakiro_{VNIC[T2]}", *common],
             ["ib_write_bw", "-d", f"jakiro_{VNIC[T1]}", *common, IP[T2]], port, tmp_path)


def cnps(host, vnic, direction):
    """jakiro_rdma_cnps_total of `vnic` on `host` (tx: sent, rx: received): every QP the vNIC
    ever had, destroyed ones included, however briefly they lived."""
    text = jakiroctl(host, "metrics").stdout
    m = re.search(rf'^jakiro_rdma_cnps_total{{direction="{direction}",vnic="{vnic}"}} (\S+)$',
                  text, re.M)
    assert m, f"no jakiro_rdma_cnps_total for {vnic} {direction} on {host}"
    return float(m.group(1))


def test_a_ce_mark_on_the_fabric_reaches_dcqcn_as_cnps_to_the_sender(tmp_path):
    # Counted from the per-vNIC totals: the QPs of a 500-message ib_write_bw may live for less
    # than one look of a `jakiroctl qps` watcher (which can see h1's QP and miss h2's).
    def counts():
        return cnps("h2", VNIC[T2], "tx"), cnps("h1", VNIC[T1], "rx")

    # Control: the same transfer on an unmarked fabric sends no CNP (no QoS on these vNICs,
    # so nothing else would).
    before = counts()
    write_bw(tmp_path)
    after = counts()
    assert after == before, f"CNPs (h2 sent, h1 received) {before} -> {after} with no CE"
    decap_before = global_counter("h2", "ce_marked_on_decap")
    with fabric_marks_ce_towards(FABRIC_LINK):
        write_bw(tmp_path)
    marked = counts()
    sent, received = marked[0] - after[0], marked[1] - after[1]
    print(f"\nCE on the fabric: h2 sent {sent:.0f} CNPs, h1 received {received:.0f}; "
          f"ce_marked_on_decap +{global_counter('h2', 'ce_marked_on_decap') - decap_before}")
    assert global_counter("h2", "ce_marked_on_decap") > decap_before, \
        "RFC 6040: the outer CE was not carried to the inner header"
    assert sent > 0, "h2's engine never answered CE with a CNP"
    assert received > 0, "h1's QP never heard the CNPs"
