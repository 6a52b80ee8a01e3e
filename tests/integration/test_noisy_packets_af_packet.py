"""A tenant's packet rate on DPDK's af_packet ports (`--tenant-face af_packet`): the PMD's
socket cannot be left out of the worker's wake-ups, so frames beyond a vNIC's
`limits.max_packet_rate` are read and dropped at once, each counted under the drop reason
`packet_rate_exceeded` and in the vNIC's drops; the other tenants' are untouched. The control:
the same flood with the allowance raised goes through.
"""

import time

import pytest

from conftest import IP, T3, drops, jakiroctl, stats, stop
from test_noisy_packets import apply, flood_in_background, host_yaml, restore, vnic

pytestmark = pytest.mark.usefixtures("testbed")
TESTBED_ARGS = ["--tenant-face", "af_packet"]


def test_an_af_packet_tenant_over_its_packet_rate_has_the_rest_dropped_and_counted():
    cfg = host_yaml("h1")
    assert vnic(cfg, "t3")["port"].startswith("net_af_packet"), "not an af_packet test bed"
    seconds = 3

    def flood_t3(rate_allowed):
        vnic(cfg, "t3")["limits"] = {"max_packet_rate": rate_allowed}
        apply("h1", cfg)
        before = drops("h1")["packet_rate_exceeded"]
        vnics_before = {n: stats("h1")["vnics"][n]["drops"] for n in ("t1", "t5", "t3")}
        t4_before = stats("h2")["vnics"]["t4"]["to_tenant_packets"]
        attacker = flood_in_background(T3, IP["jk-h2-t4"], rate=20_000, seconds=seconds)
        try:
            sent = int(attacker.communicate(timeout=seconds + 20)[0].split()[-1])
        finally:
            stop(attacker)
        time.sleep(0.5)
        dropped = drops("h1")["packet_rate_exceeded"] - before
        vnic_drops = {n: stats("h1")["vnics"][n]["drops"] - vnics_before[n]
                      for n in vnics_before}
        arrived = stats("h2")["vnics"]["t4"]["to_tenant_packets"] - t4_before
        print(f"allowance {rate_allowed}/s: t3 sent {sent}, {dropped} dropped over it "
              f"(vNIC drops {vnic_drops}), t4 got {arrived}")
        return sent, dropped, vnic_drops, arrived

    try:
        sent, dropped, vnic_drops, arrived = flood_t3(2000)
        assert sent >= 15_000 * seconds, "the flood was too slow to prove anything"
        assert arrived <= 2000 * (seconds + 1) + 128
        # Every frame that did not pass was read and dropped for the rate (a few may die in
        # the sender's own socket or the PMD's ring).
        assert dropped >= 0.9 * (sent - arrived)
        assert vnic_drops["t3"] >= dropped and vnic_drops["t1"] == vnic_drops["t5"] == 0

        sent, dropped, _, arrived = flood_t3(1_000_000)
        assert dropped == 0 and arrived >= 0.9 * sent
    finally:
        restore()
        jakiroctl("h1", "stats")  # still answering
