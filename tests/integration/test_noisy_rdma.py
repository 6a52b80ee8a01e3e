"""Noisy neighbours on the RDMA face: one tenant's QPs cannot take the worker from another's.

The neighbour is red t3, on the same host and worker as blue t1 (the test bed runs one
worker per host). It runs tests/hostile/silent_wqe_flood: hundreds of QPs whose send queues
stay full of memory-window binds and invalidations, work that retires at once and never
reaches the wire. The worker spends at most the vNIC's units per poll on it (rnic/engine.hh);
and at most its local-work allowance per second (rdma.max_local_work_rate) on WRs that send
nothing. The operator sees the neighbour meet both bounds in `jakiroctl qps`, `stats --json`
and /metrics, and the victim's RDMA keeps moving every byte correctly meanwhile.

A neighbour that only holds its quota of QPs, connected and idle, costs the worker's polls
nothing: idle QPs are parked until rung (rnic/engine.hh "Visits"), and `stats --json` shows
its vNIC's QP visits standing still while the victim's grow.
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (JAKIROD, T3, host_config_with, jakiroctl, ns, shim_env, stats, stop,
                      wait_until)
from test_rdma_rc import JAKIRO_RUN, run_integrity

pytestmark = pytest.mark.usefixtures("testbed")

FLOOD = os.environ.get("JAKIRO_SILENT_WQE_FLOOD") or str(
    Path(JAKIROD).resolve().parents[1] / "tests" / "hostile" / "silent_wqe_flood")
FLOOD_QPS = 256
METRICS_URL = "http://127.0.0.1:9417/metrics"  # every test-bed host's, in its namespace


def units_of(vnic, host="h1"):
    """(units spent, visits cut at the bound), summed over `vnic`'s live QPs."""
    rows = json.loads(jakiroctl(host, "qps", "--json").stdout)["qps"]
    mine = [r for r in rows if r["vnic"] == vnic]
    return (sum(r["work_units"] for r in mine), sum(r["out_of_units"] for r in mine), len(mine))


def metric(text, name, vnic):
    m = re.search(rf'^{name}{{vnic="{vnic}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def test_a_neighbour_flooding_silent_work_meets_its_bound_and_the_victims_rdma_completes(
        tmp_path):
    out = tmp_path / "flood.out"
    with open(out, "w") as f:
        flood = subprocess.Popen(
            ["ip", "netns", "exec", T3, str(JAKIRO_RUN), "--", FLOOD, "--qps", str(FLOOD_QPS),
             "--depth", "64", "--seconds", "120"],
            stdout=f, stderr=subprocess.STDOUT, env=shim_env(), start_new_session=True)
    try:
        wait_until(lambda: flood.poll() is not None or units_of("t3")[1] > 0, 60,
                   "the neighbour's QPs to meet their vNIC's bound")
        assert flood.poll() is None, out.read_text()
        spent, cut, qps = units_of("t3")
        assert qps == FLOOD_QPS, f"{qps} of the neighbour's QPs are there"

        # The victim, while the flood goes on: every byte of every op verified both ways.
        run_integrity("cross_host", tmp_path, 300, 7)
        run_integrity("intra_host", tmp_path, 300, 8)

        assert flood.poll() is None, "the flood ran through the victim's runs"
        spent_after, cut_after, _ = units_of("t3")
        assert spent_after > spent and cut_after > cut, "the neighbour kept working, bounded"
        # The same counters per vNIC in /metrics.
        text = ns("jk-h1", "curl", "-sf", "--max-time", "5", METRICS_URL).stdout
        assert metric(text, "jakiro_rdma_work_units_total", "t3") >= spent_after
        assert metric(text, "jakiro_rdma_out_of_units_total", "t3") >= cut_after
        # Its binds outrun the default allowance: it sat polls out, the victim never did.
        vnics = stats("h1")["vnics"]
        assert vnics["t3"]["rdma_max_local_work_rate"] == 100000
        assert vnics["t3"]["rdma_local_work_over_allowance"] > 0, vnics["t3"]
        assert vnics["t1"]["rdma_local_work_over_allowance"] == 0, vnics["t1"]
        assert metric(text, "jakiro_vnic_rdma_local_work_over_allowance_total", "t3") > 0
        # The allowance is the operator's to change, live.
        jakiroctl("h1", "apply", host_config_with(tmp_path, "t3",
                                                  "rdma: {max_local_work_rate: 2000}"))
        wait_until(lambda: stats("h1")["vnics"]["t3"]["rdma_max_local_work_rate"] == 2000, 10,
                   "the new allowance in the datapath")
    finally:
        jakiroctl("h1", "apply", "/run/jakiro/testbed/h1.yaml")  # the test bed's own again
        try:
            os.killpg(flood.pid, signal.SIGINT)
            flood.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            stop(flood)
    report = out.read_text()
    # The control: the neighbour's own work was done, only bounded.
    m = re.search(r"posted (\d+) wqes", report)
    assert m and int(m.group(1)) > FLOOD_QPS * 64, report


def visits_of(vnic, host="h1"):
    """The worker's visits to `vnic`'s QPs (`stats --json`)."""
    return stats(host)["vnics"][vnic]["rdma_qp_visits"]


def test_a_neighbour_holding_its_quota_of_idle_qps_costs_the_worker_no_visits(tmp_path):
    """Idle QPs are parked: the neighbour's 1024 connected, idle QPs are not looked at by the
    worker's polls while the victim's RDMA runs (the control: the victim's QPs are visited)."""
    out = tmp_path / "idle.out"
    with open(out, "w") as f:
        idle = subprocess.Popen(
            ["ip", "netns", "exec", T3, str(JAKIRO_RUN), "--", FLOOD, "--qps", "1024",
             "--depth", "2", "--idle", "1", "--seconds", "120"],
            stdout=f, stderr=subprocess.STDOUT, env=shim_env(), start_new_session=True)
    try:
        wait_until(lambda: idle.poll() is not None or "holding" in out.read_text(), 60,
                   "the neighbour to hold its QPs")
        assert idle.poll() is None, out.read_text()
        assert units_of("t3")[2] == 1024, "the neighbour holds its whole quota"

        def parked():
            seen = visits_of("t3")
            time.sleep(0.3)
            return visits_of("t3") == seen

        # Its QPs were visited while they were being set up, then parked.
        wait_until(parked, 20, "the QPs to park")
        before = visits_of("t3")
        victim_before = visits_of("t1")

        run_integrity("cross_host", tmp_path, 300, 9)
        run_integrity("intra_host", tmp_path, 300, 10)

        assert idle.poll() is None, "the neighbour held its QPs through the victim's runs"
        assert visits_of("t3") == before, "idle QPs cost the worker's polls nothing"
        assert visits_of("t1") > victim_before, "the victim's QPs were visited"
        text = ns("jk-h1", "curl", "-sf", "--max-time", "5", METRICS_URL).stdout
        assert metric(text, "jakiro_vnic_rdma_qp_visits_total", "t3") == before
        assert metric(text, "jakiro_vnic_rdma_poller_wakes_total", "t3") is not None
    finally:
        try:
            os.killpg(idle.pid, signal.SIGINT)
            idle.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            stop(idle)
