"""DHTB egress in the test bed: t1's vNIC shaped to a rate with RDMA:TCP = 3:1, iperf3 (TCP) and
ib_write_bw (RDMA, unmodified, through jakiro-run) from t1 to t2 at the same time. The shares
follow the weights and add up to the rate; `jakiroctl apply` to 1:1 takes effect within 2 s
without breaking either connection; RDMA alone gets the whole rate (work conservation).

The rate is JAKIRO_QOS_RATE_MBIT (default 500), not the 5 Gbit/s it is meant for: on this 2-core
machine the af_packet overlay carries about 2 Gbit/s of TCP in total (perf/overlay_throughput),
and six busy processes (two jakirods, iperf3's two ends, two perftest halves) share the two
cores, so a rate must stay well below that to be binding whatever else the machine is doing.
On a machine that carries more, JAKIRO_QOS_RATE_MBIT=5000 runs the full-rate check.
Shares are read from jakiroctl qos (the scheduler's own byte counters, the
charged bytes: inner frame + 50 bytes of VXLAN) and cross-checked against iperf3's own report.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (IP, JAKIROD, RUN_DIR, SRC, T1, T2, cpu_seconds, global_counter,
                      host_config_with, jakirod_pids, jakiroctl, ns, ns_bg, quiet_machine, run,
                      stop, wait_listening)

pytestmark = pytest.mark.usefixtures("testbed")


@pytest.fixture(scope="module", autouse=True)
def quiet_for_the_module():
    """CI's background compiles wait while this module runs (about 80 s), so that the shares
    are measured on a box as quiet as CI can make it. (Under load, 3:1 holds only while the
    DCQCN pacer holds at least the scheduler's burst: qos/rate_control.hh.)"""
    with quiet_machine():
        yield


JAKIRO_RUN = SRC / "tools" / "jakiro-run"
TESTBED = SRC / "tools" / "testbed"
# A third blue tenant on h2 for the incast (built live with `testbed add-tenant`).
T7, T7_IP, T7_MAC = "jk-h2-t7", "198.19.1.7", "02:00:c6:13:01:07"
RATE = int(os.environ.get("JAKIRO_QOS_RATE_MBIT", "500")) * 1_000_000
SAMPLE_S = 4


def shim_env():
    env = dict(os.environ)
    lib = Path(JAKIROD).resolve().parents[1] / "verbs_shim" / "libjakiro_verbs.so"
    if lib.exists():
        env["JAKIRO_VERBS_LIB"] = str(lib)
    return env


def shaped_config(tmp_path, rdma_weight, tcp_weight, rate=None):
    """h1's test-bed YAML with t1 shaped (to RATE unless `rate`); written next to the test's
    other files."""
    rate = RATE if rate is None else rate
    return host_config_with(tmp_path, "t1", f"qos: {{rate: {rate // 1_000_000}Mbit, "
                            f"rdma: {{weight: {rdma_weight}}}, tcp: {{weight: {tcp_weight}}}}}")


def class_counters():
    """{class: counters} of t1 from jakiroctl qos, and the time jakirod read them (its own
    monotonic clock, in seconds): on a busy box jakiroctl itself may take a good part of a
    second to start and answer, and the test's clock would count that as time the counters
    had to move in."""
    out = json.loads(jakiroctl("h1", "qos", "--json").stdout)
    t1 = next(v for v in out if v["vnic"] == "t1")
    return t1["time_ns"] / 1e9, {c["class"]: c for c in t1["classes"]}


def rates(seconds, counter="sent_bytes"):
    """Bit/s per class of `counter` (sent_bytes: egress, received_bytes: ingress)."""
    return sample(seconds, counter)[0]


def sample(seconds, counter="sent_bytes"):
    """Bit/s per class of `counter`, and per class the fraction of the scheduler's grants in the
    sample that found that class with something to send (1.0: backlogged throughout)."""
    # Within quiet_for_the_module already; kept so that a sample is quiet wherever it is used.
    with quiet_machine():
        t0, c0 = class_counters()
        time.sleep(seconds)
        t1, c1 = class_counters()
    rate = {c: (c1[c][counter] - c0[c][counter]) * 8 / (t1 - t0) for c in c1}
    busy = {}
    for c in c1:
        grants = c1[c]["grants"] - c0[c]["grants"]
        busy[c] = (c1[c]["busy_grants"] - c0[c]["busy_grants"]) / grants if grants else 0.0
    return rate, busy


# A class must have had something queued at this fraction of the grants for its share to be
# judged. Measured in 4 runs recorded at 7c6f21f (3 from fresh clones, 1 from the build tree):
# both classes 100.0 % with cubic; tcp 99.1-99.7 % with the default BBR at 1:1.
BACKLOGGED = 0.95


# A loss-based congestion control for the TCP class, set per socket by iperf3 (TCP_CONGESTION):
# a namespace other than the first may only pick from tcp_allowed_congestion_control (reno
# and bbr here), which is the host's and not the test's to change.
LOSS_BASED = ("-C", "cubic")


def assert_shares(rate, busy, rdma_weight, tcp_weight, label):
    """Both classes backlogged, then the shares follow the weights and fill the rate; a failure
    says which class fell short and whether it had anything to send."""
    summary = (f"{label}: rdma {rate['rdma'] / 1e6:.1f} Mbit/s (queue busy at "
               f"{busy['rdma']:.1%} of grants), tcp {rate['tcp'] / 1e6:.1f} Mbit/s (busy "
               f"{busy['tcp']:.1%})")
    print(summary)
    for c in ("rdma", "tcp"):
        assert busy[c] >= BACKLOGGED, f"{c} was not backlogged (the sender fell short): {summary}"
    want = rdma_weight / tcp_weight
    # Same 4 runs: 3:1 gave 3.000-3.001 and 1:1 gave 1.000; the two classes together used
    # 95.1-98.5 % of the rate (the 10 % bands). In one run made while three other compiles kept
    # the 2 cores busy (five times oversubscribed) the next test's classes used 89.8 %: then the
    # box, not DHTB, falls short.
    assert rate["rdma"] / rate["tcp"] == pytest.approx(want, rel=0.10), summary
    assert rate["rdma"] + rate["tcp"] == pytest.approx(RATE, rel=0.10), summary


def start_write_bw(duration):
    """ib_write_bw server on t2 and client on t1 for `duration` seconds (perftest's -D)."""
    args = ["ib_write_bw", "-x", "0", "-F", "-s", "65536", "-p", "18600", "-D", str(duration)]
    server = subprocess.Popen(["ip", "netns", "exec", T2, str(JAKIRO_RUN), "--", *args],
                              env=shim_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    wait_listening(T2, 18600, timeout=15)
    client = subprocess.Popen(["ip", "netns", "exec", T1, str(JAKIRO_RUN), "--", *args, IP[T2]],
                              env=shim_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    return server, client


def finish(p, timeout):
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, out


@pytest.fixture
def shaped(tmp_path):
    jakiroctl("h1", "apply", str(shaped_config(tmp_path, 3, 1)))
    yield tmp_path
    # Back to the unshaped test bed for the tests that follow.
    jakiroctl("h1", "apply", str(RUN_DIR / "h1.yaml"))


def test_rdma_and_tcp_share_the_vnic_rate_by_weight_and_follow_a_live_change(shaped):
    """DHTB's promise is for backlogged classes: TCP runs cubic (loss-based, it keeps its queue
    filled; the namespaces' default BBR drains it every few RTTs: see the next test)."""
    with ns_bg(T2, "iperf3", "-s", "-p", "5301", "-1"):
        wait_listening(T2, 5301)
        iperf = subprocess.Popen(["ip", "netns", "exec", T1, "iperf3", "-c", IP[T2], "-p", "5301",
                                  "-t", "30", "-J", *LOSS_BASED], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
        # Both samples must end before ib_write_bw does: 3 + 4 + 2 + 4 s of sleeping and
        # sampling, plus four jakiroctl calls and an apply, which take seconds on a busy box,
        # plus perftest's own connection setup. With 14 s the 1:1 sample could outlast RDMA
        # there and find its class "not backlogged".
        server, client = start_write_bw(20)
        try:
            time.sleep(3)  # both classes backlogged, TCP's window opened
            assert_shares(*sample(SAMPLE_S), 3, 1, "3:1")

            jakiroctl("h1", "apply", str(shaped_config(shaped, 1, 1)))
            time.sleep(2)  # the bound for shares to follow
            assert_shares(*sample(SAMPLE_S), 1, 1, "1:1")

            code, out = finish(client, 60)
            assert code == 0, f"ib_write_bw broke: {out[-800:]}"
            code, out = finish(server, 30)
            assert code == 0, f"ib_write_bw server: {out[-800:]}"

            # RDMA gone: TCP alone has the whole rate.
            time.sleep(1)
            r = rates(3)
            print(f"tcp alone -> {r['tcp'] / 1e6:.1f} Mbit/s")
            assert r["tcp"] >= 0.9 * RATE  # 99.5-99.6 % in CI runs recorded at 7c6f21f
            out, err = iperf.communicate(timeout=60)
            assert iperf.returncode == 0, f"iperf3 broke: {err[-500:]}"
            received = json.loads(out)["end"]["sum_received"]["bits_per_second"]
            # Payload over the whole run never beats the rate (charged bytes include headers).
            assert received < RATE
        finally:
            for p in (client, server, iperf):
                stop(p)


def test_with_the_default_congestion_control_tcp_left_short_is_tcp_not_backlogged(shaped):
    """What a tenant sees with the namespace's default TCP (BBR here): BBR paces below its share
    and drains its queue every few RTTs, and work conservation rightly hands the unused share to
    RDMA. So at 1:1 TCP may get less than half, but only while its queue was empty: RDMA never
    gets less than its share, TCP never more, the rate is filled, and a TCP shortfall comes with
    a TCP queue that was not busy throughout."""
    default = ns(T1, "sysctl", "-n", "net.ipv4.tcp_congestion_control").stdout.strip()
    jakiroctl("h1", "apply", str(shaped_config(shaped, 1, 1)))
    with ns_bg(T2, "iperf3", "-s", "-p", "5304", "-1"):
        wait_listening(T2, 5304)
        iperf = subprocess.Popen(["ip", "netns", "exec", T1, "iperf3", "-c", IP[T2], "-p", "5304",
                                  "-t", "12"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        server, client = start_write_bw(10)
        try:
            time.sleep(3)
            rate, busy = sample(SAMPLE_S)
            summary = (f"default cc {default}, 1:1: rdma {rate['rdma'] / 1e6:.1f} Mbit/s (busy "
                       f"{busy['rdma']:.1%}), tcp {rate['tcp'] / 1e6:.1f} Mbit/s (busy "
                       f"{busy['tcp']:.1%})")
            print(summary)
            half = RATE / 2
            # 4 runs recorded at 7c6f21f: 96.1-98.3 % of the rate used, tcp 95.6-98.0 % of half.
            assert rate["rdma"] + rate["tcp"] == pytest.approx(RATE, rel=0.10), summary
            assert rate["rdma"] >= 0.9 * half, summary
            assert rate["tcp"] <= 1.1 * half, summary
            # Short of half of what the vNIC sent is allowed only with a queue that ran dry.
            # Half of what was sent, not of the rate: a run on the vnet uplink with a compile
            # beside it sent 92 % of the rate, rdma 245 and tcp 215 Mbit/s with tcp backlogged;
            # the box fell short there, and tcp's 47 % of what was sent was DHTB's fair split.
            sent = rate["rdma"] + rate["tcp"]
            if rate["tcp"] < 0.9 * sent / 2:
                assert busy["tcp"] < BACKLOGGED, "tcp short while backlogged: " + summary
            code, out = finish(client, 60)
            assert code == 0, f"ib_write_bw broke: {out[-800:]}"
            out, err = iperf.communicate(timeout=60)
            assert iperf.returncode == 0, f"iperf3 broke: {err[-500:]}"
        finally:
            for p in (client, server, iperf):
                stop(p)


def test_rdma_alone_gets_at_least_90_percent_of_the_vnic_rate(shaped):
    server, client = start_write_bw(8)
    try:
        time.sleep(2)
        r = rates(SAMPLE_S)
        print(f"rdma alone -> {r['rdma'] / 1e6:.1f} Mbit/s")
        # 98.5-99.0 % in CI runs recorded at 7c6f21f; 70 % oversubscribed (see assert_shares).
        assert r["rdma"] >= 0.9 * RATE
        assert r["rdma"] <= 1.1 * RATE
        code, out = finish(client, 60)
        assert code == 0, out[-800:]
        # perftest's own figure (payload MB/s) sits below the charged rate, never above it.
        m = re.search(r"^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)", out, re.M)
        assert m, out[-500:]
        assert float(m.group(1)) * 8e6 < RATE * 1.05
    finally:
        stop(client)
        stop(server)


def test_jakiroctl_top_shows_rates_and_shares(shaped):
    out = jakiroctl("h1", "top", "--interval", "0.5", "--count", "2", timeout=20).stdout
    assert "t1" in out and "rdma" in out and "tcp" in out
    # The configured shares of the rate at 3:1.
    assert f"{RATE * 0.75 / 1e6:.1f}" in out and f"{RATE * 0.25 / 1e6:.1f}" in out, out


def test_incast_into_a_limited_vnic_is_held_to_its_rate_by_cnps_and_ce_marks(shaped, tmp_path):
    """t2 (RDMA) and t7 (TCP with ECN), both on h2 and unshaped there, send to t1, whose vNIC
    is limited to RATE on h1: h1 meters t1's ingress and signals the senders (CNPs to
    t2's QP, CE marks on t7's segments); t1 receives at its rate."""
    run(TESTBED, "add-tenant", "t7", "--host", "2", "--vpc", "blue", "--ip", T7_IP,
        "--mac", T7_MAC)
    h2 = (RUN_DIR / "h2.yaml").read_text().splitlines()
    t2_line = next(line for line in h2 if line.strip().startswith("- {name: t2,"))
    t7_line = (t2_line.replace("t2", "t7").replace("198.19.1.2/", T7_IP + "/")
               .replace("02:00:c6:13:01:02", T7_MAC)
               .replace("net_af_packet1,", "net_af_packet9,")
               .replace("2001:2::1:2/", "2001:2::1:7/"))  # an IPv6 address of its own
    h2.insert(h2.index(t2_line) + 1, t7_line)
    (tmp_path / "h2.yaml").write_text("\n".join(h2) + "\n")
    jakiroctl("h2", "apply", str(tmp_path / "h2.yaml"))
    h1 = shaped_config(shaped, 3, 1).read_text().rstrip("\n") + (
        f"\n  - {{vpc: blue, ip: {T7_IP}, host: 198.18.0.2, security_groups: [default]}}\n")
    (tmp_path / "h1.yaml").write_text(h1)
    jakiroctl("h1", "apply", str(tmp_path / "h1.yaml"))
    ns(T7, "sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1")

    with ns_bg(T1, "iperf3", "-s", "-p", "5302", "-1"):
        wait_listening(T1, 5302)
        args = ["ib_write_bw", "-x", "0", "-F", "-s", "65536", "-p", "18601", "-D", "10"]
        server = subprocess.Popen(["ip", "netns", "exec", T1, str(JAKIRO_RUN), "--", *args],
                                  env=shim_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        wait_listening(T1, 18601, timeout=15)
        rdma = subprocess.Popen(["ip", "netns", "exec", T2, str(JAKIRO_RUN), "--", *args, IP[T1]],
                                env=shim_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        tcp = subprocess.Popen(["ip", "netns", "exec", T7, "iperf3", "-c", IP[T1], "-p", "5302",
                                "-t", "12"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
        try:
            time.sleep(3)
            _, before = class_counters()
            r = rates(SAMPLE_S, "received_bytes")
            _, after = class_counters()
            total = r["rdma"] + r["tcp"]
            print(f"incast into t1: rdma {r['rdma'] / 1e6:.1f}, tcp {r['tcp'] / 1e6:.1f}, "
                  f"total {total / 1e6:.1f} Mbit/s of {RATE / 1e6:.0f}")
            # 98-99.5 % of the rate in CI runs recorded at 7c6f21f on the 2-core machine.
            assert total <= RATE * 1.10, "t1 received more than its rate"
            assert total >= RATE * 0.90, "t1's rate was not used"
            assert after["rdma"]["cnps"] > before["rdma"]["cnps"], "no CNP was sent"
            assert after["tcp"]["ce_marked"] > before["tcp"]["ce_marked"], "no CE mark"
            code, out = finish(rdma, 60)
            assert code == 0, out[-800:]
            out, err = tcp.communicate(timeout=60)
            assert tcp.returncode == 0, err[-500:]
        finally:
            for p in (rdma, tcp, server):
                stop(p)
            jakiroctl("h2", "apply", str(RUN_DIR / "h2.yaml"))
            run("ip", "netns", "del", T7, check=False)


def test_a_vnic_held_to_a_low_rate_does_not_make_its_worker_spin(shaped):
    """TCP backlogged behind a 20 Mbit/s vNIC: frames wait for tokens most of the time, and the
    worker naps until they are due (throttled_sleeps) instead of polling a queue it may not
    send from. A worker that spins while throttled shows ~100 % of a core."""
    jakiroctl("h1", "apply", str(shaped_config(shaped, 3, 1, rate=20_000_000)))
    pid = jakirod_pids()["h1"]
    with ns_bg(T2, "iperf3", "-s", "-p", "5303", "-1"):
        wait_listening(T2, 5303)
        iperf = subprocess.Popen(["ip", "netns", "exec", T1, "iperf3", "-c", IP[T2], "-p", "5303",
                                  "-t", "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        try:
            time.sleep(2)
            naps0 = global_counter("h1", "throttled_sleeps")
            with quiet_machine():
                t0, c0 = time.monotonic(), cpu_seconds(pid)
                r = rates(4)
                percent = 100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
            naps = global_counter("h1", "throttled_sleeps") - naps0
            print(f"20 Mbit/s: tcp {r['tcp'] / 1e6:.1f} Mbit/s, h1 jakirod {percent:.0f} % of a "
                  f"core, {naps} throttled naps")
            # CI runs recorded at 7c6f21f: 20.0 Mbit/s, 5-13 % of a core; the same worker spinning
            # shows ~100 %.
            assert r["tcp"] == pytest.approx(20e6, rel=0.10), "the vNIC was not held to 20 Mbit/s"
            assert naps > 0
            assert percent < 40
            out, err = iperf.communicate(timeout=60)
            assert iperf.returncode == 0, err[-500:]
        finally:
            stop(iperf)
