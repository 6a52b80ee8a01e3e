"""VPCs are isolated although they reuse addresses; a tenant cannot spoof its source."""

import pytest
from scapy.layers.inet import ICMP, IP as IPv4
from scapy.layers.l2 import Ether

from conftest import (IP, MAC, T1, T2, T3, T4, drops_matching, http_server, neighbor_mac, ns,
                      ping, send_frames, wait_until)

pytestmark = pytest.mark.usefixtures("testbed")


def fetch(client, ip, port):
    """True when an HTTP GET from `client` to ip:port succeeds within 3 s."""
    r = ns(client, "curl", "-s", "-o", "/dev/null", "-m", "3", f"http://{ip}:{port}/",
           timeout=10, check=False)
    return r.returncode == 0


def test_red_tenant_cannot_fetch_from_blue_server_at_same_address(tmp_path):
    # Only blue t1 listens on 198.19.1.1:8080; red t3 has the same address, no listener.
    with http_server(T1, IP[T1], 8080, tmp_path):
        assert fetch(T2, IP[T1], 8080), "blue t2 cannot fetch from blue t1 (control)"
        assert not fetch(T4, IP[T1], 8080), "ISOLATION BROKEN: red t4 fetched from blue t1"


def test_red_tenants_reach_each_other():
    assert ping(T4, IP[T3], count=3), "red t4 cannot ping red t3"


def test_blue_tenant_cannot_reach_red_only_service(tmp_path):
    # Only red t3 listens on 198.19.1.1:9090; to blue t2 that address is blue t1.
    with http_server(T3, IP[T3], 9090, tmp_path):
        assert fetch(T4, IP[T3], 9090), "red t4 cannot fetch from red t3 (control)"
        assert not fetch(T2, IP[T3], 9090), "ISOLATION BROKEN: blue t2 fetched from red t3"


@pytest.mark.parametrize("spoof", ["ip", "mac"])
def test_spoofed_source_is_dropped_and_counted(spoof):
    assert ping(T1, IP[T2], count=1)  # resolves the virtual gateway MAC in t1
    gw = neighbor_mac(T1, IP[T2])
    src_mac = MAC[T1] if spoof == "ip" else "02:00:c6:13:01:77"
    src_ip = "198.19.1.77" if spoof == "ip" else IP[T1]
    frame = Ether(src=src_mac, dst=gw) / IPv4(src=src_ip, dst=IP[T2]) / ICMP()
    before = drops_matching("h1", "spoof")
    send_frames(T1, "eth0", [frame] * 5)
    wait_until(lambda: drops_matching("h1", "spoof") >= before + 5, 3,
               'h1 drops with a "spoof" reason to grow by 5')
