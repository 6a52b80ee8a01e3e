"""perf/restart's RDMA gap: an RDMA ping-pong's per-exchange times laid end to end back from
the client's exit, the longest round trip around each restart. Built here; no root."""
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

import pytest

SRC = Path(os.environ.get("JAKIRO_SRC") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(SRC / "perf"))
loader = importlib.machinery.SourceFileLoader("restart", str(SRC / "perf" / "restart"))
restart = importlib.util.module_from_spec(importlib.util.spec_from_loader("restart", loader))
loader.exec_module(restart)

ProgramFailed = restart.ProgramFailed


def pingpong(stalls, seconds=10.0, one_way_us=50.0, ended=1000.0):
    """Exchanges of one_way_us each for `seconds`, with a stall of ms at each time in
    `stalls` (seconds after the start); returns (samples, when the client exited)."""
    samples, t = [], ended - seconds
    pending = sorted(stalls.items())
    while t < ended:
        us = one_way_us
        if pending and t - (ended - seconds) >= pending[0][0]:
            us = pending.pop(0)[1] * 1000 / 2
        samples.append(us)
        t += 2 * us / 1e6
    return samples, t


def test_each_restart_gets_the_stall_that_happened_inside_its_window():
    samples, ended = pingpong({3.0: 80, 7.0: 45})
    start = ended - 10.0
    windows = [(start + 2.8, start + 3.5), (start + 6.8, start + 7.5)]
    gaps = restart.rdma_gaps(samples, ended, windows)
    assert gaps == pytest.approx([80, 45], rel=0.01)


def test_a_restart_without_a_stall_gets_an_ordinary_round_trip():
    samples, ended = pingpong({3.0: 80})
    start = ended - 10.0
    gaps = restart.rdma_gaps(samples, ended, [(start + 2.8, start + 3.5),
                                              (start + 6.8, start + 7.5)])
    assert gaps[0] == pytest.approx(80, rel=0.01)
    assert gaps[1] == pytest.approx(0.1, rel=0.01)  # 2 x 50 µs


def test_a_ping_pong_that_began_after_the_first_restart_fails_the_run():
    samples, ended = pingpong({}, seconds=2.0)
    with pytest.raises(ProgramFailed, match="started after the first restart"):
        restart.rdma_gaps(samples, ended, [(ended - 5.0, ended - 4.5)])


def test_perftests_unsorted_report_is_read_in_order():
    text = ("#, usec\n1, 883.288\n2, 207.8\n3, 59\n"
            "-----\n #bytes #iterations    t_min[usec]\n 64      3000   17.25\n")
    assert restart.pingpong_samples(text) == [883.288, 207.8, 59.0]
    with pytest.raises(ProgramFailed):
        restart.pingpong_samples("Couldn't connect to 198.19.1.2:18533\n")
