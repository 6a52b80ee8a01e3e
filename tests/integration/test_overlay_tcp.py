"""Tenants of VPC blue talk IP over the overlay: across hosts (VxLAN) and on one host."""

import hashlib
import os

import pytest

from conftest import (IP, T1, T2, T5, http_server, iperf3_gbps, iperf3_server, ns, ping,
                      vnic_packets, wait_until)

pytestmark = pytest.mark.usefixtures("testbed")

# (client, server): t2 is on the other host, t5 on the same host as t1.
PAIRS = {"inter_host": (T1, T2), "intra_host": (T1, T5)}


@pytest.mark.parametrize("where", PAIRS)
def test_ping_reaches_blue_peer(where):
    src, dst = PAIRS[where]
    assert ping(src, IP[dst], count=3), f"{src} cannot ping {dst} ({where})"


@pytest.mark.parametrize("client,server", [(T2, T1), (T5, T1)], ids=["t2_to_t1", "t5_to_t1"])
def test_http_fetch_returns_file_intact(client, server, tmp_path):
    # 256 KiB spans many full-size segments, so checksums and MTU handling are exercised.
    body = os.urandom(256 * 1024)
    (tmp_path / "blob").write_bytes(body)
    with http_server(server, IP[server], 8080, tmp_path):
        r = ns(client, "curl", "-sf", "-m", "10", f"http://{IP[server]}:8080/blob",
               timeout=20, text=False)
    assert hashlib.sha256(r.stdout).hexdigest() == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize("where", PAIRS)
def test_iperf3_tcp_moves_data(where):
    client, server = PAIRS[where]
    with iperf3_server(server):
        gbps = iperf3_gbps(client, IP[server], seconds=5)
    print(f"\niperf3 {client} -> {server} ({where}): {gbps:.2f} Gbit/s")
    assert gbps > 0


def test_vnic_counters_grow_with_traffic():
    rx0, tx0 = vnic_packets("h1", "t1")
    assert ping(T1, IP[T2], count=5)
    # Counters are summed from the lcores when read; allow a moment for the last burst.
    wait_until(lambda: all(a > b for a, b in zip(vnic_packets("h1", "t1"), (rx0, tx0))),
               3, "vnic t1 rx and tx packet counters to grow")
