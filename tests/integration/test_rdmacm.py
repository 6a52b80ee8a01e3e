"""rdma_cm for unmodified programs: Debian's rdmacm-utils (rping with data
validation, ucmatose, udaddy, rdma_server/rdma_client, rstream over rsocket), perftest's -R
(rdma_cm connection setup) and libfabric's verbs provider, under jakiro-run in tenant
namespaces: t1 (h1) <-> t2 (h2) over the overlay and t1 <-> t5 on one host. The CM messages
are IB CM MADs on QP1 (tshark decodes them on the fabric); a red tenant dialling blue's address
reaches red's own vNIC of that address; multicast fails with an errno; a lossy fabric only
costs CM retransmissions.

Each server starts in the background, gets 1.5 s to listen (rdma_cm servers open no TCP
port to wait for), and every process has a timeout.
"""

import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (FABRIC_NS, IP, JAKIROCTL, JAKIRO_RUN, SRC, T1, T2, T4, T5, impaired_fabric,
                      jakiroctl, ns, run, shim_env, stop, under_jakiro_run,
                      uplinks_cut_by_the_kernel, wait_until)
from test_secgroups import policy  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("testbed")

PLACEMENTS = {"cross_host": (T2, T1), "intra_host": (T5, T1)}
SERVER_LISTEN_S = 1.5  # jakiro-run + device open + listen, measured < 0.3 s here
TIMEOUT_S = 60
_ports = itertools.count(7100)


def run_client(cmd, server_out):
    """The client, killed after TIMEOUT_S; a client that had to be killed fails the test with
    what it printed, what its server printed and both hosts' QPs, to tell a hang's side."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                              env=shim_env())
    except subprocess.TimeoutExpired as e:
        def said(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        qps = ""
        for h in ("h1", "h2"):
            r = run(JAKIROCTL, "--host", h, "qps", check=False, timeout=10)
            qps += f"\n--- jakiroctl --host {h} qps\n{r.stdout}{r.stderr}"
        pytest.fail(f"client still running after {TIMEOUT_S} s: {' '.join(map(str, cmd))}\n"
                    f"--- client\n{said(e.stdout)[-1500:]}{said(e.stderr)[-1500:]}\n"
                    f"--- server\n{server_out.read_text(errors='replace')[-1500:]}{qps}")


def run_pair(placement, server_cmd, client_cmd, tmp_path):
    """Server in the background, then the client; both must exit 0. Returns their outputs.
    `placement`: a key of PLACEMENTS or a (server tenant, client tenant) pair."""
    srv_tenant, cli_tenant = PLACEMENTS.get(placement, placement)
    out = tmp_path / f"{Path(str(server_cmd[0])).name}.srv"
    with open(out, "w") as o:
        srv = subprocess.Popen(under_jakiro_run(srv_tenant, server_cmd), stdout=o,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env=shim_env(), start_new_session=True)
    try:
        time.sleep(SERVER_LISTEN_S)
        # A REQ that comes before the server has listened is rejected with "invalid service
        # ID" (IB CM reason 8), as on any fabric; a client that meets it tries again. It
        # happens on a loaded machine (an ib_send_lat server that printed nothing for 1.5 s).
        deadline = time.monotonic() + 15
        while True:
            cli = run_client(under_jakiro_run(cli_tenant, client_cmd), out)
            too_early = "RDMA_CM_EVENT_REJECTED; error: 8." in cli.stdout + cli.stderr
            if not too_early or srv.poll() is not None or time.monotonic() > deadline:
                break
            print(f"\n{client_cmd[0]}: no listener yet, the client tries again")
            time.sleep(0.5)
        try:
            status = srv.wait(timeout=20)
        except subprocess.TimeoutExpired:
            status = "still running 20 s after its client"
    finally:
        stop(srv)
    srv_out = out.read_text(errors="replace")
    print(f"\n--- client {client_cmd}\n{(cli.stdout + cli.stderr)[-600:]}\n--- server\n"
          f"{srv_out[-600:]}")
    assert cli.returncode == 0, (f"client exited {cli.returncode}: "
                                 f"{(cli.stdout + cli.stderr)[-2000:]}")
    assert status == 0, f"server exited {status}: {srv_out[-2000:]}"
    return cli.stdout + cli.stderr, srv_out


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_rping_validates_300_pings_of_4000_bytes(placement, tmp_path):
    port = next(_ports)
    ip = IP[PLACEMENTS[placement][0]]
    args = ["-a", ip, "-p", port, "-C", 300, "-S", 4000, "-V", "-v"]
    cli, srv = run_pair(placement, ["rping", "-s", *args], ["rping", "-c", *args], tmp_path)
    assert cli.count("ping data: rdma-ping-") == 300, cli[-2000:]
    assert "data mismatch" not in cli
    assert srv.count("server ping data: rdma-ping-") == 300, srv[-2000:]


# Each program as it runs: server and client command lines for a server at `ip` on `port`
# moving `n` messages (or connections' worth of them), and what its client prints when it
# worked. The same table runs on a clean fabric and, with fewer messages, on a lossy one.
PROGRAMS = {
    "ucmatose": (lambda ip, port, n: (["ucmatose", "-p", port, "-c", 4, "-C", n // 20],
                                      ["ucmatose", "-s", ip, "-p", port, "-c", 4, "-C", n // 20]),
                 ["data transfers complete", "return status 0"]),
    "rdma_server": (lambda ip, port, n: (["rdma_server", "-p", port],
                                         ["rdma_client", "-s", ip, "-p", port]),
                    ["rdma_client: end 0"]),
    # "64k  200  12m  0.01s  ..." : name, bytes, xfers, total, time, Gb/sec, usec/xfer
    "rstream": (lambda ip, port, n: (["rstream", "-p", port, "-S", 65536, "-C", n // 5],
                                     ["rstream", "-s", ip, "-p", port, "-S", 65536, "-C", n // 5]),
                ["64k"]),
    # fi_pingpong's -B/-P are its TCP control port (server listens, client dials); its server
    # binds the rdma_cm id to loopback, which the agent reports as the vNIC's address.
    "fi_pingpong": (lambda ip, port, n: (
        ["fi_pingpong", "-p", "verbs", "-e", "msg", "-I", n // 5, "-S", 1024, "-B", port],
        ["fi_pingpong", "-p", "verbs", "-e", "msg", "-I", n // 5, "-S", 1024, "-P", port, ip]),
        ["MB/sec"]),  # "1k  200  =200  400k  ...  MB/sec"
    "ib_write_bw": (lambda ip, port, n: (
        ["ib_write_bw", "-R", "-F", "-p", port, "-n", n, "-s", 65536],
        ["ib_write_bw", "-R", "-F", "-p", port, "-n", n, "-s", 65536, ip]),
        ["Data ex. method : rdma_cm", "#bytes"]),
    "ib_send_lat": (lambda ip, port, n: (
        ["ib_send_lat", "-R", "-F", "-p", port, "-n", n],
        ["ib_send_lat", "-R", "-F", "-p", port, "-n", n, ip]),
        ["Data ex. method : rdma_cm", "#bytes"]),
}
CLEAN_MESSAGES = 1000
LOSSY_MESSAGES = 40  # a 64 KiB WRITE is 64 packets: at 3 % loss most need a go-back-N


def run_program(name, placement, tmp_path, n=CLEAN_MESSAGES):
    commands, expected = PROGRAMS[name]
    server_cmd, client_cmd = commands(IP[PLACEMENTS.get(placement, placement)[0]], next(_ports), n)
    cli, srv = run_pair(placement, server_cmd, client_cmd, tmp_path)
    for text in expected:
        assert text in cli, cli
    return cli, srv


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("name", ["rdma_server", "rstream", "fi_pingpong", "ib_write_bw",
                                  "ib_send_lat"])
def test_each_program_connects_and_moves_its_data(name, placement, tmp_path):
    cli, srv = run_program(name, placement, tmp_path)
    if name == "rdma_server":
        assert "rdma_server: end 0" in srv, srv


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_ucmatose_four_connections_fifty_messages_each(placement, tmp_path):
    cli, srv = run_program("ucmatose", placement, tmp_path)
    assert "data transfers complete" in cli and "return status 0" in cli, cli
    assert "return status 0" in srv, srv


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_udaddy_resolves_the_peer_by_sidr_and_exchanges_datagrams(placement, tmp_path):
    # udaddy has no port option (its -p is the port space): it uses 7174.
    srv_ip = IP[PLACEMENTS[placement][0]]
    cli, srv = run_pair(placement, ["udaddy", "-c", 2, "-C", 20],
                        ["udaddy", "-s", srv_ip, "-c", 2, "-C", 20], tmp_path)
    assert "data transfers complete" in cli and "return status 0" in cli, cli
    assert "data transfers complete" in srv, srv


def test_fi_info_lists_the_vnic_as_a_verbs_msg_domain():
    r = ns(T1, JAKIRO_RUN, "--", "fi_info", "-p", "verbs", timeout=30, check=False,
           env=shim_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "domain: jakiro_t1\n" in r.stdout and "FI_EP_MSG" in r.stdout, r.stdout


def test_red_tenant_dialling_blues_address_reaches_reds_own_vnic(tmp_path):
    """Blue t1 listens on 198.19.1.1; red t4 dials 198.19.1.1, which in red's VPC is t3 (no
    listener): the REQ goes to t3's agent and comes back rejected; blue never hears of it."""
    def no_listener_rejects():
        return cm_counter("h1", "rejected_no_listener")

    before = no_listener_rejects()
    port = next(_ports)
    out = tmp_path / "blue.srv"
    with open(out, "w") as o:
        blue = subprocess.Popen(under_jakiro_run(T1, ["rping", "-s", "-a", IP[T1], "-p", port,
                                                      "-C", 5, "-v"]),
                                stdout=o, stderr=subprocess.STDOUT, env=shim_env(),
                                start_new_session=True)
    try:
        time.sleep(SERVER_LISTEN_S)
        red = subprocess.run(under_jakiro_run(T4, ["rping", "-c", "-a", IP[T1], "-p", port,
                                                   "-C", 5, "-V"]),
                             capture_output=True, text=True, timeout=30, env=shim_env())
        assert red.returncode != 0, red.stdout + red.stderr
        assert "RDMA_CM_EVENT_REJECTED, error 8" in red.stdout + red.stderr, red.stdout
        assert blue.poll() is None, "blue's listener should still be waiting"
    finally:
        stop(blue)
    assert "ping data" not in out.read_text()
    # Counted by red's t3 agent on h1 (jakiroctl qps: endpoints.rdma_cm).
    wait_until(lambda: no_listener_rejects() > before, 5, "the REJ to be counted")


def cm_counter(host, name):
    return json.loads(jakiroctl(host, "qps", "--json").stdout)["endpoints"]["rdma_cm"][name]


def engine_drop(host, reason):
    """The RoCE engine's drops of `reason` (jakiroctl qps: engine.drops)."""
    return json.loads(jakiroctl(host, "qps", "--json").stdout)["engine"]["drops"][reason]


# TCP and ICMP for everyone in blue; RDMA only where RDMA_OK is attached (as test_rdma_policy).
BASE = {"name": "base", "vpc": "blue",
        "ingress": [{"proto": "tcp", "ports": "1-65535", "from": "198.19.0.0/16"},
                    {"proto": "icmp", "from": "198.19.0.0/16"}]}
RDMA_OK = {"name": "rdma-ok", "vpc": "blue",
           "ingress": [{"proto": "rdma", "from": "198.19.1.0/24"}]}


@pytest.mark.parametrize("refusing", ["passive", "active"])
def test_security_groups_refuse_rdma_cm_connections_and_count_them(policy, refusing,  # noqa: F811
                                                                   tmp_path):
    """passive: t2 (the listener) has no `rdma` rule, so its agent answers t1's REQ with a REJ
    (reason 28, consumer defined) and its listener never hears of it. active: t1 has none, so
    its own agent rejects the connection the same way without a MAD on the wire. Both counted
    in jakiroctl qps (endpoints.rdma_cm.rejected_by_policy) on the refusing side's host."""
    groups = {"t1": ["base", "rdma-ok"], "t2": ["base"], "t5": ["default"]}
    if refusing == "active":
        groups = {"t1": ["base"], "t2": ["base", "rdma-ok"], "t5": ["default"]}
    host = "h2" if refusing == "passive" else "h1"
    policy([BASE, RDMA_OK], groups)
    before = cm_counter(host, "rejected_by_policy")
    port = next(_ports)
    out = tmp_path / "t2.srv"
    with open(out, "w") as o:
        srv = subprocess.Popen(under_jakiro_run(T2, ["rping", "-s", "-a", IP[T2], "-p", port,
                                                     "-C", 5, "-v"]),
                               stdout=o, stderr=subprocess.STDOUT, env=shim_env(),
                               start_new_session=True)
    try:
        time.sleep(SERVER_LISTEN_S)
        cli = subprocess.run(under_jakiro_run(T1, ["rping", "-c", "-a", IP[T2], "-p", port,
                                                   "-C", 5, "-V"]),
                             capture_output=True, text=True, timeout=30, env=shim_env())
        said = cli.stdout + cli.stderr
        assert cli.returncode != 0, said
        assert "RDMA_CM_EVENT_REJECTED, error 28" in said, said
        assert srv.poll() is None, "the listener should still be waiting"
    finally:
        stop(srv)
    assert "ping data" not in out.read_text()
    wait_until(lambda: cm_counter(host, "rejected_by_policy") > before, 5,
               "the refusal to be counted")


FORGED_CM = SRC / "tests" / "rdma" / "pyverbs_forged_cm.py"


def test_a_tenants_forged_cm_mads_never_reach_a_peers_qp1(tmp_path):
    """docs/threat-model.md: t1's own UD QP aims 20 well-formed CM REQs at QP1 of t2, where rping
    listens on their service ID: half name t1, half t5 (a hijack), half carry the GSI Q_Key
    0x80010000 in the work request. t1 cannot hold that Q_Key (INIT refuses it), the WR's is
    replaced by the QP's own, and t2's QP1 takes only the GSI Q_Key from a QP1: all 20 are
    gsi_forged drops on h2, its CM agent receives none and rping hears of none. Controls: the
    same bytes sent the same way reach t2's UD QP intact (pyverbs_forged_cm.py --receiver),
    and afterwards a real rping client connects to the same listener."""
    cm_port, tcp_port = next(_ports), next(_ports)
    forged_before = engine_drop("h2", "gsi_forged")
    mads_before = cm_counter("h2", "mads_received")
    out, recv_out = tmp_path / "rping.srv", tmp_path / "receiver.out"
    with open(out, "w") as o, open(recv_out, "w") as r:
        listener = subprocess.Popen(under_jakiro_run(T2, ["rping", "-s", "-a", IP[T2], "-p",
                                                          cm_port, "-C", 3, "-v"]),
                                    stdout=o, stderr=subprocess.STDOUT, env=shim_env(),
                                    start_new_session=True)
        receiver = subprocess.Popen(under_jakiro_run(T2, ["/usr/bin/python3", FORGED_CM,
                                                          "--receiver", "--port", tcp_port]),
                                    stdout=r, stderr=subprocess.STDOUT, env=shim_env(),
                                    start_new_session=True)
    try:
        time.sleep(SERVER_LISTEN_S)
        attack = subprocess.run(
            under_jakiro_run(T1, ["/usr/bin/python3", FORGED_CM, "--attack", IP[T2], "--port",
                                  tcp_port, "--cm-port", cm_port, "--as", IP[T5]]),
            capture_output=True, text=True, timeout=TIMEOUT_S, env=shim_env())
        said = attack.stdout + attack.stderr
        print(f"\n--- attacker\n{said}\n--- receiver\n{recv_out.read_text()}")
        assert attack.returncode == 0, said
        assert "INIT with the controlled Q_Key 0x80010000 is refused" in said, said
        assert "control: the receiver's QP" in said, said
        assert receiver.wait(timeout=20) == 0, recv_out.read_text()
        wait_until(lambda: engine_drop("h2", "gsi_forged") - forged_before >= 20, 5,
                   "h2 to count the 20 forged MADs")
        assert engine_drop("h2", "gsi_forged") - forged_before == 20
        assert cm_counter("h2", "mads_received") == mads_before, "a forged MAD reached the agent"
        assert listener.poll() is None and "connect" not in out.read_text().lower(), \
            out.read_text()

        # The listener was reachable all along, through QP1, by a real rdma_cm client.
        cli = subprocess.run(under_jakiro_run(T1, ["rping", "-c", "-a", IP[T2], "-p", cm_port,
                                                   "-C", 3, "-V", "-v"]),
                             capture_output=True, text=True, timeout=TIMEOUT_S, env=shim_env())
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert cli.stdout.count("ping data: rdma-ping-") == 3, cli.stdout
        assert listener.wait(timeout=20) == 0, out.read_text()
        assert cm_counter("h2", "mads_received") > mads_before
    finally:
        stop(listener)
        stop(receiver)


def test_multicast_join_fails_with_an_errno_not_a_hang():
    """The overlay carries no multicast: the group's address resolves, the join is refused
    with EOPNOTSUPP and mckey exits at once."""
    t0 = time.monotonic()
    r = ns(T1, JAKIRO_RUN, "--", "mckey", "-m", "239.1.1.1", "-b", IP[T1], timeout=30,
           check=False, env=shim_env())
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Operation not supported" in r.stdout + r.stderr, r.stdout + r.stderr
    assert time.monotonic() - t0 < 10


NFQUEUE_NUM = 9
# Which packets the impairment drops follows from the seed; another one (JAKIRO_IMPAIR_SEED)
# puts the losses elsewhere, to look for a sequence that breaks a program.
IMPAIR_SEED = os.environ.get("JAKIRO_IMPAIR_SEED", "13")


@contextlib.contextmanager
def lossy_fabric(tmp_path, loss_percent, report):
    """`loss_percent` of the frames bridged towards h2 dropped (report["ul-h2"]: counters)."""
    with impaired_fabric(tmp_path, report, {"ul-h2": (NFQUEUE_NUM, [])},
                         ["--loss", loss_percent], seed=IMPAIR_SEED):
        yield


def test_connections_survive_a_fabric_losing_a_fifth_of_the_packets(tmp_path):
    """20 % of everything towards h2 is lost, CM MADs included: REQ/REP/RTU/DREQ are
    retransmitted (every 268 ms, up to 15 times) and each of five connections still
    validates its data."""
    report = {}
    with lossy_fabric(tmp_path, 20, report):
        for _ in range(5):
            port = next(_ports)
            args = ["-a", IP[T2], "-p", port, "-C", 20, "-S", 1000, "-V", "-v"]
            cli, _ = run_pair("cross_host", ["rping", "-s", *args], ["rping", "-c", *args],
                              tmp_path)
            assert cli.count("ping data: rdma-ping-") == 20, cli[-2000:]
    print(f"\nimpairment: {report}")
    assert isinstance(report.get("ul-h2"), dict) and report["ul-h2"].get("dropped", 1) > 0, report


# rdma_server/rdma_client exchange one message (a handful of packets): too few to meet a loss
# reliably; the CM's retransmissions are pinned by the 20 % rping test above.
#
# perftest -R (ib_send_lat, ib_write_bw) has a race of its own: its control channel is a first
# rdma_cm connection on the same port; after the last handshake message the server waits for
# that SEND's completion, then listens again for the data connection, while the client, which
# has the message, connects at once. When the client's ACK of that SEND is lost, the server
# waits out the local ACK timeout (537 ms) and the client's REQ finds no listener: REJ, reason 8
# (invalid service ID), as a kernel IB CM answers too. perftest then retries with ids it has
# already destroyed and crashes in rdma_resolve_addr (SIGSEGV, librdmacm; gdb backtrace,
# 2026-12-02). Dropping 30 % of the RoCE ACKs towards the server reproduces it every few runs;
# it is what failed once in eight runs here. So perftest runs with its server on h1 and its
# client on h2: the losses still hit the CM (REP, RTU's answers, DREQ) and RC data in both
# QPs' directions (SENDs towards the client, and what go-back-N resends), but never the ACK
# that opens perftest's window. (The rdma_cm agent holds a REQ that finds no listener for 100
# ms before its REJ, which covers a retransmission after a short ACK timeout, not the kernel
# CM's 537 ms; the placement stays.)
LOSSY_PLACEMENT = {"ib_send_lat": (T1, T2), "ib_write_bw": (T1, T2)}
# The mirror of that race remains, and this placement cannot avoid it: when the server's ACK of
# the client's last handshake SEND is lost, the server, which has the message, tears its
# control QP down, and the client's retransmissions find no QP: "Bad wc status 12" (retries
# exceeded), "Failed to exchange data between server and clients" (rare; a real RNIC
# answers a destroyed QP with silence too). It happens before any measured message, so
# the run is made once more when perftest says exactly that.
PERFTEST_CONTROL_RACE = "Failed to exchange data between server and clients"


@pytest.mark.parametrize("name", [p for p in PROGRAMS if p != "rdma_server"])
def test_each_program_works_over_a_fabric_losing_some_packets(name, tmp_path):
    """3 % of everything towards h2 is lost: CM MADs are retransmitted, RC data too."""
    report = {}
    placement = LOSSY_PLACEMENT.get(name, "cross_host")
    with lossy_fabric(tmp_path, 3, report):
        try:
            run_program(name, placement, tmp_path, LOSSY_MESSAGES)
        except AssertionError as e:
            if name not in LOSSY_PLACEMENT or PERFTEST_CONTROL_RACE not in str(e):
                raise
            print(f"\nperftest lost its control-exchange race; once more. It said:\n{e}")
            run_program(name, placement, tmp_path, LOSSY_MESSAGES)
    print(f"\nimpairment: {report}")
    assert isinstance(report.get("ul-h2"), dict) and report["ul-h2"].get("dropped", 0) > 0, report


def test_udaddy_connects_by_sidr_over_a_fabric_losing_some_packets(tmp_path):
    """3 % of what goes towards h2, where the udaddy server runs, is lost: a lost SIDR_REQ is
    resent after 268 ms (up to 15 times) until the SIDR_REP comes. 16 connections, so a loss is
    likely in a run (1 - 0.97^16 = 39 %). A lost SIDR_REP (SIDR has no acknowledgement) is
    answered again when the SIDR_REQ is retransmitted: pinned by the unit test
    CmAgentTest.LostSidrRepIsSentAgainWhenTheSidrReqIsRetransmitted, not here, because udaddy's
    server exits as soon as it has accepted every connection, on any fabric.
    No data messages (-C 0): udaddy polls its CQ without a timeout for exactly -C completions,
    so one lost datagram (UD is unreliable) hangs it by design; with -C 0 it asserts that every
    connection resolved ("return status 0", no UNREACHABLE/REJECTED event)."""
    report = {}
    with lossy_fabric(tmp_path, 3, report):
        cli, srv = run_pair("cross_host", ["udaddy", "-c", 16, "-C", 0],
                            ["udaddy", "-s", IP[T2], "-c", 16, "-C", 0], tmp_path)
    print(f"\nimpairment: {report}")
    assert "return status 0" in cli and "return status 0" in srv, cli + srv
    assert "event:" not in cli, cli
    assert isinstance(report.get("ul-h2"), dict), report


def test_cm_messages_are_ib_cm_mads_tshark_decodes(tmp_path):
    """On the fabric: VXLAN → RoCEv2 UD SEND to QP1 → a MAD of the CM class (0x07) carrying
    REQ, REP, RTU, DREQ and DREP, as a kernel rdma_cm peer sends and expects them."""
    pcap = tmp_path / "cm.pcap"
    err = tmp_path / "tshark.err"
    # The kernel cuts what the uplinks send, as a NIC without offloads would: tshark decodes
    # every frame, not only the first of a UDP GSO datagram.
    with uplinks_cut_by_the_kernel():
        with open(err, "w") as e:
            cap = subprocess.Popen(["ip", "netns", "exec", FABRIC_NS, "tshark", "-n", "-i",
                                    "br0", "-f", "udp port 4789", "-w", str(pcap)],
                                   stdout=subprocess.DEVNULL, stderr=e, start_new_session=True)
        try:
            wait_until(lambda: "Capturing on" in err.read_text(), 10, "tshark to start")
            port = next(_ports)
            args = ["-a", IP[T2], "-p", port, "-C", 3, "-V"]
            run_pair("cross_host", ["rping", "-s", *args], ["rping", "-c", *args], tmp_path)
            time.sleep(0.5)
        finally:
            os.killpg(cap.pid, signal.SIGINT)
            wait_until(lambda: cap.poll() is not None, 10, "tshark to finish")
    r = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", "infiniband.mad.mgmtclass == 7",
                        "-T", "fields", "-e", "infiniband.bth.destqp", "-e",
                        "infiniband.deth.q_key", "-e", "infiniband.mad.attributeid"],
                       capture_output=True, text=True, timeout=60)
    rows = [line.split("\t") for line in r.stdout.splitlines() if line.strip()]
    assert rows, f"no CM MADs decoded: {r.stderr}"
    attributes = {int(row[2], 0) for row in rows}
    assert {0x10, 0x13, 0x14, 0x15, 0x16} <= attributes, rows  # REQ REP RTU DREQ DREP
    for row in rows:
        assert int(row[0], 0) == 1, row  # to QP1
        assert int(row[1], 0) == 0x80010000, row  # the GSI Q_Key
