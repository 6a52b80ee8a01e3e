"""What the underlay carries, seen by tshark on the fabric bridge: VXLAN per VPC, the
inner flows intact, and outer UDP source ports that spread flows (ECMP entropy)."""

import collections
import os
import signal

import pytest

from conftest import IP, T1, T2, T3, T4, iperf3_server, ns, ns_bg, ping, wait_until

pytestmark = pytest.mark.usefixtures("testbed")

FIELDS = ["vxlan.vni", "ip.src", "ip.dst", "udp.srcport", "udp.dstport", "tcp.srcport",
          "tcp.dstport"]
CAPTURE_LIMIT_S = 30  # tshark is stopped once the traffic is done
FLOWS = 4  # parallel iperf3 TCP connections = distinct inner 5-tuples


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """Rows (dict field -> list of values, outer first) of VXLAN frames seen on br0 while
    blue t1 sends TCP to t2 over FLOWS connections and red t3 pings red t4."""
    d = tmp_path_factory.mktemp("capture")
    out, err = open(d / "out", "w+"), open(d / "err", "w+")
    cmd = ["tshark", "-n", "-l", "-i", "br0", "-f", "udp port 4789",
           "-a", f"duration:{CAPTURE_LIMIT_S}", "-T", "fields", "-E", "separator=\t",
           "-E", "aggregator=,"]
    for f in FIELDS:
        cmd += ["-e", f]
    with ns_bg("jk-fabric", *cmd, stdout=out, stderr=err) as tshark:
        wait_until(lambda: "Capturing on" in (d / "err").read_text(), 10, "tshark to start")
        # Rate-limited so tshark on two cores keeps up and the output stays small.
        with iperf3_server(T2):
            ns(T1, "iperf3", "-c", IP[T2], "-t", "2", "-P", FLOWS, "-b", "5M", timeout=30)
        assert ping(T3, IP[T4], count=3)
        os.killpg(tshark.pid, signal.SIGINT)  # like Ctrl-C: tshark flushes and exits
        wait_until(lambda: tshark.poll() is not None, 10, "tshark to finish")
    rows = []
    for line in (d / "out").read_text().splitlines():
        values = line.split("\t")
        rows.append({f: (v.split(",") if v else []) for f, v in zip(FIELDS, values)})
    print(f"\n{len(rows)} VXLAN frames captured")
    assert rows, f"tshark captured nothing: {(d / 'err').read_text()}"
    return rows


def blue_tcp(rows):
    """Frames of VNI 100 carrying TCP from t1 to t2 (inner addresses are the 2nd ip.*)."""
    return [r for r in rows if r["vxlan.vni"] == ["100"] and r["tcp.srcport"]
            and r["ip.src"][1:] == [IP[T1]] and r["ip.dst"][1:] == [IP[T2]]]


def test_blue_tcp_travels_as_vni_100_between_underlay_hosts(capture):
    frames = blue_tcp(capture)
    assert frames, "no VNI 100 frame with inner TCP 198.19.1.1 -> 198.19.1.2"
    for r in frames:
        assert r["ip.src"][0] == "198.18.0.1" and r["ip.dst"][0] == "198.18.0.2"
        assert r["udp.dstport"][0] == "4789"


def test_red_traffic_travels_as_vni_200(capture):
    red = [r for r in capture if r["vxlan.vni"] == ["200"] and len(r["ip.src"]) == 2]
    assert red, "no VNI 200 frame with inner IPv4 seen while red t3 pinged red t4"
    assert all(r["ip.src"][1] in (IP[T3], IP[T4]) for r in red)


def test_every_vxlan_frame_goes_to_port_4789(capture):
    assert all(r["udp.dstport"][:1] == ["4789"] for r in capture)


def test_outer_source_port_is_stable_per_flow_and_varies_across_flows(capture):
    ports = collections.defaultdict(set)  # inner TCP source port -> outer UDP source ports
    for r in blue_tcp(capture):
        ports[r["tcp.srcport"][0]].add(r["udp.srcport"][0])
    print(f"\ninner TCP source port -> outer UDP source ports: {dict(ports)}")
    assert all(len(p) == 1 for p in ports.values()), "one flow used several outer ports"
    distinct = set().union(*ports.values()) if ports else set()
    # FLOWS data connections + iperf3's control connection.
    assert len(ports) >= FLOWS and len(distinct) >= 2, "outer source port carries no entropy"
