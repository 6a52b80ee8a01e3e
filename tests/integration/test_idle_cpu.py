"""An idle jakirod sleeps instead of spinning: under 5 % of one core with no traffic."""

import time

import pytest

from conftest import alive, cpu_seconds, jakirod_pids

pytestmark = pytest.mark.usefixtures("testbed")

IDLE_S = 5
LIMIT_PERCENT = 5  # a poll-mode loop that never sleeps shows ~100 %


def test_idle_jakirod_uses_under_5_percent_of_a_core():
    pids = jakirod_pids()
    assert pids, "the test bed started no jakirod"
    time.sleep(1)  # let start-up work (ARP, first polls) settle
    before = {h: cpu_seconds(p) for h, p in pids.items()}
    t0 = time.monotonic()
    time.sleep(IDLE_S)
    elapsed = time.monotonic() - t0
    percent = {h: 100 * (cpu_seconds(p) - before[h]) / elapsed for h, p in pids.items()}
    print("\nidle CPU: " + ", ".join(f"{h} {v:.1f} %" for h, v in sorted(percent.items())))
    assert all(alive(p) for p in pids.values())
    assert all(v < LIMIT_PERCENT for v in percent.values()), percent
