"""perf/qos_plot's shares: measured while both senders run, the start-up reported apart.
The samples are built here, as jakiroctl's per-class counters would read; no root."""
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

import pytest

SRC = Path(os.environ.get("JAKIRO_SRC") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(SRC / "perf"))
loader = importlib.machinery.SourceFileLoader("qos_plot", str(SRC / "perf" / "qos_plot"))
qos_plot = importlib.util.module_from_spec(importlib.util.spec_from_loader("qos_plot", loader))
loader.exec_module(qos_plot)

MB = 1_000_000


def samples(rdma_starts, switch, rdma_ends, end, per_interval=4 * MB):
    """Samples every 0.5 s of a link that carries per_interval bytes each interval: TCP alone
    until RDMA sends (ib_write_bw's start-up), 3:1 until the switch, 1:1 until RDMA ends,
    then TCP alone. Every grant finds a sending class backlogged."""
    out, rdma, tcp, t = [], 0, 0, 0.0
    grants = {"rdma": [0, 0], "tcp": [0, 0]}

    def counters():
        return {c: (b, grants[c][0], grants[c][1]) for c, b in (("rdma", rdma), ("tcp", tcp))}

    out.append((0.0, counters(), True))
    while t < end:
        t += 0.5
        both = rdma_starts < t <= rdma_ends
        share = (0.75 if t <= switch else 0.5) if both else 0.0
        rdma += int(per_interval * share)
        tcp += per_interval - int(per_interval * share)
        for c, sending in (("rdma", both), ("tcp", True)):
            grants[c][0] += 100
            grants[c][1] += 100 if sending else 0
        out.append((t, counters(), t <= rdma_ends))
    return out


def index_at(s, t):
    return next(i for i, x in enumerate(s) if x[0] >= t)


def test_the_3_to_1_share_excludes_ib_write_bws_start_up_and_reports_it_apart():
    s = samples(rdma_starts=2.0, switch=8.0, rdma_ends=16.0, end=24.0)
    r = qos_plot.measure_shares(s, index_at(s, 8.0))
    assert r["3:1"]["ratio"] == pytest.approx(3.0)
    assert r["3:1"]["window"] == (2.5, 8.0)
    assert r["startup"] == 2.5
    # Over the whole phase, the start-up's TCP-only seconds pull RDMA's share down: the
    # figure a window from the phase's start would give.
    assert r["3:1 with start-up"] < 2.0
    assert r["3:1"]["backlog"] == {"rdma": 1.0, "tcp": 1.0}


def test_the_1_to_1_share_ends_with_the_last_sample_while_ib_write_bw_ran():
    s = samples(rdma_starts=1.0, switch=8.0, rdma_ends=16.0, end=24.0)
    r = qos_plot.measure_shares(s, index_at(s, 8.0))
    assert r["1:1"]["ratio"] == pytest.approx(1.0)
    assert r["1:1"]["window"] == (10.0, 16.0)
    assert r["1:1"]["backlog"]["rdma"] == 1.0


def test_rdma_that_never_sent_is_a_failure_not_a_ratio_of_zero():
    s = samples(rdma_starts=99.0, switch=8.0, rdma_ends=99.0, end=24.0)
    with pytest.raises(qos_plot.ProgramFailed, match="never both sent"):
        qos_plot.measure_shares(s, index_at(s, 8.0))


def test_ib_write_bw_that_ended_before_the_1_to_1_phase_settled_is_a_failure():
    s = samples(rdma_starts=1.0, switch=8.0, rdma_ends=9.0, end=24.0)
    with pytest.raises(qos_plot.ProgramFailed, match="before the 1:1 phase settled"):
        qos_plot.measure_shares(s, index_at(s, 8.0))
