"""Malformed underlay frames injected from the fabric at h1 are dropped and counted with a
reason; jakirod stays up and the overlay keeps working."""

import pytest

from conftest import (IP, T1, T2, alive, drops, jakirod_pids, ping, send_frames, underlay_mac,
                      wait_until)
from malformed_frames import CASES

pytestmark = pytest.mark.usefixtures("testbed")


@pytest.fixture(scope="module")
def h1_mac():
    assert ping(T1, IP[T2], count=1)  # the bridge learns where h1 is
    return underlay_mac(1)


@pytest.mark.parametrize("case", CASES)
def test_malformed_frame_is_dropped_with_reason(case, h1_mac):
    build, words = CASES[case]
    before = drops("h1")
    send_frames("jk-fabric", "br0", [build(h1_mac, T1)] * 3)

    def grown():
        after = drops("h1")
        return {k: after[k] - before[k] for k in after if after[k] > before[k]}

    wait_until(lambda: grown(), 3, f"h1 drop counters to grow after {case}")
    reasons = grown()
    print(f"\n{case}: {reasons}")
    assert any(w in k.lower() for k in reasons for w in words), \
        f"no drop reason mentioning {words} grew: {reasons}"
    assert alive(jakirod_pids()["h1"]), "jakirod h1 died"


def test_overlay_still_works_after_malformed_frames(h1_mac):
    for build, _ in CASES.values():
        send_frames("jk-fabric", "br0", [build(h1_mac, T1)] * 10)
    assert all(alive(pid) for pid in jakirod_pids().values()), "a jakirod died"
    assert ping(T1, IP[T2], count=3)
